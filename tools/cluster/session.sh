# Sourced by scripts that hold the namespace cluster for a whole run (tools/cluster_bench.sh,
# tools/hetero_bench.sh, bench/torch_side_by_side.sh). Needs CLUSTER (the path of cluster.sh),
# ROOT (the repository) and die().
#
# cluster_session RATE [SLOTS]: takes the machine's cluster lock (the one the cluster tests take,
# tests/cluster/BUILD), brings up 4 hosts with links capped at RATE (and SLOTS ranks per host in
# the hostfile, 1 by default), takes them down whenever the script exits, and sets HOSTFILE.
cluster_session() {
  exec 9>/tmp/overlap-cluster.lock
  flock -w 300 9 || die "another job held /tmp/overlap-cluster.lock for 300 s"
  trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
  trap 'exit 130' INT TERM
  timeout 60 "$CLUSTER" up 4 --rate "$1" --slots "${2:-1}"
  HOSTFILE=$("$CLUSTER" hostfile)
}

# copy_binaries BUILD PATH...: builds the Bazel targets of the bazel-bin PATHs (bench/model_step
# is //bench:model_step) unless BUILD is 0, and copies them into a new temporary folder, BIN (with
# LOG=$BIN/logs), so that a concurrent build cannot swap them mid-run.
copy_binaries() {
  local build=$1 b bazel_bin targets=()
  shift
  for b in "$@"; do targets+=("//${b%/*}:${b##*/}"); done
  if ((build)); then
    (cd "$ROOT" && bazel build "${targets[@]}" >&2) || die "bazel build failed"
  fi
  BIN=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
  LOG=$BIN/logs
  mkdir -p "$LOG"
  # bazel info, not the bazel-bin symlink: another output base in this workspace may re-point it.
  bazel_bin=$(cd "$ROOT" && bazel info bazel-bin 2>/dev/null) || die "bazel info bazel-bin failed"
  for b in "$@"; do
    [ -x "$bazel_bin/$b" ] || die "$bazel_bin/$b is missing; build it or drop --no-build"
    cp "$bazel_bin/$b" "$BIN/"
  done
  chmod -R a+rx "$BIN"
}
