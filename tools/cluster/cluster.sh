#!/usr/bin/env bash
# A multi-host cluster on one machine: K hosts as network namespaces joined to a switch.
#
#   cluster.sh up K [--rate RATE] [--queue-ms MS] [--slots N]
#                                   create (or re-create) hosts h1..hK, links capped at RATE
#                                   behind a queue of at most MS ms (default 100), N slots per
#                                   host in the hostfile (default 1)
#   cluster.sh down                 remove every namespace and file it made
#   cluster.sh hostfile             print the path of the hostfile
#   cluster.sh status               list hosts, addresses and link states
#   cluster.sh exec CMD...          run CMD in the head namespace, where overlaprun/mpirun run
#   cluster.sh link HOST up|down    take a host's link up or down (failure tests)
#
# Layout (nothing is added to the machine's own namespace; see docs/launcher.md):
#   ovl-sw    a namespace holding the bridge "br0" (the switch)
#   ovl-head  the head node: 10.77.0.254, runs mpirun; has no ranks
#   ovl-hI    host hI: 10.77.0.I on its "eth0", a veth whose peer "pI" sits on the bridge
# With --rate, both directions of every host link are capped with tc tbf (netem does not exist
# in this kernel), so a host sends and receives at most RATE; tbf queues what waits for the cap
# up to --queue-ms of it (tbf's latency) and drops the rest; ACKs share the queue with data.
#
# mpirun reaches hosts through cluster_rsh.sh next to this script (plm_rsh_agent), which starts
# orted inside the host's namespace with its own UTS hostname, so ranks on different hosts see different
# hostnames and Open MPI talks TCP between them. The files the launcher needs are in
# $OVERLAP_CLUSTER_DIR (default /tmp/overlap-cluster): hostfile, mpi.env.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # tc and ip live here; test runners often leave them out

PREFIX=ovl
DIR=${OVERLAP_CLUSTER_DIR:-/tmp/overlap-cluster}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUBNET_BASE=10.77.0

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (network namespaces, veth, tc); run it as root or with sudo"
  command -v ip >/dev/null || die "the 'ip' command is missing; install iproute2"
}

host_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]+$" || true; }

