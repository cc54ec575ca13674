#!/usr/bin/env bash
# Trains the Fashion-MNIST example on 4 ranks under every planner and prints each one's final
# loss and test accuracy, and the step at which its plan took effect. Synchronous plans must give
# exactly the numbers of the observed plan (the sums are the same; only their schedule differs).
#   tools/planner_accuracy.sh [--epochs N]   (default 2; needs a build: bazel build //launcher:overlaprun //examples:mnist_mlp)
set -uo pipefail
cd "$(dirname "$0")/.."
epochs=2
[ "${1:-}" = "--epochs" ] && epochs=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for p in observed wfbp fusion mgwfbp bytescheduler usbyte dear deft auto; do
  out=$(OVERLAP_PLANNER=$p OVERLAP_LOG_LEVEL=info timeout 900 bazel-bin/launcher/overlaprun -np 4 -- \
        bazel-bin/examples/mnist_mlp --epochs "$epochs" 2>&1)
  last=$(echo "$out" | grep "^epoch $epochs " | head -1)
  adopted=$(echo "$out" | grep -o "rank 0: step [0-9]*: adopted the [a-z:]* plan ([0-9]* buckets" | head -1)
  echo "$p | ${last:-FAILED} | ${adopted:-no scheduled plan}"
done
