#!/usr/bin/env bash
# overlap.tensorflow's pytest suites (//tests/tensorflow:all, 2 and 4 ranks) on each release of
# tensorflow-cpu from 2.16 on, each in its own cached virtual environment, ~/.cache/overlap/tf-VER
# (python3.11 -m venv; tensorflow-cpu==VER.* from PyPI with the Keras and numpy pip resolves for
# it, as a user gets them, plus pytest). Each version's run:
#   1. overlap installed into that venv as a user installs it (pip install --no-build-isolation
#      of the source tree, which compiles the op library against that TensorFlow into the
#      package), then a 2-rank allreduce from the venv's own overlaprun with that op library;
#   2. bazel test //tests/tensorflow:all with --test_env=OVERLAP_PYTHON=<the venv's python>.
# Then one line per version: targets passed/failed/skipped, and rank 0's pytest counts summed
# over the suites. Not part of tools/test.sh (the default environment's TensorFlow is tested
# there), as tools/test_torch201.sh; docs/tensorflow.md records the last run. Takes 6-15
# minutes per version on a 2-core machine, plus the first download (about 250 MB each).
#
#   tools/test_tf_versions.sh [--setup-only] [VERSION...] [-- BAZEL_TEST_ARGS...]
#       VERSION: 2.16 ... 2.21, or an exact 2.17.1; "+kerasK" (2.16+keras3.0) pins Keras K too
#       instead of the newest pip allows (venv tf-2.16-keras3.0); "system" is python3 from PATH
#       as it is (tools/test.sh's TensorFlow, not installed into). Default: 2.16 2.17 2.18 2.19
#       2.20 system.
#       --setup-only: create the venvs and stop. After --, arguments for bazel test
#       (--nocache_test_results, or targets narrower than //tests/tensorflow:all).
#   BAZEL="bazel --output_base=DIR" picks the Bazel command (default: bazel).
#   OVERLAP_TF_VENVS=DIR moves the venvs (default ~/.cache/overlap).
set -uo pipefail
cd "$(dirname "$0")/.."

die() { echo "test_tf_versions.sh: $*" >&2; exit 1; }

setup_only=0
versions=()
bazel_args=()
while (($#)); do
  case $1 in
    --) shift; bazel_args=("$@"); break ;;
    --setup-only) setup_only=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) versions+=("$1") ;;
  esac
  shift
