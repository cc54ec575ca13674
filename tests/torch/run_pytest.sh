#!/usr/bin/env bash
# Runs one overlap.torch pytest suite on N local ranks through overlaprun, every rank running
# `python -m pytest -q -x SUITE`, with a hard timeout. The interpreter is $OVERLAP_PYTHON when set,
# else python3 from PATH; it must import torch (CI installs it): a missing torch fails the test.
# PYTHONPATH gets the package sources from the runfiles and OVERLAP_LIBRARY the core library.
# A run whose ranks passed but then aborted in MPI_Finalize fails too (as tests/mpirun_test.sh).
# usage: run_pytest.sh OVERLAPRUN NP TIMEOUT_S LIBOVERLAP PYTHON_DIR SUITE [PYTEST_ARGS...]
set -u -o pipefail
overlaprun=$1 np=$2 timeout_s=$3 library=$4 python_dir=$5 suite=$6
shift 6

abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

python=${OVERLAP_PYTHON:-}
if [ -z "$python" ]; then
  python=$(command -v python3) || {
    echo "run_pytest.sh: no python3 on PATH ($PATH); set OVERLAP_PYTHON to an interpreter with torch" >&2
    exit 1
  }
fi
if ! torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>&1); then
  echo "run_pytest.sh: FAIL: $python cannot import torch; the overlap.torch suites need it" >&2
  echo "  (install torch for that interpreter, or point OVERLAP_PYTHON at one that has it):" >&2
  echo "$torch_version" | tail -3 >&2
  exit 1
fi
if ! "$python" -c 'import pytest' 2>/dev/null; then
  echo "run_pytest.sh: FAIL: $python cannot import pytest" >&2
  exit 1
fi

# Bazel's test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
export OVERLAP_LIBRARY=$(abspath "$library")
export PYTHONPATH=$(abspath "$python_dir")${PYTHONPATH:+:$PYTHONPATH}
# Two cores shared by up to four ranks: one compute thread per rank.
export OMP_NUM_THREADS=1
# pytest's cache would land in the read-only runfiles; bytecode too.
export PYTHONDONTWRITEBYTECODE=1
suite=$(abspath "$suite")
echo "run_pytest.sh: $np ranks, $python (torch $torch_version), $(basename "$suite")"

# Each rank writes its own log, printed rank by rank at the end: reports stay whole, and the
# last lines of a rank that exits are not lost when overlaprun tears the job down.
logs=$(mktemp -d)
export OVERLAP_TEST_LOG_DIR=$logs
timeout -k 10 "$timeout_s" "$overlaprun" -np "$np" --mpi-args "--mca btl self,vader,tcp" \
  -x OMP_NUM_THREADS -x PYTHONDONTWRITEBYTECODE -x HOME \
  -- /bin/bash -c 'exec "$@" > "$OVERLAP_TEST_LOG_DIR/rank.${OMPI_COMM_WORLD_RANK:-x}.log" 2>&1' \
  rank "$python" -m pytest -q -x -p no:cacheprovider --color=no "$suite" "$@" \
  > "$logs/overlaprun.log" 2>&1
rc=$?
for rank_log in $(ls "$logs"/rank.*.log 2>/dev/null | sort -V); do
  rank=${rank_log##*/rank.}
  echo "======================== rank ${rank%.log} ========================"
  cat "$rank_log"
done
echo "======================== overlaprun ========================"
cat "$logs/overlaprun.log"
if [ "$rc" -eq 124 ]; then
  echo "run_pytest.sh: the ranks did not finish within ${timeout_s}s" >&2
fi
if [ "$rc" -eq 0 ] && cat "$logs"/*.log | grep -q "Local abort after MPI_FINALIZE"; then
  echo "run_pytest.sh: the ranks passed but aborted in MPI_Finalize (see above)" >&2
  rc=1
fi
rm -rf "$logs"
exit "$rc"
