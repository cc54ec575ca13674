#!/usr/bin/env bash
# Runs one overlap.torch or overlap.tensorflow pytest suite on N local ranks through overlaprun,
# every rank running `python -m pytest -q -x -p overlap_pytest SUITE`, with a hard timeout. The
# interpreter is $OVERLAP_PYTHON when set, else python3 from PATH. PYTHONPATH gets the package
# sources from the runfiles and the plugin's folder, OVERLAP_LIBRARY the core library.
#
# FRAMEWORK torch: the interpreter must import torch (CI installs it): a missing torch fails.
# FRAMEWORK tensorflow: without an importable tensorflow the test passes with a SKIPPED line
# that says why (CI installs tensorflow-cpu through tools/setup.sh, so there it runs). The op
# library is compiled against that TensorFlow once, before the ranks start, into a cache shared
# by the suites ($OVERLAP_TF_OPS_CACHE, default /tmp/overlap-tf-ops-$UID): a compile takes about
# half a minute, and the cache key (sources, TensorFlow version and flags, compiler) keeps a
# stale library from ever loading (python/overlap/tensorflow/build_ops.py).
#
# A run whose ranks passed but then aborted in MPI_Finalize fails too (as tests/mpirun_test.sh).
# usage: run_pytest.sh FRAMEWORK PLUGIN OVERLAPRUN NP TIMEOUT_S LIBOVERLAP PYTHON_DIR SUITE
#          [PYTEST_ARGS...]
#   PLUGIN: overlap_pytest.py (loaded by every rank with -p); tests/python_util/pytest_test.bzl
#   passes all of these.
set -u -o pipefail
framework=$1 plugin=$2 overlaprun=$3 np=$4 timeout_s=$5 library=$6 python_dir=$7 suite=$8
shift 8

abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# Two cores shared by up to four ranks: one compute thread per rank (and quiet TensorFlow logs).
export OMP_NUM_THREADS=1
# Unbuffered output and Python's fault handler: a rank that dies in native code still leaves
# everything it printed, and a crash prints every thread's stack.
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
forwarded=(OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED PYTHONFAULTHANDLER HOME)
case $framework in
  torch)
    check='import torch; print("torch", torch.__version__)' ;;
  tensorflow)
    export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=2 TF_CPP_MIN_LOG_LEVEL=2
    export TF_ENABLE_ONEDNN_OPTS=0
    forwarded+=(TF_NUM_INTRAOP_THREADS TF_NUM_INTEROP_THREADS TF_CPP_MIN_LOG_LEVEL
                TF_ENABLE_ONEDNN_OPTS)
    check='import tensorflow as tf, keras; print("tensorflow %s, keras %s" % (tf.__version__, keras.__version__))' ;;
  *)
    echo "run_pytest.sh: FRAMEWORK must be torch or tensorflow, got '$framework'" >&2
    exit 2 ;;
esac

python=${OVERLAP_PYTHON:-}
if [ -z "$python" ]; then
  python=$(command -v python3) || {
    echo "run_pytest.sh: no python3 on PATH ($PATH); set OVERLAP_PYTHON to an interpreter with $framework" >&2
    exit 1
  }
fi
if ! versions=$("$python" -c "$check" 2>&1); then
  if [ "$framework" = tensorflow ]; then
    echo "run_pytest.sh: SKIPPED: $python cannot import tensorflow, which the overlap.tensorflow suites need"
    echo "  (tools/setup.sh installs tensorflow-cpu; or point OVERLAP_PYTHON at an interpreter that has it):"
    echo "$versions" | tail -2
    exit 0
  fi
  echo "run_pytest.sh: FAIL: $python cannot import torch; the overlap.torch suites need it" >&2
  echo "  (install torch for that interpreter, or point OVERLAP_PYTHON at one that has it):" >&2
  echo "$versions" | tail -3 >&2
  exit 1
fi
if ! "$python" -c 'import pytest' 2>/dev/null; then
  echo "run_pytest.sh: FAIL: $python cannot import pytest" >&2
  exit 1
fi

# Bazel's test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
export OVERLAP_LIBRARY=$(abspath "$library")
plugin=$(abspath "$plugin")
export PYTHONPATH=$(abspath "$python_dir"):$(dirname "$plugin")${PYTHONPATH:+:$PYTHONPATH}
# pytest's cache would land in the read-only runfiles; bytecode too.
export PYTHONDONTWRITEBYTECODE=1
suite=$(abspath "$suite")
echo "run_pytest.sh: $np ranks, $python ($versions), $(basename "$suite")"

if [ "$framework" = tensorflow ]; then
  export OVERLAP_TF_OPS_CACHE=${OVERLAP_TF_OPS_CACHE:-/tmp/overlap-tf-ops-$(id -u)}
  if ! built=$("$python" -c 'from overlap.tensorflow import op_library; print(op_library.library_path())' 2>&1); then
    echo "run_pytest.sh: FAIL: the TensorFlow op library does not build:" >&2
    echo "$built" | tail -30 >&2
    exit 1
  fi
  echo "run_pytest.sh: op library $(echo "$built" | tail -1)"
fi

# Each rank writes its own log, printed rank by rank at the end: reports stay whole, and the
# last lines of a rank that exits are not lost when overlaprun tears the job down. -rs prints
# each skipped test's reason. --capture=tee-sys captures Python's output only: the runtime's own
# log (stall warnings, plan adoption) goes straight to the rank's log, and is kept when the
# per-test watchdog ends a hung rank (fd-level capture lost it with the capture file).
logs=$(mktemp -d)
export OVERLAP_TEST_LOG_DIR=$logs
exports=()
for name in "${forwarded[@]}"; do exports+=(-x "$name"); done
timeout -k 10 "$timeout_s" "$overlaprun" -np "$np" --mpi-args "--mca btl self,vader,tcp" \
  "${exports[@]}" \
  -- /bin/bash -c 'exec "$@" > "$OVERLAP_TEST_LOG_DIR/rank.${OMPI_COMM_WORLD_RANK:-x}.log" 2>&1' \
  rank "$python" -m pytest -q -x -rs --capture=tee-sys -p no:cacheprovider -p overlap_pytest \
  --color=no "$suite" "$@" \
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
if [ "$rc" -eq 0 ] && grep -q "Local abort after MPI_FINALIZE" "$logs"/*.log; then
  echo "run_pytest.sh: the ranks passed but aborted in MPI_Finalize (see above)" >&2
  rc=1
fi
rm -rf "$logs"
exit "$rc"
