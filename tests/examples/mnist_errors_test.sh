#!/bin/bash
# mnist_mlp turns bad input into one clear line on stderr and a non-zero exit: flags and data
# before it starts the runtime (so no rank is left waiting on a collective), and the runtime's
# own errors as they come.
# Usage: mnist_errors_test.sh <mnist_mlp>
set -uo pipefail
mnist_mlp=$1
failures=0

# expect <exit code> <text stderr must contain> -- <args...>
expect() {
  local want_rc=$1 want_text=$2
  shift 3
  local err rc
  err=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mnist_mlp" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $want_rc || $err != *"$want_text"* || $(wc -l <<<"$err") -ne 1 ]]; then
    echo "FAIL: mnist_mlp $*: exit $rc, stderr: $err (want exit $want_rc and one line with '$want_text')"
    failures=$((failures + 1))
  else
    echo "ok: mnist_mlp $* -> $err"
  fi
}

expect 2 "unknown flag --bogus" -- --bogus 1
expect 2 "flag --epochs: bad value 'many'" -- --epochs many
expect 2 "flag --batch needs a value" -- --batch
expect 2 "flag --precision: bad value 'fp8'" -- --precision fp8
expect 2 "flag --momentum-correction: bad value 'yes'" -- --momentum-correction yes
expect 1 "/nonexistent/train-images-idx3-ubyte.gz: no such file" -- --data-dir /nonexistent
OVERLAP_FUSION_THRESHOLD=abc expect 1 "OVERLAP_FUSION_THRESHOLD='abc' is not valid" -- --max-steps 1

usage=$("$mnist_mlp" --help)
if [[ $? -ne 0 || $usage != *"--dump-weights FILE"* ]]; then
  echo "FAIL: --help did not print the usage"
  failures=$((failures + 1))
fi
[[ $failures -eq 0 ]] && echo PASS
exit $failures
