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

# Bad profile files, the whole line as users see it (docs/bad-inputs.md quotes these).
check_line() {  # file-contents expected-line
  local f="$TEST_TMPDIR/profile.json"
  [ -z "$1" ] || echo "$1" > "$f"
  local err; err=$("$sim" --profile "${3:-$f}" --workers 4 --planners wfbp --cost ring \
    --latency-us 1 --bandwidth-gbit 10 2>&1 >/dev/null); local rc=$?
  [ "$rc" -eq 1 ] || fail "exit $rc (want 1) for profile $1"
  [ "$err" = "$2" ] || fail "error '$err', expected '$2'"
}
p="$TEST_TMPDIR/profile.json"
check_line '{"model": "m", "update_ms": 1, "layers": [}' \
  "overlap-sim: error: $p: not valid JSON (line 1 column 43: syntax error while parsing value - unexpected '}'; expected '[', '{', or a literal)"
check_line '{"model": "m", "update_ms": 1e400, "layers": []}' \
  "overlap-sim: error: $p: not valid JSON (number overflow parsing '1e400')"
check_line '{"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1, "backward_ms": 1, "tensors": [{"name": "w", "bytes": 6}]}]}' \
  "overlap-sim: error: $p: profile 'm' tensors[0] 'w': bytes must be > 0 and a multiple of 4 (float32), got 6"
check_line '{"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1, "backward_ms": 1, "tensors": [{"name": "w", "bytes": 4}, {"name": "w", "bytes": 4}]}]}' \
  "overlap-sim: error: $p: profile 'm' tensors[1] 'w': duplicate tensor name"
check_line '{"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1, "backward_ms": 1, "tensors": [{"name": "w", "bytes": 4, "dtype": "float12"}]}]}' \
  "overlap-sim: error: $p: layers[0].tensors[0].dtype: unknown dtype name 'float12'"
check_line '' "overlap-sim: error: /no/such.json: cannot open profile file" /no/such.json
# --slow-link: the 64 MiB allreduce of docs/benchmarks.md ("Slow links and stragglers"), as its
# overlap-sim command runs it; the predicted slowdowns over uniform links.
one="$TEST_SRCDIR/$TEST_WORKSPACE/docs/data/allreduce_64mib.json"
comm_ms() {
  "$sim" --profile "$one" --workers 4 --planners wfbp --cost ring --latency-us 50 \
    --bandwidth-gbit 1 --json "$@" | sed 's/.*"comm_ms":\([^,]*\),.*/\1/'
}
uniform=$(comm_ms) || fail "uniform run exited $?"
half=$(comm_ms --slow-link 2:0.5) || fail "--slow-link 2:0.5 exited $?"
ring=$(comm_ms --slow-link 2:0.5 --adaptive-allreduce off) || fail "ring run exited $?"
quarter=$(comm_ms --slow-link 2:0.25) || fail "--slow-link 2:0.25 exited $?"
awk -v u="$uniform" -v h="$half" -v r="$ring" -v q="$quarter" 'BEGIN {
  ok = h / u > 1.33 && h / u < 1.34 && r / u > 1.99 && r / u < 2.01 && q / u > 2.66 && q / u < 2.67
  exit !ok }' || fail "slowdowns $half/$ring/$quarter ms over $uniform ms are not 4/3, 2, 8/3"
check_error 2 "--slow-link: expected HOST:FRACTION .*got '2:1.5'" --model vgg16 --workers 4 \
  --planners wfbp --cost ring --latency-us 1 --bandwidth-gbit 10 --slow-link 2:1.5
check_error 2 "--slow-link: host 4 is not among the 4 hosts" --model vgg16 --workers 4 \
  --planners wfbp --cost ring --latency-us 1 --bandwidth-gbit 10 --slow-link 4:0.5
echo "PASS"
