#!/usr/bin/env bash
# Elastic training under faults on the 4-host namespace cluster (root): tools/chaos.py says what
# it injects and measures; docs/elastic.md has the results.
#
#   tools/chaos.sh --quick            3 faults (a killed rank, a host's link down 20 s, a host out
#                                     of discovery for 30 s) with the recovery times; 3-5 minutes
#   tools/chaos.sh [--minutes 20]     the soak: a random fault every 1-2 minutes, then a check of
#                                     the final loss against a fault-free run (--reference)
#
# From a source checkout it builds overlaprun and liboverlap.so with Bazel first; a test passes
# the runfiles (--root, --bin). The last line reads
#   chaos: N faults injected, N survived, 0 committed steps lost
# and the exit status is non-zero otherwise. Takes the cluster lock the cluster tests take.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=""
args=()
while (($#)); do
  case $1 in
    --root) ROOT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "chaos.sh: needs root (network namespaces, tc, nftables)" >&2; exit 1; }
python=${OVERLAP_PYTHON:-$(command -v python3)}
if [ -z "$BIN" ]; then
  (cd "$ROOT" && bazel build //launcher:overlaprun //runtime:liboverlap.so >&2)
  BIN=$ROOT/bazel-bin
fi
CLUSTER=$ROOT/tools/cluster/cluster.sh
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d /tmp/overlap-chaos.XXXXXX)}
exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || { echo "chaos.sh: another job held /tmp/overlap-cluster.lock for 300 s" >&2; exit 1; }
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
timeout 60 "$CLUSTER" up 4
export HOME=${HOME:-/tmp} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "chaos.sh: logs in $out" >&2
"$python" "$ROOT/tools/chaos.py" --root "$ROOT" --bin "$BIN" --python "$python" \
  --train "$ROOT/tests/elastic/elastic_train.py" --out "$out" "${args[@]}"
