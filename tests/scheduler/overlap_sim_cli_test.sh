#!/bin/bash
# Runs the real overlap-sim binary: success output, and one-line errors with non-zero exits.
set -u
sim="$TEST_SRCDIR/$TEST_WORKSPACE/scheduler/overlap-sim"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$sim" --model bert-base --workers 16 --planners all --cost ring --latency-us 10 \
  --bandwidth-gbit 10 --staleness 1 --json) || fail "valid run exited $?"
[ "$(echo "$out" | wc -l)" -eq 8 ] || fail "expected 8 JSON lines, got: $out"

check_error() {  # expected-exit expected-text args...
  local want=$1 text=$2; shift 2
  local err; err=$("$sim" "$@" 2>&1 >/dev/null); local rc=$?
  [ "$rc" -eq "$want" ] || fail "exit $rc (want $want) for: $*"
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "error is not one line: $err"
  echo "$err" | grep -q -- "$text" || fail "error '$err' lacks '$text'"
}
check_error 2 "unknown flag" --model vgg16 --bogus
check_error 2 "unknown planner" --model vgg16 --workers 4 --planners nope --cost ring \
  --latency-us 1 --bandwidth-gbit 10
bad="$TEST_TMPDIR/bad.json"
echo '{"model": "m", "update_ms": 1, "layers": [{"name": "a"}]}' > "$bad"
check_error 1 "layers\[0\].forward_ms: missing" --profile "$bad" --workers 4 --planners wfbp \
  --cost ring --latency-us 1 --bandwidth-gbit 10
echo "PASS"
