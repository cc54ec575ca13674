#!/usr/bin/env bash
# Runs tests/runner/test_run.py with pytest in one plain process (the tests start overlaprun
# themselves), with a hard timeout. The interpreter is $OVERLAP_PYTHON, else python3 from PATH;
# it must import torch and pytest (the ranks reduce with overlap.torch).
# usage: run_test.sh OVERLAPRUN LIBOVERLAP PYTHON_DIR TEST_FILE
set -u -o pipefail
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
export OVERLAP_LAUNCHER=$(abspath "$1") OVERLAP_LIBRARY=$(abspath "$2")
export PYTHONPATH=$(abspath "$3")${PYTHONPATH:+:$PYTHONPATH}
test_file=$(abspath "$4")
python=${OVERLAP_PYTHON:-$(command -v python3)}
# Bazel's test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 PYTHONDONTWRITEBYTECODE=1
if ! "$python" -c 'import torch, pytest' 2>/dev/null; then
  echo "run_test.sh: FAIL: $python cannot import torch and pytest (tools/setup.sh installs them)" >&2
  exit 1
fi
cd "${TEST_TMPDIR:-$(mktemp -d)}"
exec timeout -k 10 600 "$python" -m pytest -q -rs -p no:cacheprovider --color=no "$test_file"
