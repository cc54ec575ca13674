#!/usr/bin/env bash
# Shutting down under a delayed plan leaves its last steps' updates unapplied; the log says so in
# one line on rank 0, naming the first tensors and counting the rest (PlannedMode::Unfreeze),
# and the other ranks, which hold the same, keep it to their info log: a job of many ranks and
# tensors prints one short warning at every normal shutdown, not one long one per rank.
set -euo pipefail
binary=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
# [delivery] ends with flushing steps of zeros, whose own results are still held at shutdown.
log=$(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 "$binary" "[delivery]" 2>&1)
echo "$log" | grep -F "delayed plan" || true
fail() { echo "FAIL: $*" >&2; exit 1; }
want="overlap: rank 0: shutdown under the delayed plan leaves the last steps' updates of 'layer"
grep -F "$want" <<<"$log" | grep -qE "\(1 result\), '[^']+' \(1 result\), '[^']+' \(1 result\) and [0-9]+ more tensors unapplied" ||
  fail "rank 0 did not warn once, with three tensors named and the rest counted"
[ "$(grep -cF "shutdown under the delayed plan" <<<"$log")" = 1 ] ||
  fail "expected one line (rank 0's) at the default log level"
if grep -qF "leaving the delayed plan" <<<"$log"; then fail "the plan was dropped before shutdown"; fi
echo PASS
