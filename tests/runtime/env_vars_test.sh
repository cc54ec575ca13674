#!/usr/bin/env bash
# The table of OVERLAP_* variables (runtime/api/env_vars.cc) is complete and the docs show it:
# - every OVERLAP_* name the runtime, launcher, collectives and Python sources read or tell users to
#   set ("OVERLAP_X" or 'OVERLAP_X' as a string, getenv and os.environ included, or OVERLAP_X= in
#   a message) is in the table, so the runtime does not warn about it and the docs list it;
# - docs/tuning.md's generated section is the table as env_vars_doc writes it;
# - what users install reads no test hook: no OVERLAP_TEST_* in those sources, and no test symbol
#   in liboverlap.so (the hooks live in tests/runtime/plan_hooks_from_env.cc).
# usage: env_vars_test.sh ENV_VARS_DOC TUNING_MD LIBOVERLAP; the sources are in the runfiles
# (BUILD's data).
set -u -o pipefail
doc_tool=$1 tuning=$2 library=$3
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

names=$("$doc_tool" --names) || { echo "FAIL: $doc_tool --names" >&2; exit 1; }
[ "$(echo "$names" | wc -l)" -ge 20 ] || fail "the table has fewer than 20 variables: $names"

# The sources that use the variables, not the table itself.
sources=$(find -L runtime launcher collectives python -type f \
  \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.py' \) ! -path runtime/api/env_vars.cc |
  sort)
[ "$(echo "$sources" | grep -c .)" -ge 50 ] || fail "too few sources in the runfiles: $sources"
used=$(echo "$sources" | xargs grep -HoE "[\"']OVERLAP_[A-Z0-9_]+[\"']|OVERLAP_[A-Z0-9_]+=" |
  tr -d "\"'=" | sort -u)
[ "$(echo "$used" | grep -c .)" -ge 15 ] || fail "found only these uses, is the pattern right? $used"
while IFS=: read -r file name; do
  grep -qxF "$name" <<<"$names" ||
    fail "$file uses $name, which runtime/api/env_vars.cc's table does not list (add it there)"
done <<<"$used"

"$doc_tool" --check "$tuning" || fail "docs/tuning.md's OVERLAP_* table is out of date"

while IFS=: read -r file name; do
  case $name in OVERLAP_TEST_*)
    fail "$file (shipped) uses the test hook $name: test hooks belong in tests/ (runtime/plan/plan_test_hooks.h)" ;;
  esac
done <<<"$used"
# Read once, then searched: under pipefail, `nm | grep -q` fails whenever grep exits before nm has
# written everything (nm dies of SIGPIPE), which made this check flaky as the library grew.
symbols=$(nm -D --defined-only "$library")
test_symbols=$(grep -E ' overlap_test_' <<<"$symbols" || true)
[ -z "$test_symbols" ] || fail "$library exports test symbols: $test_symbols"
grep -q ' overlap_init' <<<"$symbols" ||
  fail "nm found no overlap_init in $library: is the check looking at the right file?"

[ "$failures" -eq 0 ] || { echo "$failures failures" >&2; exit 1; }
echo PASS
