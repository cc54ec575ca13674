#!/bin/bash
# Data parallelism must not change the mathematics: training on 4 ranks gives the same weights as
# training on 1 rank with the same global batch, up to float rounding.
#
# The global batch of 254 splits unevenly over 4 ranks (64, 64, 63, 63) and one epoch ends with a
# short batch of 56 rows, so both normalisation corner cases run; 237 optimizer steps in all.
# Usage: mnist_equivalence_test.sh <mnist_mlp> <compare_weights>
set -euo pipefail

mnist_mlp=$1
compare=$2
out=${TEST_TMPDIR:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=(--epochs 1 --batch 254 --lr 0.05 --seed 3)

run() {
  local ranks=$1
  shift
  echo "== $ranks rank(s): $mnist_mlp ${flags[*]} $*"
  timeout 120 mpirun --oversubscribe -np "$ranks" "$mnist_mlp" "${flags[@]}" "$@"
}

run 1 --dump-weights "$out/one_rank.bin"
run 4 --dump-weights "$out/four_ranks.bin"

echo "== 4 ranks against 1 rank"
"$compare" "$out/four_ranks.bin" "$out/one_rank.bin" --atol 1e-4 --rtol 1e-3

# The comparison must be able to fail: one step fewer is a different model.
run 1 --max-steps 236 --dump-weights "$out/one_step_short.bin" > /dev/null
echo "== 1 rank, 236 steps, against 237 steps (must differ)"
if "$compare" "$out/one_step_short.bin" "$out/one_rank.bin" --atol 1e-4 --rtol 1e-3; then
  echo "FAIL: the comparator accepted weights one step apart"
  exit 1
fi
echo "PASS"
