#!/usr/bin/env bash
# Bad OVERLAP_* settings as a user meets them: a 2-rank job started by overlaprun whose program
# (shared_library_test_bin, which prints "Init: <message>" when Init fails) gets the setting.
# A bad value fails Init on every rank with every rank's reason; a misspelt variable and an
# unwritable timeline are warnings and the job goes on. docs/bad-inputs.md quotes these lines.
# usage: bad_env_test.sh OVERLAPRUN BINARY
set -u -o pipefail
overlaprun=$1 binary=$2
T=${TEST_TMPDIR:-$(mktemp -d)}
export HOME=${HOME:-$T}
failures=0
fail() { echo "FAIL: $*" >&2; echo "---- output:" >&2; cat "$T/out" >&2; failures=$((failures + 1)); }

# run VAR=VALUE...: the job with those variables on every rank; output in $T/out, status in $rc.
run() {
  env "$@" timeout -k 5 60 "$overlaprun" -np 2 --mpi-args "--mca btl self,vader,tcp" \
    -- "$binary" >"$T/out" 2>&1
  rc=$?
}

# expect_line LINE: the output has exactly this line.
expect_line() { grep -qxF -- "$1" "$T/out" || fail "no line '$1'"; }

run OVERLAP_FUSION_THRESHOLD=64MB
[ "$rc" -ne 0 ] || fail "a bad OVERLAP_FUSION_THRESHOLD did not fail the job"
for r in 0 1; do
  expect_line "Init: rank $r: Init failed: rank 0: OVERLAP_FUSION_THRESHOLD='64MB' is not valid: expected a byte count in 0..1099511627776; rank 1: OVERLAP_FUSION_THRESHOLD='64MB' is not valid: expected a byte count in 0..1099511627776"
done

run OVERLAP_EXECUTOR=cuda
[ "$rc" -ne 0 ] || fail "a bad OVERLAP_EXECUTOR did not fail the job"
expect_line "Init: rank 1: Init failed: rank 0: OVERLAP_EXECUTOR='cuda' is not valid: expected one of auto, nccl, mpi; rank 1: OVERLAP_EXECUTOR='cuda' is not valid: expected one of auto, nccl, mpi"

# A setting that must match, different on each rank (a wrapper sets it from the rank): Init fails
# on every rank naming both values.
cat >"$T/rank_window.sh" <<'WRAPPER'
#!/bin/sh
OVERLAP_PLAN_CHECK_WINDOW=$((${OMPI_COMM_WORLD_RANK:-0} + 1)) exec "$@"
WRAPPER
chmod +x "$T/rank_window.sh"
timeout -k 5 60 "$overlaprun" -np 2 --mpi-args "--mca btl self,vader,tcp" \
  -- "$T/rank_window.sh" "$binary" >"$T/out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "OVERLAP_PLAN_CHECK_WINDOW set differently on the ranks did not fail the job"
for r in 0 1; do
  grep -q "^Init: rank $r: .*OVERLAP_PLAN_CHECK_WINDOW must be the same on every rank: rank 0 has 1, rank 1 has 2$" "$T/out" ||
    fail "rank $r did not name the differing OVERLAP_PLAN_CHECK_WINDOW"
done

run OVERLAP_FUSION_TRESHOLD=1048576
[ "$rc" -eq 0 ] || fail "a misspelt variable failed the job (status $rc)"
for r in 0 1; do
  [ "$(grep -c "overlap: rank $r: ignoring unknown environment variable OVERLAP_FUSION_TRESHOLD$" "$T/out")" -eq 1 ] ||
    fail "no warning naming rank $r about OVERLAP_FUSION_TRESHOLD"
done

run OVERLAP_TIMELINE=/nonexistent/dir/trace.json
[ "$rc" -eq 0 ] || fail "an unwritable timeline failed the job (status $rc)"
grep -q "overlap: rank 0: cannot write timeline '/nonexistent/dir/trace.json': No such file or directory$" "$T/out" ||
  fail "no warning naming rank 0 and the timeline path"
grep -q "overlap: rank 1: cannot write timeline '/nonexistent/dir/trace.json.rank1': No such file or directory$" "$T/out" ||
  fail "no warning naming rank 1 and its timeline path"

[ "$failures" -eq 0 ] || { echo "$failures failures" >&2; exit 1; }
echo PASS
