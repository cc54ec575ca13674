#!/usr/bin/env bash
# Runs Horovod's own TensorFlow test files against overlap.tensorflow (docs/tensorflow.md,
# "Horovod's own test suite"): test/parallel/test_tensorflow2_keras.py by default, or
# test/parallel/test_tensorflow.py with --file (it also needs test/parallel/base_test_tensorflow.py
# and test/utils/common.py). Horovod's tests are not part of this repository: pass a checkout of
# github.com/horovod/horovod.
#
#   tools/horovod_tf_suite.sh HOROVOD_CHECKOUT [-np N] [--file test_tensorflow.py] [--each]
#                             [pytest arguments...]
#
# Random order: add `--random-order-seed=N` (pytest-random-order, installed here with the
# other test dependencies), as docs/tensorflow.md and docs/torch.md ran it.
#
# --each runs every test in a job of its own and prints one line per test: a test that fails on
# one rank only (an assertion about an older Horovod's semantics) leaves the ranks' collectives
# out of step, which in one job stalls every later test. The stall settings are short there
# (OVERLAP_STALL_WARNING_S=10, OVERLAP_STALL_TIMEOUT_S=30).
#
# `import horovod.tensorflow.keras` (and `horovod.keras`, Horovod's binding for standalone Keras,
# which with Keras 3 is the same Keras) resolve to overlap.tensorflow.keras itself, and
# `horovod.tensorflow` to overlap.tensorflow: one-line module aliases in a temporary directory;
# nothing of overlap is changed. The test imports one helper of Horovod's,
# horovod.common.util.is_version_greater_equal_than, which the shim provides. The only edit to
# the test is Keras 3's: `from keras.optimizers.legacy import optimizer_v2` (removed in Keras 3)
# becomes a stand-in whose use raises ImportError saying so, so that the file imports and the
# tests that need Keras 2's OptimizerV2 fail with that reason. Each rank writes its pytest output
# to $OUT/rank<N>.log (OUT defaults to a temporary directory, printed at the end).
set -euo pipefail
checkout=${1:?usage: tools/horovod_tf_suite.sh HOROVOD_CHECKOUT [-np N] [pytest arguments...]}
shift
np=2 file=test_tensorflow2_keras.py each=0
while (($#)); do
  case $1 in
    -np) np=$2; shift 2 ;;
    --file) file=$2; shift 2 ;;
    --each) each=1; shift ;;
    *) break ;;
  esac
done
test_file=test/parallel/$file
[[ -f $checkout/$test_file ]] ||
  { echo "horovod_tf_suite: $checkout/$test_file not found" >&2; exit 2; }
python3 -c "import overlap.tensorflow.keras" 2>/dev/null || {
  echo "horovod_tf_suite: overlap.tensorflow.keras is not importable; run" \
    "'pip install --no-build-isolation .' first (or set PYTHONPATH and OVERLAP_LIBRARY)" >&2
  exit 2
}
python3 -m pip install -q pytest pytest-timeout pytest-random-order parameterized packaging mock cloudpickle

work=$(mktemp -d)
OUT=${OUT:-$work/out}
mkdir -p "$work/shim/horovod/tensorflow/keras" "$work/shim/horovod/keras" \
  "$work/shim/horovod/common" "$work/shim/horovod/runner/util" "$work/test" "$OUT"
touch "$work/shim/horovod/__init__.py" "$work/shim/horovod/common/__init__.py" \
  "$work/shim/horovod/runner/__init__.py" "$work/shim/horovod/runner/util/__init__.py"
# test/utils/common.py imports in_thread; the TensorFlow tests do not call it.
cat >"$work/shim/horovod/runner/util/threads.py" <<'PY'
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
PY
alias_module() {  # alias_module DIR MODULE: DIR/__init__.py makes the import resolve to MODULE
  printf 'import sys\nimport %s\nsys.modules[__name__] = %s\n' "$2" "$2" >"$1/__init__.py"
}
alias_module "$work/shim/horovod/tensorflow" overlap.tensorflow
alias_module "$work/shim/horovod/tensorflow/keras" overlap.tensorflow.keras
alias_module "$work/shim/horovod/keras" overlap.tensorflow.keras
cat >"$work/shim/horovod/common/util.py" <<'PY'
from packaging import version


def is_version_greater_equal_than(ver, min_ver):
    return version.parse(ver) >= version.parse(min_ver)
PY
cat >"$work/shim/keras3_removed.py" <<'PY'
class _Removed:
    """Stands for a Keras 2 module that Keras 3 removed."""

    def __init__(self, what):
        self._what = what

    def __getattr__(self, name):
        raise ImportError("%s.%s: Keras 3 removed %s (Horovod's test needs Keras 2)"
                          % (self._what, name, self._what))


optimizer_v2 = _Removed("keras.optimizers.legacy.optimizer_v2")
PY
removed='s/^\( *\)from keras\.optimizers\.legacy import optimizer_v2$/'
removed+='\1from keras3_removed import optimizer_v2/'
sed "$removed" "$checkout/$test_file" >"$work/test/$file"
for helper in test/parallel/base_test_tensorflow.py test/utils/common.py; do
  [[ -f $checkout/$helper ]] && cp "$checkout/$helper" "$work/test/"
done
cat >"$work/rank.sh" <<SH
#!/usr/bin/env bash
cd "$work/test"
log="$OUT/\${OVERLAP_SUITE_TEST:-all}.rank\${OMPI_COMM_WORLD_RANK:-0}.log"
exec python3 -m pytest -v -rA -p no:cacheprovider --timeout 300 "\$@" >"\$log" 2>&1
SH
chmod +x "$work/rank.sh"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
overlaprun=$(command -v overlaprun || true)
overlaprun=${OVERLAPRUN:-${overlaprun:-overlaprun}}
forward=(-x PYTHONPATH)  # and overlap's library settings, when the caller set them
for name in OVERLAP_LIBRARY OVERLAP_TF_OPS_LIBRARY OVERLAP_TF_OPS_CACHE; do
  [[ -n ${!name:-} ]] && forward+=(-x "$name")
done
export PYTHONPATH="$work/shim:$work/test${PYTHONPATH:+:$PYTHONPATH}"
rc=0
if ((each)); then
  export OVERLAP_STALL_WARNING_S=10 OVERLAP_STALL_TIMEOUT_S=30
  forward+=(-x OVERLAP_SUITE_TEST)
  (cd "$work/test" && python3 -m pytest --collect-only -q -p no:cacheprovider "$file" "$@") |
    grep '::' >"$work/tests.txt" || true
  while read -r test; do
    export OVERLAP_SUITE_TEST=${test##*::}
    timeout 300 "$overlaprun" -np "$np" "${forward[@]}" "$work/rank.sh" "$@" "$test" </dev/null \
      >"$OUT/$OVERLAP_SUITE_TEST.overlaprun.log" 2>&1 || rc=1
    echo "$OVERLAP_SUITE_TEST: $(tail -n 1 "$OUT/$OVERLAP_SUITE_TEST.rank0.log" 2>/dev/null)"
  done <"$work/tests.txt"
else
  timeout 1800 "$overlaprun" -np "$np" "${forward[@]}" "$work/rank.sh" "$@" "$file" || rc=$?
  for log in "$OUT"/*.log; do
    echo "$(basename "$log"): $(tail -n 1 "$log")"
  done
fi
echo "horovod_tf_suite: logs in $OUT"
exit "$rc"
