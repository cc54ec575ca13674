#!/usr/bin/env bash
# Prints the line saying why the GPU targets are skipped when Bazel's CUDA detection
# (third_party/cuda/cuda_configure.bzl, OVERLAP_CUDA_HOME) found no toolkit; nothing otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
# Any command that loads @cuda re-runs the detection if OVERLAP_CUDA_HOME changed.
bazel query --noshow_progress @cuda//:cuda >/dev/null 2>&1 || exit 0
cat "$(bazel info output_base 2>/dev/null)/external/cuda/skip_reason.txt"
