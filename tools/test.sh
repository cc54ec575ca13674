#!/usr/bin/env bash
# Runs every overlap test on this machine: Catch2 unit tests, multi-rank tests under mpirun,
# launcher and failure tests, the network-namespace cluster tests (those need root; without
# it they fail, saying so), a short pass of each fuzz target, the unit and 2-rank tests under
# the sanitizers, and clang-tidy, within an hour on 2 cores: the checks after the Bazel tests
# run as far as OVERLAP_TIME_BUDGET_MIN allows (below). Without a CUDA toolkit the GPU tests are absent and one line
# says so (OVERLAP_CUDA_HOME, see README). Installs missing Debian packages first (tools/setup.sh).
# 4-rank suites that only repeat their 2-rank twin run with OVERLAP_EXTENDED=1.
# Extra arguments go to `bazel test`, e.g. tools/test.sh --test_tag_filters=-mpi,-extended
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
# The Python tests (overlap.torch) run with the interpreter that has torch (tools/setup.sh).
export OVERLAP_PYTHON=${OVERLAP_PYTHON:-$(command -v python3)}
log=$(mktemp)
# Wall seconds per stage, in the summary line: CI's time budget is spent here.
stage_start=$SECONDS times=""
stage_done() { times="$times $1 $((SECONDS - stage_start))s"; stage_start=$SECONDS; }
# 4-rank suites that repeat their 2-rank twin are tagged "extended" (tests/torch/BUILD,
# tests/tensorflow/BUILD): run only with OVERLAP_EXTENDED=1. A --test_tag_filters of the
# caller's replaces this one.
filters=(--test_tag_filters=-extended)
[ "${OVERLAP_EXTENDED:-0}" = 1 ] && filters=()
# The run's time: the later stages start only if the time each usually takes still fits in
# OVERLAP_TIME_BUDGET_MIN (default 60, issue 34), and each is stopped at the budget's end, so a
# slow machine loses a stage (the summary says so) instead of running past CI's 90 minutes. The
# bazel test stage is stopped at OVERLAP_TIME_LIMIT_MIN (default 80), and fails the run then.
budget_s=$((${OVERLAP_TIME_BUDGET_MIN:-60} * 60))
limit_s=$((${OVERLAP_TIME_LIMIT_MIN:-80} * 60))
# within SECONDS_LEFT CMD...: runs CMD in its own process group and interrupts the group (as
# Ctrl-C would, so that bazel cancels its actions) when the seconds are up, killing it 30 s later
# if it is still there; 124 whenever the seconds ran out, whatever CMD returned.
within() {
  local left=$1; shift
  ((left > 0)) || return 124
  local end=$((SECONDS + left)) status
  timeout -s INT -k 30 "$left" "$@"
  status=$?
  ((SECONDS < end)) || return 124
  return "$status"
}
started=$(mktemp)  # test logs newer than this one are this run's
within $((limit_s - SECONDS)) bazel test //... "${filters[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 124 ] && echo "overlap tests: bazel test stopped at OVERLAP_TIME_LIMIT_MIN ($((limit_s / 60)) minutes)"
# GPU test targets that ran here without a GPU and skipped (tests/gpu/gpu_gate.h warns
# "skipping GPU check"; pytest's -rs prints "SKIPPED ... GPU ..."): counted for the summary, so
# that a run with no GPU cannot read as one that checked the device path.
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
gpu_skipped=0
if [ -d "$testlogs" ]; then
  gpu_skipped=$(find "$testlogs" -name test.log -newer "$started" -print0 2>/dev/null |
    xargs -0 -r grep -lE 'skipping GPU check|^SKIPPED .*GPU' | wc -l)
