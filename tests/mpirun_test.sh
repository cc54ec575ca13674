#!/usr/bin/env bash
# Runs a test binary on N local ranks under mpirun with a hard timeout.
# usage: mpirun_test.sh NP TIMEOUT_S BINARY [ARGS...]
set -u
np=$1 timeout_s=$2 binary=$3
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Bazel's sandbox-free test environment has no HOME; Open MPI wants one for its session files.
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
exec timeout -k 10 "$timeout_s" mpirun --oversubscribe --bind-to none -np "$np" \
  --mca btl self,vader,tcp "$binary" "$@"
