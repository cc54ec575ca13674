#!/usr/bin/env bash
# The demo: data-parallel training of an MLP on Fashion-MNIST on 4 ranks of this machine, through
# overlaprun. Installs missing Debian packages first (tools/setup.sh). Extra arguments go to the
# training program, e.g. tools/demo.sh --epochs 2
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //launcher:overlaprun //examples:mnist_mlp
tools/cuda_status.sh || true   # the demo runs on CPUs; says so when the GPU targets are skipped
bin=$(bazel info bazel-bin)
exec "$bin/launcher/overlaprun" -np "${OVERLAP_DEMO_RANKS:-4}" -- "$bin/examples/mnist_mlp" "$@"
