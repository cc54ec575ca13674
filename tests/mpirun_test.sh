#!/usr/bin/env bash
# Runs a test binary on N local ranks through overlaprun (so a failure names the rank, its host
# and its exit status or signal) with a hard timeout. A run whose ranks passed but then aborted
# during MPI_Finalize (an MPI object freed after it, say) fails too: Open MPI reports that on the
# output only, not in the exit status.
# usage: mpirun_test.sh OVERLAPRUN NP TIMEOUT_S BINARY [ARGS...]
set -u -o pipefail
overlaprun=$1 np=$2 timeout_s=$3 binary=$4
shift 4
# Bazel's test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
log=$(mktemp)
timeout -k 10 "$timeout_s" "$overlaprun" -np "$np" --mpi-args "--mca btl self,vader,tcp" \
  -- "$binary" "$@" 2>&1 | tee "$log"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "Local abort after MPI_FINALIZE" "$log"; then
  echo "mpirun_test.sh: the ranks passed but aborted in MPI_Finalize (see above)" >&2
  rc=1
fi
rm -f "$log"
exit "$rc"
