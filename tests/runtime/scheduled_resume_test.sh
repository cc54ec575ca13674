#!/usr/bin/env bash
# A delayed scheduled plan resumed from a checkpoint in fresh processes repeats the saved run bit
# for bit (scheduled_resume_test.cc): the binary runs twice on 2 ranks, first [save], then
# [resume], sharing the checkpoint and the saved run's outputs through files.
# usage: scheduled_resume_test.sh MPIRUN_TEST_SH OVERLAPRUN BINARY
set -euo pipefail
runner=$1 overlaprun=$2 binary=$3
SCHEDULED_RESUME_DIR=$(mktemp -d "${TEST_TMPDIR:-/tmp}/resume.XXXXXX")
export SCHEDULED_RESUME_DIR
trap 'rm -rf "$SCHEDULED_RESUME_DIR"' EXIT
bash "$runner" "$overlaprun" 2 240 "$binary" "[save]"
bash "$runner" "$overlaprun" 2 240 "$binary" "[resume]"
