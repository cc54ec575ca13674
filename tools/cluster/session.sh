# Sourced by scripts that hold the namespace cluster for a whole run (tools/cluster_bench.sh,
# bench/torch_side_by_side.sh). Needs CLUSTER (the path of cluster.sh) and die().
#
# cluster_session RATE: takes the machine's cluster lock (the one the cluster tests take,
# tests/cluster/BUILD), brings up 4 hosts with links capped at RATE, takes them down whenever the
# script exits, and sets HOSTFILE.
cluster_session() {
  exec 9>/tmp/overlap-cluster.lock
  flock -w 300 9 || die "another job held /tmp/overlap-cluster.lock for 300 s"
  trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
  trap 'exit 130' INT TERM
  timeout 60 "$CLUSTER" up 4 --rate "$1"
  HOSTFILE=$("$CLUSTER" hostfile)
}
