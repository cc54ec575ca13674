#!/usr/bin/env bash
# test_torch_resume.py twice on the same ranks, sharing its checkpoint through files: first
# `-k save` (trains, checkpoints at step K, goes on), then `-k resume` in fresh processes, which
# must end with the saved run's bits.
# usage: resume_test.sh RUN_PYTEST_SH ARGS... (run_pytest.sh's arguments, suite last)
set -euo pipefail
runner=$1
shift
TORCH_RESUME_DIR=$(mktemp -d "${TEST_TMPDIR:-/tmp}/torch_resume.XXXXXX")
export TORCH_RESUME_DIR
trap 'rm -rf "$TORCH_RESUME_DIR"' EXIT
bash "$runner" "$@" -k test_save
bash "$runner" "$@" -k test_resume
