#!/usr/bin/env bash
# Horovod's own elastic examples, unchanged, through the `horovod` alias package (docs/torch.md)
# under overlaprun's elastic flags on the 4-host namespace cluster (root), with the discovery
# script dropping h4 mid-run and listing it again later (docs/elastic.md has the run):
#   examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py   (needs torchvision)
#   examples/elastic/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py
# usage: tools/horovod_elastic_examples.sh HOROVOD_CHECKOUT [torch|tensorflow|both]
#   HOROVOD_CHECKOUT: a clone of horovod/horovod (its examples/ folder is what is used)
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
checkout=${1:?usage: tools/horovod_elastic_examples.sh HOROVOD_CHECKOUT [torch|tensorflow|both]}
which=${2:-both}
examples=$checkout/examples/elastic
[ -d "$examples" ] || { echo "no $examples: give a clone of horovod/horovod" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "needs root (the namespace cluster)" >&2; exit 1; }
python=${OVERLAP_PYTHON:-$(command -v python3)}
(cd "$ROOT" && bazel build //launcher:overlaprun //runtime:liboverlap.so >&2)
CLUSTER=$ROOT/tools/cluster/cluster.sh
work=$(mktemp -d /tmp/overlap-hvd-elastic.XXXXXX)
alias_dir=$("$python" -m overlap.horovod_alias "$work/alias" 2>/dev/null || PYTHONPATH=$ROOT/python "$python" -m overlap.horovod_alias "$work/alias")
export PYTHONPATH=$alias_dir:$ROOT/python OVERLAP_LIBRARY=$ROOT/bazel-bin/runtime/liboverlap.so
export OVERLAP_ELASTIC_PYTHON=$python OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 HOME=${HOME:-/tmp}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=2
exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || { echo "another job held /tmp/overlap-cluster.lock for 300 s" >&2; exit 1; }
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
timeout 60 "$CLUSTER" up 4

# Runs one example; h4 leaves the discovery output at its 5th iteration, returns at its 15th.
run() {
  local name=$1 script=$2
  shift 2
  local hosts=$work/$name.hosts out=$work/$name.out
  # Written aside and renamed: the driver never reads half a list.
  list() { printf '%s\n' "$@" >"$hosts.new" && mv "$hosts.new" "$hosts"; }
  list h1 h2 h3 h4
  (
    until grep -q 'Iter #5' "$out" 2>/dev/null; do sleep 0.5; done
    list h1 h2 h3; echo "=== $(date +%T) h4 removed from discovery" >>"$out"
    until grep -q 'Iter #15' "$out" 2>/dev/null; do sleep 0.5; done
    list h1 h2 h3 h4; echo "=== $(date +%T) h4 listed again" >>"$out"
  ) &
  local watcher=$! start=$SECONDS rc=0
  timeout -k 10 1500 "$CLUSTER" exec "$ROOT/bazel-bin/launcher/overlaprun" --min-np 2 --max-np 4 \
    --host-discovery-script "cat $hosts" --tcp-only -x OMP_NUM_THREADS -x TF_CPP_MIN_LOG_LEVEL \
    "$python" "$script" "$@" >>"$out" 2>&1 || rc=$?
  kill "$watcher" 2>/dev/null || true
  echo "=== $name: status $rc in $((SECONDS - start)) s; output in $out"
  grep -E 'Number of|Iter #|Img/sec|Total img/sec|elastic:|===' "$out" | grep -v '^rank [1-9]'
  return "$rc"
}

status=0
if [ "$which" != tensorflow ]; then
  "$python" -c 'import torchvision' 2>/dev/null ||
    { echo "the torch example needs torchvision: pip install --no-deps torchvision pillow" >&2; exit 1; }
  run torch "$examples/pytorch/pytorch_synthetic_benchmark_elastic.py" --no-cuda \
    --model resnet18 --batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 2 \
    --num-iters 30 || status=1
fi
if [ "$which" != torch ]; then
  # Its reset callback calls opt.lr.assign(...): Keras 3 removed the `lr` alias of
  # `learning_rate` (Horovod itself stops at TensorFlow 2.15, Keras 2), so it fails at the first
  # restart as written. Run a copy with that one name changed, and say so.
  tf_example=$work/tensorflow2_synthetic_benchmark_elastic.py
  sed 's/opt\.lr\.assign/opt.learning_rate.assign/' \
    "$examples/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py" >"$tf_example"
  echo "=== tensorflow: running a copy with one change for Keras 3:"
  diff "$examples/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py" "$tf_example" || true
  run tensorflow "$tf_example" --no-cuda \
    --model MobileNetV2 --batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 2 \
    --num-iters 30 || status=1
fi
exit $status
