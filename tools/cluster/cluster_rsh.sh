#!/usr/bin/env bash
# rsh agent for the namespace cluster (tools/cluster/cluster.sh): mpirun runs
#   cluster_rsh.sh [options] HOST COMMAND...
# the way it would run ssh, and this starts COMMAND in host HOST's network namespace with a UTS
# namespace whose hostname is HOST, so each namespace host looks like its own machine to Open MPI
# and to the ranks. Like ssh, the command words are joined and run by a shell.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # tc and ip live here; test runners often leave them out
while [[ ${1:-} == -* ]]; do shift; done  # ssh-style options mpirun may add; none apply here
host=${1:-}
shift || true
[ -n "$host" ] || { echo "cluster_rsh.sh: usage: cluster_rsh.sh HOST COMMAND..." >&2; exit 255; }
# Accept the names h1..hK and their addresses 10.77.0.1..K.
case $host in
  h[0-9]*) ns=ovl-$host ;;
  10.77.0.[0-9]*) host=h${host##*.}; ns=ovl-$host ;;
  *) echo "cluster_rsh.sh: '$host' is not a cluster host (expected h1..hK or 10.77.0.K)" >&2; exit 255 ;;
esac
if ! ip netns list | awk '{print $1}' | grep -x "$ns" >/dev/null; then
  echo "cluster_rsh.sh: host $host does not exist (no namespace $ns); run tools/cluster/cluster.sh up K" >&2
  exit 255
fi
# Exit 255 like ssh when the host's link is down, so reachability checks fail the same way.
if ! ip -n "$ns" -o link show eth0 | grep 'state UP' >/dev/null ||
   ! ip -n ovl-sw -o link show "p${host#h}" | grep 'state UP' >/dev/null; then
  echo "cluster_rsh.sh: host $host is unreachable: its link is down" >&2
  exit 255
fi
(($#)) || { echo "cluster_rsh.sh: no command for host $host" >&2; exit 255; }
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1"; shift; exec /bin/sh -c "$*"' sh "$host" "$@"
