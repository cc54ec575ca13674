#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy at the repository root) on overlap's own C++ sources, with the
# include paths and defines Bazel compiles them with (tools/compile_commands.py). CI runs it from
# tools/test.sh (OVERLAP_CLANG_TIDY=0 skips it). Every finding is an error; the last line is the
# summary tools/test.sh prints.
#
#   tools/clang_tidy.sh                      the library and tool sources (numeric, collectives,
#                                            compression, launcher, runtime, scheduler), as CI
#   tools/clang_tidy.sh --all                also bench/, examples/ and tests/
#   tools/clang_tidy.sh --analyzer [...]     also the clang-analyzer checks of .clang-tidy, which
#                                            double the time (CI leaves them out)
#   tools/clang_tidy.sh runtime/api/runtime.cc   just these files
# Nothing else may build in this output base meanwhile: clang-tidy reads the execroot.
#   OVERLAP_TIDY_JOBS=4 tools/clang_tidy.sh  files checked at once (default: the core count)
set -uo pipefail
cd "$(dirname "$0")/.."
# Ctrl-C, or tools/test.sh's time budget, stops the whole script, not just the step it is in (a
# fuzzer or Bazel exits cleanly on SIGINT, and bash would go on to the next step).
trap 'exit 130' INT
command -v clang-tidy >/dev/null || { echo "clang-tidy: not installed (tools/setup.sh installs it)" >&2; exit 1; }
db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
execroot=$(bazel info execution_root 2>/dev/null)
# The compile commands refer to generated headers and the execroot's links: build first.
bazel build //... >/dev/null 2>&1 || { echo "clang-tidy: bazel build //... failed" >&2; exit 1; }
bazel aquery 'mnemonic("CppCompile", //...)' --output=jsonproto 2>/dev/null |
  tools/compile_commands.py "$execroot" >"$db/compile_commands.json" || exit 1
extra=('--checks=-clang-analyzer-*')
if [[ ${1:-} == --analyzer ]]; then
  extra=()
  shift
fi
if (($#)) && [[ $1 != --all ]]; then
  files=("$@")
else
  dirs='^(numeric|collectives|compression|launcher|runtime|scheduler)/'
  [[ ${1:-} == --all ]] && dirs='.'
  mapfile -t files < <(python3 -c 'import json, re, sys
for c in json.load(open(sys.argv[1])):
    if re.search(sys.argv[2], c["file"]): print(c["file"])' "$db/compile_commands.json" "$dirs")
fi
jobs=${OVERLAP_TIDY_JOBS:-$(nproc)}
start=$SECONDS
log=$db/findings
# One file per clang-tidy call, several at once; each prints only its findings (--quiet).
printf '%s\n' "${files[@]}" |
  (cd "$execroot" && xargs -P "$jobs" -I{} clang-tidy -p "$db" --config-file="$OLDPWD/.clang-tidy" \
    "${extra[@]}" --quiet {} 2>/dev/null) >"$log"
status=$?
# Paths in the execroot are the repository's paths.
sed "s|^$execroot/||" "$log"
n=$(grep -cE '^[^ ]+:[0-9]+:[0-9]+: (error|warning):' "$log")
echo "overlap clang-tidy: ${#files[@]} files, $n findings ($((SECONDS - start)) s)"
((status == 0 && n == 0))
