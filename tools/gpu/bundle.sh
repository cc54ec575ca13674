#!/usr/bin/env bash
# Packs built GPU test and benchmark binaries, with the shared libraries a CUDA machine without
# this repository's build dependencies lacks (Abseil, spdlog, this build's own .so files), into
# .gpu/ so that they can run on a lent GPU machine (tools/gpu/run_on_device.sh runs them there).
# CUDA, NCCL and Open MPI are taken from that machine. Usage: tools/gpu/bundle.sh TARGET_PATH...
# where each TARGET_PATH is relative to bazel-bin (for example tests/gpu/device_runtime_test_bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
mkdir -p .git/info && { grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude; }
bin=$(readlink -f "${BAZEL_BIN:-bazel-bin}")  # another output base: BAZEL_BIN=$(bazel info bazel-bin)
for target in "$@"; do
  mkdir -p "$out/bin/$(dirname "$target")"
  cp -L "$bin/$target" "$out/bin/$target"
  # Libraries not from glibc, the compiler, MPI, CUDA or NCCL: those the GPU machine has.
  ldd "$bin/$target" | awk '/=>/ {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|ld-linux*) ;;
      libmpi*|libopen-*|libhwloc*|libevent*|libpmix*|libz.so*|libudev*) ;;
      libcudart*|libnccl*|libcuda.so*) ;;
      *) cp -Ln "$lib" "$out/lib/" ;;
    esac
  done
done
cp -r python "$out/python"
cp tools/gpu/run_on_device.sh "$out/"
du -sh "$out"