fi
rm -f "$started"
passed=$(grep -cE '^//.* PASSED in' "$log")
# The names of the failed targets go in the summary line too: CI shows only the tail of the log,
# and the sanitizer and clang-tidy stages print thousands of lines after this one.
failed_names=$(grep -E '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" | awk '{print $1}')
failed=$(grep -c . <<<"$failed_names")
failed_names=$(paste -sd' ' <<<"$failed_names")
rm -f "$log"
stage_done bazel-test
# The later stages run in order of what they catch, each only if the time it usually takes
# still fits in the run's budget, and each stopped at the budget's end; a stage left out or
# stopped for time says so in the summary line, with the minutes used, and does not fail the run.
fits() {  # fits SECONDS_IT_USUALLY_TAKES
  ((SECONDS + $1 <= budget_s))
}
over_budget() {
  echo "SKIPPED for time ($((SECONDS / 60)) of $((budget_s / 60)) minutes used; OVERLAP_TIME_BUDGET_MIN)"
}
stopped() {
  echo "STOPPED for time at $((SECONDS / 60)) of $((budget_s / 60)) minutes (OVERLAP_TIME_BUDGET_MIN), results so far above"
}
# run_stage NAME USUAL_SECONDS SUMMARY_PREFIX CMD...: runs CMD as a stage when the time it
# usually takes still fits, stopped at the budget's end. Sets `result` to the last line of its
# output that starts with SUMMARY_PREFIX (the prefix taken off; "" when it printed none, or for
# an empty prefix), or to why it was left out or stopped; `stage_status` to CMD's status (124
# stopped, 125 left out). A stage that fails fails the run.
run_stage() {
  local name=$1 usual=$2 prefix=$3 stage_log
  shift 3
  result=""
  if ! fits "$usual"; then
    result=$(over_budget) stage_status=125
    return
  fi
  stage_log=$(mktemp)
  within $((budget_s - SECONDS)) "$@" 2>&1 | tee "$stage_log"
  stage_status=${PIPESTATUS[0]}
  [ -n "$prefix" ] && result=$(sed -n "s/^$prefix//p" "$stage_log" | tail -1)
  if [ "$stage_status" -eq 124 ]; then
    result=$(stopped)
  elif [ "$stage_status" -ne 0 ]; then
    rc=1
  fi
  rm -f "$stage_log"
  stage_done "$name"
}
# A short pass of every libFuzzer target (tools/fuzz.sh, docs/reliability.md), first: it takes a
# few minutes and also checks that the fuzz targets still build. OVERLAP_FUZZ_SECONDS=0 skips it.
fuzz_s=${OVERLAP_FUZZ_SECONDS:-10}
fuzz="skipped (OVERLAP_FUZZ_SECONDS=0)"
if [ "$fuzz_s" != 0 ]; then
  run_stage fuzz 300 "" tools/fuzz.sh -t "$fuzz_s"
  case $stage_status in
    0) fuzz="passed" ;;
    124 | 125) fuzz=$result ;;
    *) fuzz="FAILED to build or found a problem (above)" ;;
  esac
fi
# The unit tests and the 2-rank runtime suites again under ASan+UBSan, and the threaded
# fake-world suites with the core 2-rank suites under TSan (tools/sanitize.sh,
# docs/reliability.md); OVERLAP_SANITIZE=0 skips them, OVERLAP_SANITIZE=asan runs ASan only,
# OVERLAP_SANITIZE="asan tsan" TSan on every 2-rank runtime suite (about 8 minutes more).
sanitize=${OVERLAP_SANITIZE:-asan tsan-core}
sanitizers=""
[ "$sanitize" = 0 ] && sanitizers="skipped (OVERLAP_SANITIZE=0)"
run_sanitizer() {  # run_sanitizer STAGE SECONDS_IT_USUALLY_TAKES
  [[ " $sanitize " == *" $1 "* ]] || return 0
  run_stage "$1" "$2" "overlap sanitizers: " tools/sanitize.sh "$1"
  # The sanitizer's own line names it; a line of ours (left out, stopped) does not.
  case $stage_status in
    124 | 125) result="$1 $result" ;;
  esac
  sanitizers="${sanitizers:+$sanitizers; }${result:-$1: no summary (above)}"
}
# clang-tidy on the library and tool sources (.clang-tidy, tools/clang_tidy.sh); every finding
# fails the run. OVERLAP_CLANG_TIDY=0 skips it.
tidy="skipped (OVERLAP_CLANG_TIDY=0)"
run_tidy() {
  [ "${OVERLAP_CLANG_TIDY:-1}" != 0 ] || return 0
  run_stage clang-tidy 360 "overlap clang-tidy: " tools/clang_tidy.sh
  tidy=$result
}
run_tsan() {
  local stage
  for stage in $sanitize; do
    [ "$stage" = asan ] || run_sanitizer "$stage" 420
  done
}
# The asan stage (about 23 minutes on 2 cores) and clang-tidy with the tsan-core stage (about
# 12) do not both fit in the hour after the Bazel tests and the fuzz pass (about 33). Which goes
# first follows the commit (the parity of its hash's last digit; OVERLAP_CHECKS_FIRST=asan or
# tidy chooses), so that consecutive commits cover both; the other runs after it if it fits.
last_digit=$(git rev-parse HEAD 2>/dev/null | cut -c40)
checks_first=${OVERLAP_CHECKS_FIRST:-$([ -n "$last_digit" ] && (((16#$last_digit) % 2)) && echo tidy || echo asan)}
if [ "$checks_first" = tidy ]; then
  run_tidy; run_tsan; run_sanitizer asan 1380
else
  run_sanitizer asan 1380; run_tidy; run_tsan
fi
# Claims in docs/ that drift with the code (tools/check_docs.py): the module dependency table
# against the includes, and the last GPU run against the GPU data path's last change.
docs_check="passed"
python3 tools/check_docs.py || { docs_check="FAILED (above)"; rc=1; }
tools/cuda_status.sh || true
echo "overlap tests: ${passed} passed, ${failed} failed${failed_names:+ ($failed_names)};" \
  "GPU: ${gpu_skipped} test targets skipped for want of a GPU;" \
  "fuzz: ${fuzz}; docs: ${docs_check}; sanitizers: ${sanitizers:-no summary (above)}; clang-tidy: ${tidy:-no summary (above)};" \
  "wall:${times} (${checks_first} first)"
exit "$rc"
