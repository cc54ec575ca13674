#!/usr/bin/env bash
# Runs Horovod's own PyTorch test file against overlap.torch (docs/torch.md, "Horovod's own
# test suite"). Horovod's tests are not part of this repository: pass a checkout of
# github.com/horovod/horovod (any version; test/parallel/test_torch.py and test/utils/common.py).
#
#   tools/horovod_torch_suite.sh HOROVOD_CHECKOUT [-np N] [--file F] [pytest arguments...]
#
# --file names another file of test/parallel (default test_torch.py), e.g.
# test_adasum_pytorch.py.
#
# Random order: add `--random-order-seed=N` (pytest-random-order, installed here with the
# other test dependencies), as docs/tensorflow.md and docs/torch.md ran it.
#
# `import horovod.torch` resolves to overlap.torch itself (a one-line module alias in a temporary
# directory; nothing of overlap is changed). The only edit to the test is Python 3.11's: the
# removed inspect.getargspec becomes getfullargspec. Each rank writes its pytest output to
# $OUT/rank<N>.log (OUT defaults to a temporary directory, printed at the end).
set -euo pipefail
checkout=${1:?usage: tools/horovod_torch_suite.sh HOROVOD_CHECKOUT [-np N] [pytest arguments...]}
shift
np=2 file=test_torch.py
while (($#)); do
  case $1 in
    -np) np=$2; shift 2 ;;
    --file) file=$2; shift 2 ;;
    *) break ;;
  esac
done
for f in "test/parallel/$file" test/utils/common.py; do
  [[ -f $checkout/$f ]] || { echo "horovod_torch_suite: $checkout/$f not found" >&2; exit 2; }
done
python3 -c "import overlap.torch" 2>/dev/null ||
  { echo "horovod_torch_suite: overlap.torch is not importable; run 'pip install .' first" >&2; exit 2; }
python3 -m pip install -q pytest pytest-timeout pytest-random-order mock

work=$(mktemp -d)
OUT=${OUT:-$work/out}
mkdir -p "$work/shim/horovod/torch" "$work/shim/horovod/runner/util" "$work/test" "$OUT"
touch "$work/shim/horovod/__init__.py" "$work/shim/horovod/runner/__init__.py" \
  "$work/shim/horovod/runner/util/__init__.py"
cat >"$work/shim/horovod/torch/__init__.py" <<'PY'
import sys
import overlap.torch
sys.modules[__name__] = overlap.torch
PY
# common.py imports in_thread; the torch tests do not call it.
cat >"$work/shim/horovod/runner/util/threads.py" <<'PY'
import threading
def in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
PY
cp "$checkout/test/utils/common.py" "$work/test/"
sed 's/inspect\.getargspec(/inspect.getfullargspec(/g' "$checkout/test/parallel/$file" \
  >"$work/test/$file"
cat >"$work/rank.sh" <<SH
#!/usr/bin/env bash
cd "$work/test"
exec python3 -m pytest -v -rA -p no:cacheprovider --timeout 120 "\$@" $file \
  >"$OUT/rank\${OMPI_COMM_WORLD_RANK:-0}.log" 2>&1
SH
chmod +x "$work/rank.sh"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
rc=0
PYTHONPATH="$work/shim:$work/test${PYTHONPATH:+:$PYTHONPATH}" \
  timeout 1800 "${OVERLAPRUN:-overlaprun}" -np "$np" -x PYTHONPATH "$work/rank.sh" "$@" || rc=$?
for log in "$OUT"/rank*.log; do
  echo "$(basename "$log"): $(tail -n 1 "$log")"
done
echo "horovod_torch_suite: logs in $OUT"
exit "$rc"
