#!/usr/bin/env bash
# Runs a test binary on N local ranks through overlaprun (so a failure names the rank, its host
# and its exit status or signal) with a hard timeout.
# usage: mpirun_test.sh OVERLAPRUN NP TIMEOUT_S BINARY [ARGS...]
set -u
overlaprun=$1 np=$2 timeout_s=$3 binary=$4
shift 4
# Bazel's test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
exec timeout -k 10 "$timeout_s" "$overlaprun" -np "$np" --mpi-args "--mca btl self,vader,tcp" \
  -- "$binary" "$@"
