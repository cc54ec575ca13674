#!/usr/bin/env bash
# Builds overlap's libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang, ASan and UBSan, and runs
# each for a while over its seed corpus (tests/fuzz/corpus/<target>/).
#
#   tools/fuzz.sh                   every target for 60 s each
#   tools/fuzz.sh -t 600 plan_fuzz  one target for 10 minutes
#   tools/fuzz.sh -b                build only
#   tools/fuzz.sh -s                rewrite the binary seeds (tests/fuzz/make_seeds.cc)
#
# Bazel's toolchain here is GCC, which has no libFuzzer, so this script calls clang++ itself on the
# few sources each target needs (the SOURCES table below; a new decoder's target adds a line).
# Objects are cached in $OVERLAP_FUZZ_DIR (default /tmp/overlap-fuzz) and rebuilt when a source or
# a header they include changes. New inputs found during a run go to a scratch copy of the corpus,
# never into the repository. A crash, leak, sanitizer report or timeout leaves the input in
# $OVERLAP_FUZZ_DIR/artifacts/ and makes the script exit non-zero; to keep it as a regression
# seed, copy it into tests/fuzz/corpus/<target>/ (the Bazel tests //tests/fuzz:* replay every
# seed on each test run).
# Runs at the lowest CPU priority: fuzzing takes whole cores for as long as it is given.
set -euo pipefail
cd "$(dirname "$0")/.."
# Ctrl-C, or tools/test.sh's time budget, stops the whole script, not just the step it is in (a
# fuzzer or Bazel exits cleanly on SIGINT, and bash would go on to the next step).
trap 'exit 130' INT

seconds=60
build_only=0
seeds=0
while getopts "t:bsh" opt; do
  case "$opt" in
    t) seconds=$OPTARG ;;
    b) build_only=1 ;;
    s) seeds=1 ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

# The fuzzers build without CUDA: the stage links the stub of its CUDA path.
compression_srcs="runtime/planes/compression_stage.cc runtime/planes/no_cuda_compression.cc runtime/negotiation/messages.cc
  collectives/buffer_ops.cc collectives/no_cuda.cc collectives/scaling.cc
  collectives/dtype.cc $(ls compression/*.cc numeric/*.cc | tr '\n' ' ')"
plan_checkpoint_srcs="runtime/plan/plan_checkpoint.cc runtime/planes/plan_delays.cc runtime/plan/executable_plan.cc
  runtime/planes/buffer_pool.cc runtime/plan/launch_units.cc runtime/api/tensor.cc collectives/scaling.cc
  collectives/buffer_ops.cc collectives/no_cuda.cc"
# The scheduler's cost model, and the plan format on top of it: one group each, so a new
# dependency of theirs is added once.
cost_model_srcs="scheduler/profile.cc scheduler/json_util.cc scheduler/cost_model.cc
  collectives/link_shares.cc collectives/dtype.cc"
plan_srcs="scheduler/plan.cc $cost_model_srcs"
declare -A SOURCES=(
  [messages_fuzz]="runtime/negotiation/messages.cc runtime/negotiation/matcher.cc collectives/dtype.cc"
  [plan_fuzz]="$plan_srcs"
  [profile_fuzz]="$cost_model_srcs"
  [compression_snapshot_fuzz]="$compression_srcs"
  [config_env_fuzz]="runtime/api/config.cc runtime/api/env_vars.cc $compression_srcs"
  [launcher_args_fuzz]="launcher/parse_args.cc launcher/hosts.cc launcher/runtime_flags.cc
    runtime/api/env_vars.cc"
  [hostfile_fuzz]="launcher/hosts.cc"
  [plan_checkpoint_fuzz]="$plan_checkpoint_srcs $compression_srcs $plan_srcs"
  [make_seeds]="runtime/negotiation/matcher.cc $plan_srcs $compression_srcs $plan_checkpoint_srcs"
)
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(messages_fuzz plan_fuzz profile_fuzz compression_snapshot_fuzz config_env_fuzz
           launcher_args_fuzz hostfile_fuzz plan_checkpoint_fuzz)
fi

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (tools/setup.sh installs it)" >&2; exit 1; }
out=${OVERLAP_FUZZ_DIR:-/tmp/overlap-fuzz}
mkdir -p "$out/obj" "$out/bin" "$out/artifacts"
CXX=(nice -n 19 clang++ -std=c++17 -g -O1 -fno-omit-frame-pointer -ffp-contract=off
     -fsanitize=address,undefined -fno-sanitize-recover=undefined
     -I. -isystem /usr/lib/x86_64-linux-gnu/openmpi/include -isystem /usr/include/eigen3
     -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
ABSL_LIBS=(-labsl_statusor -labsl_raw_hash_set -labsl_hash -labsl_city -labsl_low_level_hash
           -labsl_status -labsl_cord -labsl_cordz_info -labsl_cord_internal -labsl_cordz_functions
           -labsl_cordz_handle -labsl_exponential_biased -labsl_synchronization
           -labsl_graphcycles_internal -labsl_stacktrace -labsl_symbolize
           -labsl_debugging_internal -labsl_demangle_internal -labsl_malloc_internal -labsl_time
           -labsl_civil_time -labsl_time_zone -labsl_str_format_internal -labsl_strings
           -labsl_strings_internal -labsl_int128 -labsl_throw_delegate -labsl_base
           -labsl_spinlock_wait -labsl_raw_logging_internal -labsl_log_severity)

# Compiles $1 to $2 unless $2 is newer than $1 and every header its .d file lists.
compile() {
  local src=$1 obj=$2 dep=${2%.o}.d
  if [[ -f $obj && -f $dep ]]; then
    local stale=0 f
    for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$dep"); do
      [[ $f -nt $obj ]] && { stale=1; break; }
    done
    ((stale)) || return 0
  fi
  "${CXX[@]}" -fsanitize=fuzzer-no-link -MMD -MF "$dep" -c "$src" -o "$obj"
}

build() {
  local t=$1 objs=() src obj
  local -A seen=()
  for src in tests/fuzz/$t.cc ${SOURCES[$t]}; do
    # The tables share sources (a target taking two groups lists some twice); link each once.
    [[ -n ${seen[$src]+x} ]] && continue
    seen[$src]=1
    obj=$out/obj/$(echo "${src%.cc}" | tr / _).o
    compile "$src" "$obj"
    objs+=("$obj")
  done
  local main=-fsanitize=fuzzer
  [[ $t == make_seeds ]] && main=-fsanitize=fuzzer-no-link
  "${CXX[@]}" "$main" "${objs[@]}" -o "$out/bin/$t" "${ABSL_LIBS[@]}" -lspdlog -lfmt \
    -pthread
}

if ((seeds)); then
  build make_seeds
  "$out/bin/make_seeds" tests/fuzz/corpus
  exit 0
fi

status=0
for t in "${targets[@]}"; do
  [[ -n ${SOURCES[$t]+x} ]] || { echo "fuzz: unknown target $t" >&2; exit 2; }
  echo "fuzz: building $t" >&2
  build "$t"
  ((build_only)) && continue
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$t/." "$work/"
  echo "fuzz: running $t for ${seconds} s" >&2
  if ! nice -n 19 "$out/bin/$t" "$work" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$t-" 2>"$out/$t.log"; then
    echo "fuzz: $t FOUND A PROBLEM; log $out/$t.log, input in $out/artifacts/" >&2
    tail -40 "$out/$t.log" >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units|^#[0-9]+ *DONE' "$out/$t.log" | tr '\n' ' ' >&2
    echo >&2
  fi
  rm -rf "$work"
done
exit "$status"
