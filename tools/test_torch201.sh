#!/usr/bin/env bash
# overlap.torch's pytest suites (//tests/torch:all, 2 and 4 ranks) on torch 2.0.1, the last torch
# Horovod supports, in the side-by-side's virtual environment (bench/horovod_venv.sh creates it on
# first use: the torch 2.0.1 download and a 2-minute Horovod build). Not part of tools/test.sh,
# which tests the newest torch; docs/torch.md records the last run.
#
#   tools/test_torch201.sh [extra bazel test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bench/horovod_venv.sh)
echo "test_torch201.sh: $python ($("$python" -c 'import torch; print("torch", torch.__version__)'))"
exec bazel test --test_env=OVERLAP_PYTHON="$python" //tests/torch:all "$@"
