#!/usr/bin/env bash
# Runs a multi-rank binary with overlaprun across K namespace hosts (one rank per host) with a hard
# timeout; the test passes when overlaprun exits 0.
#   cluster_mpi_test.sh HOSTS TIMEOUT_S BINARY [OVERLAPRUN OPTIONS...] [-- PROGRAM ARGS...]
# Used by the cluster_mpi_test macro (tests/cluster/cluster_test.bzl). Needs root and iproute2.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
hosts=$1 timeout_s=$2 binary=$3
shift 3
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
CLUSTER=$R/tools/cluster/cluster.sh
OVERLAPRUN=$R/launcher/overlaprun
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
launcher_args=()
while (($#)) && [ "$1" != -- ]; do launcher_args+=("$1"); shift; done
[ "${1:-}" != -- ] || shift

exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || { echo "FAIL: another test held the cluster lock for 300 s" >&2; exit 1; }
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
timeout 60 "$CLUSTER" up "$hosts" >/dev/null
start=$(date +%s%3N)
set +e
timeout -k 10 "$timeout_s" "$CLUSTER" exec "$OVERLAPRUN" -np "$hosts" --hostfile "$("$CLUSTER" hostfile)" \
  --tcp-only "${launcher_args[@]}" -- "$R/$binary" "$@"
rc=$?
set -e
echo "cluster_mpi_test: $binary on $hosts namespace hosts: status $rc in $(( $(date +%s%3N) - start )) ms"
[ "$rc" -ne 124 ] || echo "FAIL: still running after ${timeout_s} s" >&2
exit "$rc"