kill_namespace_processes() {
  local ns=$1 pids
  mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
  ((${#pids[@]} == 0)) || kill -9 "${pids[@]}" 2>/dev/null || true
}

cmd_down() {
  need_root down
  local ns
  for ns in $(host_namespaces) ${PREFIX}-head ${PREFIX}-sw; do
    ip netns list | awk '{print $1}' | grep -x "$ns" >/dev/null || continue
    kill_namespace_processes "$ns"
    # Deleting a namespace deletes the veth ends and the bridge inside it.
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true
  rm -rf "$DIR"
}

# tbf on the egress of one interface. The burst must hold at least one timer tick of traffic at
# RATE or the cap undershoots; 1/100 s of RATE (at least 64 KiB) is enough on tickless kernels.
cap_link() {
  local ns=$1 dev=$2 rate=$3 queue_ms=$4 bits burst
  bits=$(rate_bits "$rate")
  burst=$(( bits / 8 / 100 ))
  (( burst >= 65536 )) || burst=65536
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency "${queue_ms}ms"
}

rate_bits() {
  local r=${1,,} n unit
  n=${r%%[a-z]*}; unit=${r#"$n"}
  [[ $n =~ ^[0-9]+$ ]] || die "--rate '$1' is not a tc rate like 1gbit or 500mbit"
  case $unit in
    bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    *) die "--rate '$1': the unit must be bit, kbit, mbit or gbit" ;;
  esac
}

write_hosts_file() {
  local k=$1 i
  echo "127.0.0.1 localhost"
  echo "${SUBNET_BASE}.254 head"
  for ((i = 1; i <= k; i++)); do echo "${SUBNET_BASE}.$i h$i"; done
}

add_node() {
  local ns=$1 addr=$2 port=$3 hosts=$4
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n ${PREFIX}-sw link add "$port" type veth peer name eth0 netns "$ns"
  ip -n ${PREFIX}-sw link set "$port" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  # ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts, so names resolve inside.
  mkdir -p "/etc/netns/$ns"
  echo "$hosts" >"/etc/netns/$ns/hosts"
}

cmd_up() {
  need_root up
  local k=${1:-} rate="" slots=1 queue_ms=100
  shift || true
  if ! [[ $k =~ ^[0-9]+$ ]] || ((k < 1 || k > 200)); then
    die "up needs a host count 1..200, got '${k}'"
  fi
  while (($#)); do
    case $1 in
      --rate) rate=${2:-}; [ -n "$rate" ] || die "--rate needs a value like 1gbit"; rate_bits "$rate" >/dev/null; shift 2 ;;
      --rate=*) rate=${1#--rate=}; rate_bits "$rate" >/dev/null; shift ;;
      --queue-ms) queue_ms=${2:-}; shift 2 || true ;;
      --queue-ms=*) queue_ms=${1#--queue-ms=}; shift ;;
      --slots) slots=${2:-}; shift 2 || true ;;
      --slots=*) slots=${1#--slots=}; shift ;;
      *) die "unknown option '$1' for up (known: --rate RATE, --queue-ms MS, --slots N)" ;;
    esac
  done
  [[ $queue_ms =~ ^[1-9][0-9]*$ ]] && ((queue_ms <= 10000)) ||
    die "--queue-ms needs milliseconds 1..10000, got '${queue_ms}'"
  [[ $slots =~ ^[1-9][0-9]*$ ]] || die "--slots needs a positive integer, got '${slots}'"
  # Idempotent: whatever an earlier run left behind is removed first.
  cmd_down
  local hosts i
  hosts=$(write_hosts_file "$k")
  ip netns add ${PREFIX}-sw
  ip -n ${PREFIX}-sw link set lo up
  ip -n ${PREFIX}-sw link add br0 type bridge
  ip -n ${PREFIX}-sw link set br0 up
  add_node ${PREFIX}-head "${SUBNET_BASE}.254" phead "$hosts"
  for ((i = 1; i <= k; i++)); do
    add_node "${PREFIX}-h$i" "${SUBNET_BASE}.$i" "p$i" "$hosts"
    if [ -n "$rate" ]; then
      cap_link "${PREFIX}-h$i" eth0 "$rate" "$queue_ms"
      cap_link ${PREFIX}-sw "p$i" "$rate" "$queue_ms"
    fi
  done
  mkdir -p "$DIR"
  for ((i = 1; i <= k; i++)); do echo "h$i slots=$slots"; done >"$DIR/hostfile"
  cat >"$DIR/mpi.env" <<EOF
# Open MPI settings for this cluster: rsh agent into the namespaces, TCP only on its subnet.
OMPI_MCA_plm_rsh_agent=$HERE/cluster_rsh.sh
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_btl=tcp,self
OMPI_MCA_btl_tcp_if_include=${SUBNET_BASE}.0/24
OMPI_MCA_oob_tcp_if_include=${SUBNET_BASE}.0/24
# Through tbf on veth, one TCP connection carrying both directions reaches about half the cap
# (62 of 122 MB/s measured) while two one-way connections each reach it; two links per peer pair
# restore full duplex, as a real NIC would give.
OMPI_MCA_btl_tcp_links=2
EOF
  echo "${rate:-uncapped}" >"$DIR/rate"
  echo "cluster.sh: up: $k hosts h1..h$k on ${SUBNET_BASE}.0/24, links ${rate:-uncapped}${rate:+ (queue ${queue_ms} ms)}; hostfile $DIR/hostfile" >&2
}

cmd_hostfile() {
  [ -f "$DIR/hostfile" ] || die "no cluster is up (no $DIR/hostfile); run: tools/cluster/cluster.sh up K"
  echo "$DIR/hostfile"
}

cmd_status() {
  need_root status
  local ns
  [ -f "$DIR/hostfile" ] || { echo "cluster.sh: no cluster is up"; return 0; }
  echo "links: $(cat "$DIR/rate")"
  for ns in ${PREFIX}-head $(host_namespaces | sort -V); do
    printf '%-10s %s\n' "${ns#"${PREFIX}"-}" "$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}') $(ip -n "$ns" -o link show eth0 | grep -o 'state [A-Z]*')"
  done
}

cmd_exec() {
  need_root exec
  (($#)) || die "exec needs a command"
  ip netns list | awk '{print $1}' | grep -x ${PREFIX}-head >/dev/null || die "no cluster is up; run: tools/cluster/cluster.sh up K"
  # The cluster's Open MPI settings go into the environment of the command.
  set -a
  # shellcheck disable=SC1090,SC1091
  . "$DIR/mpi.env"
  set +a
  exec ip netns exec ${PREFIX}-head "$@"
}

cmd_link() {
  need_root link
  local host=${1:-} state=${2:-}
  [[ $host =~ ^h[0-9]+$ ]] || die "link needs a host name like h2, got '$host'"
  [[ $state == up || $state == down ]] || die "link needs 'up' or 'down', got '$state'"
  ip -n ${PREFIX}-sw link show "p${host#h}" >/dev/null 2>&1 || die "host $host is not in the cluster"
  ip -n ${PREFIX}-sw link set "p${host#h}" "$state"
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    hostfile) cmd_hostfile ;;
    status) cmd_status ;;
    exec) cmd_exec "$@" ;;
    link) cmd_link "$@" ;;
    *) die "usage: cluster.sh up K [--rate RATE] [--queue-ms MS] [--slots N] | down | hostfile | status | exec CMD... | link HOST up|down" ;;
  esac
}

main "$@"
