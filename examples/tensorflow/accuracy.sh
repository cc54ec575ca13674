#!/usr/bin/env bash
# Fashion-MNIST Keras CNN with overlap.tensorflow.keras: 1 rank against 4 ranks under several
# planners, same epochs; prints each run's last JSON line and the accuracy gap to 1 rank
# (target: <= 1 point).
#   examples/tensorflow/accuracy.sh [--epochs N] [--planners "observed auto deft"]
set -euo pipefail
cd "$(dirname "$0")/../.."
epochs=2 planners="observed deft"
while (($#)); do
  case $1 in
    --epochs) epochs=$2; shift 2 ;;
    --planners) planners=$2; shift 2 ;;
    *) echo "accuracy.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=2
run() {  # ranks planner
  overlaprun -np "$1" --oversubscribe python3 examples/tensorflow/fashion_mnist_keras.py \
    --epochs "$epochs" --planner "$2" 2>/dev/null | grep '^{' | tail -1
}
base=$(run 1 observed)
echo "$base"
base_acc=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['test_accuracy'])" "$base")
for p in $planners; do
  line=$(run 4 "$p")
  echo "$line"
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); b=float(sys.argv[2]);
gap=100*(b-r['test_accuracy']); print('  4 ranks %-9s accuracy gap to 1 rank: %+.2f points %s' %
(r['planner'], gap, 'OK' if gap <= 1.0 else 'OVER 1 POINT'))" "$line" "$base_acc"
done
