#!/usr/bin/env bash
# A resume suite (tests/torch/test_torch_resume.py, tests/tensorflow/test_tf_resume.py) twice on
# the same ranks, sharing its checkpoint through files in $OVERLAP_RESUME_DIR: first `-k save`
# (trains, checkpoints at step K, goes on), then `-k resume` in fresh processes, which must end
# with the saved run's bits.
# usage: resume_test.sh RUN_PYTEST_SH ARGS... (run_pytest.sh's arguments, suite last)
set -euo pipefail
runner=$1
shift
OVERLAP_RESUME_DIR=$(mktemp -d "${TEST_TMPDIR:-/tmp}/overlap_resume.XXXXXX")
export OVERLAP_RESUME_DIR
trap 'rm -rf "$OVERLAP_RESUME_DIR"' EXIT
bash "$runner" "$@" -k test_save
bash "$runner" "$@" -k test_resume
