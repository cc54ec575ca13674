#!/usr/bin/env bash
# examples/torch/fashion_mnist_cnn.py on 2 ranks, 1 epoch of 6,000 images, under a planner:
# the run must finish and reach 60% test accuracy (random is 10%; 2 ranks reach 69.5%).
# usage: torch_example_test.sh OVERLAPRUN LIBOVERLAP PLANNER
set -euo pipefail
overlaprun=$1 lib=$2 planner=$3
py=${OVERLAP_PYTHON:-python3}
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
export PYTHONPATH=$PWD/python OVERLAP_LIBRARY=$PWD/$lib OVERLAP_PROFILE_STEPS=3
out=$(timeout -k 10 400 "$overlaprun" -np 2 --mpi-args "--mca btl self,vader,tcp" -- \
  "$py" examples/torch/fashion_mnist_cnn.py --epochs 1 --train-limit 6000 --planner "$planner")
echo "$out"
"$py" - "$out" "$planner" <<'PY'
import json, sys
line = json.loads(sys.argv[1].strip().splitlines()[-1])
assert line["test_accuracy"] >= 0.60, line
if sys.argv[2] not in ("observed",):
    assert line["plan"], "no scheduled plan was adopted: %s" % line
print("OK", line)
PY
