#!/usr/bin/env bash
# Runs overlap's tests under GCC's sanitizers (docs/reliability.md, "Sanitizers"); CI runs the
# asan and tsan stages from tools/test.sh (OVERLAP_SANITIZE=0 skips them, ="asan" runs only the
# first, ="asan tsan-core" TSan's core suites only).
#
#   tools/sanitize.sh             the asan and tsan stages, as CI
#   tools/sanitize.sh asan        ASan+UBSan: every unit test (cc_test without an MPI launcher, a
#                                 GPU, a cluster or Python) and every 2-rank runtime suite
#   tools/sanitize.sh tsan        TSan: the 2-rank runtime suites, where the coordinator thread,
#                                 the user's threads and MPI meet, and the fake-world suites. Debian's Abseil is not
#                                 instrumented: --config=tsan links annotations that tell TSan
#                                 about absl::Mutex (third_party/system/absl_tsan_annotations.cc).
#   tools/sanitize.sh tsan-core   TSan on those suites less six of the eight scheduled_* planner
#                                 suites and three of the four scheduled_delayed_* ones
#   tools/sanitize.sh asan -- --test_output=all    extra arguments go to `bazel test`
#
# Each stage builds only the targets it tests, in its own output directory (--platform_suffix),
# so the uninstrumented build in bazel-out/k8-* stays as it was, and makes no bazel-* links.
# Tests that check a time limit skip that check when SANITIZER_BUILD is set (.bazelrc). The last
# line is the summary tools/test.sh prints; the exit status is non-zero when a test failed or did
# not build.
set -uo pipefail
cd "$(dirname "$0")/.."
# Ctrl-C, or tools/test.sh's time budget, stops the whole script, not just the step it is in (a
# fuzzer or Bazel exits cleanly on SIGINT, and bash would go on to the next step).
trap 'exit 130' INT

stages=()
while (($#)) && [[ $1 != -- ]]; do
  case "$1" in
    asan|tsan|tsan-core) stages+=("$1") ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
  shift
done
[[ ${1:-} == -- ]] && shift
((${#stages[@]})) || stages=(asan tsan)

query() { bazel query --noshow_progress "$1" 2>/dev/null; }
# Unit tests: cc_tests that need no mpirun, GPU, namespace cluster or Python.
unit_tests=$(query 'kind(cc_test, //tests/...)
  except attr(tags, "mpi|gpu|cluster|python|requires-root", //tests/...)
  except attr(name, "cuda", //tests/...)')
# The 2-rank runtime suites (mpi_test on 2 local ranks).
# Tests tagged "timing" check a time or a measured slow-down that instrumentation distorts;
# "no-sanitize" marks suites left out until a failure seen only under a sanitizer is explained.
# Plus the hierarchical allreduce's own suite, the executor code with the most buffer arithmetic
# (shards, segments, three lanes).
mpi_tests=$(query 'attr(name, "_2ranks_test$", kind(sh_test, //tests/runtime:all))
  + //tests/collectives:hierarchical_allreduce_4ranks_test
  except attr(tags, "timing|no-sanitize", //tests/...)')
if [[ -z $unit_tests || -z $mpi_tests ]]; then
  echo "sanitize: bazel query found no tests" >&2
  exit 1
fi

supp=$PWD/tools/sanitizers
status=0 summary=()
for stage in "${stages[@]}"; do
  if [[ $stage == asan ]]; then
    name=asan+ubsan targets="$unit_tests $mpi_tests"
    # Open MPI's leaks must show its library names for the suppressions to match: its plugins
    # stay loaded after MPI_Finalize, and stacks are unwound from DWARF (Debian builds Open MPI
    # without frame pointers, so the fast unwinder gave "<unknown module>" frames).
    configs=(--config=asan --config=ubsan
             "--test_env=LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
             --test_env=OMPI_MCA_mca_base_component_disable_dlclose=1)
  else
    # absl_mutex_test shows that TSan sees absl::Mutex (third_party/system/absl_tsan_annotations.cc);
    # the fakes' suites run simulated ranks on threads that share the fakes' state.
    threaded="//tests/sanitizers:absl_mutex_test //tests/fakes:fake_control_test
      //tests/runtime:negotiator_test //tests/runtime:planned_mode_test"
    name=$stage targets="$threaded $mpi_tests"
    # tsan-core: the suites where the user's threads, the coordinator and MPI meet, and of
    # the scheduled_* planner suites (2-3 minutes each under TSan) the two that reach every
    # planned-execution path the others use: dear (sliced buckets, reduce-scatter/all-gather
    # halves, channels) and a delayed bytescheduler plan (the delay line, periods, residuals).
    [[ $stage == tsan-core ]] &&
      targets="$threaded $(tr ' ' '\n' <<<"$mpi_tests" | grep -v ':scheduled_' | tr '\n' ' ')
        //tests/runtime:scheduled_dear_2ranks_test
        //tests/runtime:scheduled_delayed_bytescheduler_d1_p2_2ranks_test"
    configs=(--config=tsan "--test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:\
suppressions=$supp/tsan.supp")
  fi
  echo "sanitize: $stage: $(wc -w <<<"$targets") tests" >&2
  log=$(mktemp)
  start=$SECONDS
  # shellcheck disable=SC2086 # the target lists are whitespace-separated labels
  bazel test "${configs[@]}" --platform_suffix="${stage%-core}" --symlink_prefix=/ "$@" $targets 2>&1 |
    tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -cE '^//.* PASSED in' "$log")
  f=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
  rm -f "$log"
  ((rc == 0)) || status=1
  # A build failure reports no test lines: count it once.
  ((rc != 0 && f == 0)) && f=1
  summary+=("$name $p passed, $f failed ($((SECONDS - start)) s)")
done
line=$(printf '%s; ' "${summary[@]}")
echo "overlap sanitizers: ${line%; }"
exit "$status"
