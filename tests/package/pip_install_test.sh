#!/usr/bin/env bash
# `pip install .` of a copy of the source tree into a fresh virtual environment (which sees the
# system's torch and tensorflow), then overlap.torch from that environment on 2 ranks through the
# installed `overlaprun` command, and overlap.tensorflow with the op library pip compiled into the
# package (when tensorflow is installed). Bazel cannot run inside this test, so setup.py takes the
# already built binaries from OVERLAP_PREBUILT_DIR.
# usage: pip_install_test.sh LIBOVERLAP OVERLAPRUN
set -euo pipefail
lib=$1 launcher=$2
py=${OVERLAP_PYTHON:-python3}
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/pip.XXXXXX")
src=$work/src
mkdir -p "$src/runtime" "$work/prebuilt"
cp -L setup.py pyproject.toml "$src/"
cp -L runtime/c_api.h "$src/runtime/"
cp -rL python "$src/python"
cp -L "$lib" "$work/prebuilt/liboverlap.so"
cp -L "$launcher" "$work/prebuilt/overlaprun"
"$py" -m venv --system-site-packages "$work/venv"
# The venv's own setuptools (from ensurepip) may predate bdist_wheel; use the system's.
"$work/venv/bin/python" -m pip uninstall -q -y setuptools 2>/dev/null || true
OVERLAP_PREBUILT_DIR=$work/prebuilt "$work/venv/bin/python" -m pip install -q \
  --no-build-isolation --no-deps "$src"
[ -x "$work/venv/bin/overlaprun" ] || { echo "FAIL: no overlaprun command installed" >&2; exit 1; }

cat >"$work/check.py" <<'PY'
import os, sys, torch
import overlap.torch as hvd
assert os.path.realpath(hvd.__file__).startswith(os.path.realpath(sys.prefix)), hvd.__file__
hvd.init()
x = torch.full((3,), float(hvd.rank() + 1))
assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((3,), 3.0))
print("rank %d: installed overlap.torch works" % hvd.rank())
PY
cd "$work"
unset OVERLAP_LIBRARY PYTHONPATH
timeout -k 10 120 "$work/venv/bin/overlaprun" -np 2 --mpi-args "--mca btl self,vader,tcp" \
  -- "$work/venv/bin/python" "$work/check.py"

# overlap.run from a plain process, with the launcher the package installed (no OVERLAP_LAUNCHER).
cat >"$work/check_run.py" <<'PY'
import overlap

def world():
    import overlap.torch as hvd
    hvd.init()
    return hvd.rank(), hvd.size()

if __name__ == "__main__":
    assert overlap.run(world, np=2) == [(0, 2), (1, 2)]
    print("overlap.run works with the installed overlaprun")
PY
(unset OVERLAP_LAUNCHER; PATH=/usr/bin:/bin timeout -k 10 120 "$work/venv/bin/python" "$work/check_run.py")

if "$work/venv/bin/python" -c "import tensorflow" 2>/dev/null; then
  cat >"$work/check_tf.py" <<'PY'
import os, sys
import tensorflow as tf
import overlap.tensorflow as hvd
from overlap.tensorflow import op_library
package = os.path.dirname(os.path.realpath(hvd.__file__))
assert os.path.realpath(op_library.library_path()).startswith(package), op_library.library_path()
hvd.init()
x = tf.fill([3], float(hvd.rank() + 1))
assert hvd.allreduce(x, op=hvd.Sum).numpy().tolist() == [3.0] * 3
print("rank %d: installed overlap.tensorflow works with the op library pip compiled" % hvd.rank())
PY
  OVERLAP_TF_OPS_CACHE=$work/no-cache timeout -k 10 120 "$work/venv/bin/overlaprun" -np 2 \
    --mpi-args "--mca btl self,vader,tcp" -- "$work/venv/bin/python" "$work/check_tf.py"
else
  echo "pip_install_test: tensorflow not importable; overlap.tensorflow's install-time compile not checked"
fi
