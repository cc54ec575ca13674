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
# The process-set suite's communicator tests need mpi4py (built against the system Open MPI, as
# tools/setup.sh does); without it they skip.
if ! "$python" -c 'import importlib.metadata as m; m.version("mpi4py")' 2>/dev/null; then
  echo "test_torch201.sh: building mpi4py against the system Open MPI into the venv" >&2
  "$python" -m pip install -q --disable-pip-version-check mpi4py >&2 ||
    echo "test_torch201.sh: mpi4py did not install; the communicator tests will skip" >&2
fi
# The suites run under pytest, which the Horovod venv does not need for itself.
if ! "$python" -c 'import pytest' 2>/dev/null; then
  echo "test_torch201.sh: installing pytest into the venv" >&2
  "$python" -m pip install -q --disable-pip-version-check pytest >&2
fi
versions='import importlib.metadata as m, torch
try:
    mpi4py = "mpi4py " + m.version("mpi4py")
except m.PackageNotFoundError:
    mpi4py = "no mpi4py"
print("torch", torch.__version__ + ",", mpi4py)'
echo "test_torch201.sh: $python ($("$python" -c "$versions"))"
exec bazel test --test_env=OVERLAP_PYTHON="$python" //tests/torch:all "$@"
