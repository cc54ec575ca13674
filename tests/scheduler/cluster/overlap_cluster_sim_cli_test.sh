#!/bin/bash
# Runs the real overlap-cluster-sim binary: JSON lines, timeline files, and one-line errors with
# exit 2 for bad flags and 1 for bad traces.
set -u
sim="$TEST_SRCDIR/$TEST_WORKSPACE/scheduler/cluster/overlap-cluster-sim"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$sim" --preset paper --jobs 10 --seed 4 --max-iterations 120 --json) ||
  fail "valid run exited $?"
[ "$(echo "$out" | wc -l)" -eq 16 ] || fail "expected 16 JSON lines, got: $out"
echo "$out" | head -1 | grep -q '^{"placement":"first-fit","communication":"srsf1","avg_jct_s":' ||
  fail "unexpected first line: $(echo "$out" | head -1)"
again=$("$sim" --preset paper --jobs 10 --seed 4 --max-iterations 120 --json)
[ "$out" = "$again" ] || fail "two runs with the same seed differ"

trace="$TEST_TMPDIR/trace.json"
cat > "$trace" <<'JSON'
{"jobs": [{"id": "a", "arrival_s": 0, "model": "resnet50", "workers": 8, "iterations": 5},
          {"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 2, "iterations": 5,
           "planner": "mgwfbp"}]}
JSON
"$sim" --trace "$trace" --placement first-fit --communication ada-srsf \
  --timeline "$TEST_TMPDIR/tl.json" > /dev/null || fail "trace run exited $?"
grep -q '"NIC of server 1"' "$TEST_TMPDIR/tl.json" || fail "timeline lacks NIC tracks"

check_error() {  # expected-exit expected-text args...
  local want=$1 text=$2; shift 2
  local err; err=$("$sim" "$@" 2>&1 >/dev/null); local rc=$?
  [ "$rc" -eq "$want" ] || fail "exit $rc (want $want) for: $*"
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "error is not one line: $err"
  echo "$err" | grep -q -- "$text" || fail "error '$err' lacks '$text'"
}
check_error 2 "unknown flag" --preset paper --bogus 1
check_error 2 "unknown policy" --preset paper --communication srsf9
check_error 2 "^overlap-cluster-sim: error: --link-utilization: expected a number in (0, 1]" \
  --preset paper --link-utilization 1.5
check_error 2 "--link-utilization" --preset paper --link-utilization 0
# u = 1 is the default model exactly: the same lines.
u1=$("$sim" --preset paper --jobs 10 --seed 4 --max-iterations 120 --json --link-utilization 1)
[ "$out" = "$u1" ] || fail "--link-utilization 1 differs from the default"
echo "$out" | head -1 | grep -q '"eta":0.2,"link_utilization":1.0,' || fail "no link_utilization"
bad="$TEST_TMPDIR/bad.json"
echo '{"jobs": [{"id": "x", "arrival_s": 0, "model": "alexnet", "workers": 2, "iterations": 3}]}' > "$bad"
check_error 1 "id 'x').*model: unknown model 'alexnet'" --trace "$bad"
echo '{"jobs": [{"id": "y", "arrival_s": -5, "model": "vgg16", "workers": 2, "iterations": 3}]}' > "$bad"
check_error 1 "id 'y').*arrival_s" --trace "$bad"
echo "PASS"