done
((${#versions[@]})) || versions=(2.16 2.17 2.18 2.19 2.20 system)

read -r -a bazel <<<"${BAZEL:-bazel}"
venvs=${OVERLAP_TF_VENVS:-$HOME/.cache/overlap}
# tensorflow-cpu 2.16-2.21 all have CPython 3.11 wheels; the pyenv 3.11 is tools/setup.sh's.
python311=""
for p in python3.11 /root/.pyenv/versions/3.11*/bin/python3.11; do
  if command -v "$p" >/dev/null 2>&1; then python311=$(command -v "$p"); break; fi
done
[ -n "$python311" ] || die "needs python3.11 (pyenv install 3.11)"

# The venv's python for VERSION, created (and its packages installed) on first use.
venv_python() {
  local version=$1 venv=$venvs/tf-${1/+/-}
  if [ "$version" = system ]; then command -v python3; return; fi
  if [ -x "$venv/bin/python" ] && [ -e "$venv/.complete" ]; then
    echo "$venv/bin/python"
    return
  fi
  local tf=${version%%+*} keras="" spec
  [[ $version == *+keras* ]] && keras=${version#*+keras}
  spec=("tensorflow-cpu==$tf")
  [[ $tf =~ ^[0-9]+\.[0-9]+$ ]] && spec=("tensorflow-cpu==$tf.*")
  if [ -n "$keras" ]; then
    spec+=("keras==$keras")
    [[ $keras =~ ^[0-9]+\.[0-9]+$ ]] && spec[1]="keras==$keras.*"
  fi
  echo "test_tf_versions.sh: creating $venv (${spec[*]}, pytest)" >&2
  rm -rf "$venv"
  mkdir -p "$venvs"
  "$python311" -m venv "$venv" || return 1
  # setuptools and wheel: setup.py builds with --no-build-isolation, in this venv.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${spec[@]}" pytest \
    "setuptools>=61" wheel >&2 || return 1
  touch "$venv/.complete"
  echo "$venv/bin/python"
}

# mpi4py, for the process-set suite's communicator tests (they skip without it), built against
# the system Open MPI as tools/setup.sh does, never a binary wheel that could bring another MPI.
ensure_mpi4py() {
  "$1" -c 'import importlib.metadata as m; m.version("mpi4py")' 2>/dev/null && return
  echo "test_tf_versions.sh: building mpi4py against the system Open MPI for $1" >&2
  "$1" -m pip install -q --disable-pip-version-check --no-binary=mpi4py mpi4py >&2 ||
    echo "test_tf_versions.sh: mpi4py did not install; the communicator tests will skip" >&2
}

versions_of() {
  "$1" -c 'import tensorflow as tf, keras, numpy; print("tensorflow %s, keras %s, numpy %s" % (tf.__version__, keras.__version__, numpy.__version__))' 2>/dev/null | tail -1
}

if ((setup_only)); then
  rc=0
  for version in "${versions[@]}"; do
    if python=$(venv_python "$version"); then
      [ "$version" = system ] || ensure_mpi4py "$python"
      echo "$version: $python ($(versions_of "$python"))"
    else
      echo "$version: creating the venv failed (see above)"; rc=1
    fi
  done
  exit $rc
fi

# The binaries the install and the tests use, built once.
"${bazel[@]}" build --symlink_prefix=/ //runtime:liboverlap.so //launcher:overlaprun >&2 ||
  die "bazel build failed"
bazel_bin=$("${bazel[@]}" info --symlink_prefix=/ bazel-bin 2>/dev/null)
testlogs=$("${bazel[@]}" info --symlink_prefix=/ bazel-testlogs 2>/dev/null)
work=$(mktemp -d /tmp/test_tf_versions.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/prebuilt"
cp -L "$bazel_bin/runtime/liboverlap.so" "$bazel_bin/launcher/overlaprun" "$work/prebuilt/"

# pip install of a copy of what `pip install .` at the root packages (setup.py, pyproject.toml,
# python/, runtime/c_api.h): an install in the shared tree would write build/ and *.egg-info
# there. OVERLAP_PREBUILT_DIR gives setup.py the binaries built above (setup.py's own `bazel
# build` would use the default output base).
install_overlap() {
  local python=$1 src=$work/src
  rm -rf "$src" && mkdir -p "$src/runtime"
  cp setup.py pyproject.toml "$src/" && cp runtime/c_api.h "$src/runtime/" &&
    cp -r python "$src/python" || return 1
  find "$src" -name __pycache__ -prune -exec rm -rf {} +
  "$python" -m pip uninstall -q -y overlap >/dev/null 2>&1
  OVERLAP_PREBUILT_DIR=$work/prebuilt "$python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps "$src" || return 1
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
  (cd "$work" && unset OVERLAP_LIBRARY PYTHONPATH && export TF_CPP_MIN_LOG_LEVEL=2 &&
    OVERLAP_TF_OPS_CACHE=$work/no-cache timeout -k 10 180 "$(dirname "$python")/overlaprun" \
      -np 2 --mpi-args "--mca btl self,vader,tcp" -- "$python" "$work/check_tf.py")
}

# "targets P passed, F failed, S skipped; pytest on rank 0: ..." from bazel's output ($1: one
# "//tests/tensorflow:x  PASSED in 33.0s" line per target) and rank 0's pytest summaries
# ("55 passed, 1 skipped in 10.8s") in the test logs.
summarize() {
  local tp=0 tf=0 ts=0 passed=0 failed=0 skipped=0 target status log counts n
  while read -r target status; do
    log=$testlogs/${target#//}; log=${log/://}/test.log
    if [ "$status" != PASSED ]; then tf=$((tf + 1))
    elif grep -q "^run_pytest.sh: SKIPPED" "$log" 2>/dev/null; then ts=$((ts + 1)); continue
    else tp=$((tp + 1))
    fi
    counts=$(sed -n '/=== rank 0 ===/,/=== rank 1 ===/p' "$log" 2>/dev/null |
      grep -E '^=* ?[0-9]+ (passed|failed|skipped|errors?)\b' | tail -1)
    for n in passed failed skipped; do
      local c; c=$(grep -oE "[0-9]+ $n" <<<"$counts" | grep -oE '[0-9]+' | head -1)
      case $n in passed) passed=$((passed + ${c:-0})) ;; failed) failed=$((failed + ${c:-0})) ;;
        skipped) skipped=$((skipped + ${c:-0})) ;; esac
    done
  done < <(grep -E '^//tests/tensorflow:\S+ +(\(cached\) )?[A-Z]+' "$1" |
    sed -E 's/ +\(cached\)//' | awk '{print $1, $2}')
  echo "targets $tp passed, $tf failed, $ts skipped; pytest on rank 0: $passed passed," \
    "$failed failed, $skipped skipped"
}

summary=()
overall=0
for version in "${versions[@]}"; do
  if ! python=$(venv_python "$version"); then
    summary+=("$version: FAIL: could not create the venv (pip's output above)"); overall=1; continue
  fi
  [ "$version" = system ] || ensure_mpi4py "$python"
  found=$(versions_of "$python")
  echo "test_tf_versions.sh: $version: $python ($found)"
  if [ "$version" != system ] && ! install_overlap "$python"; then
    summary+=("$version ($found): FAIL: pip install of overlap or its 2-rank check failed (above)")
    overall=1
    continue
  fi
  start=$(date +%s)
  targets=(//tests/tensorflow:all)
  for arg in "${bazel_args[@]}"; do [[ $arg == //* ]] && targets=(); done
  "${bazel[@]}" test --symlink_prefix=/ --test_env=OVERLAP_PYTHON="$python" "${targets[@]}" \
    "${bazel_args[@]}" 2>&1 | tee "$work/bazel.log"
  rc=${PIPESTATUS[0]}
  line="$version ($found): bazel test rc $rc, $(( ($(date +%s) - start) / 60 )) min: $(summarize "$work/bazel.log")"
  summary+=("$line")
  echo "test_tf_versions.sh: $line"
  [ "$rc" -eq 0 ] || overall=1
done
echo "======================== test_tf_versions.sh summary ($(date -u +%Y-%m-%d)) ========================"
printf '%s\n' "${summary[@]}"
exit $overall
