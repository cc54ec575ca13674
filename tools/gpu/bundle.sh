#!/usr/bin/env bash
# Packs built GPU test and benchmark binaries, with the shared libraries a CUDA machine without
# this repository's build dependencies lacks, into .gpu/ so that they can run on a lent GPU
# machine (tools/gpu/run_on_device.sh runs them there):
#   - Abseil, spdlog and this build's own .so files, beside each binary's ldd;
#   - the CUDA runtime (libcudart, under a megabyte); NCCL (over 200 MB) is the GPU machine's own;
#   - Open MPI from this machine's Debian packages, relocatable through OPAL_PREFIX, which
#     run_on_device.sh uses where that machine has no mpirun of its own.
# Usage: tools/gpu/bundle.sh TARGET_PATH... where each TARGET_PATH is relative to bazel-bin (for
# example tests/gpu/device_runtime_test_bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/ompi"
mkdir -p .git/info && { grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude; }
bin=$(readlink -f "${BAZEL_BIN:-bazel-bin}")  # another output base: BAZEL_BIN=$(bazel info bazel-bin)
for target in "$@"; do
  mkdir -p "$out/bin/$(dirname "$target")"
  cp -L "$bin/$target" "$out/bin/$target"
  ldd "$bin/$target" | awk '/=>/ {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|ld-linux*) ;;
      libmpi*|libopen-*|libhwloc*|libevent*|libpmix*|libz.so*) ;;  # in .gpu/ompi
      libnccl*|libcuda.so*) ;;  # the GPU machine's own
      *) cp -Ln "$lib" "$out/lib/" ;;
    esac
  done
done
# Open MPI with what its libraries and launcher load, at the paths the packages install them to.
for package in libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 \
  libevent-pthreads-2.1-7 libevent-2.1-7 libudev1; do
  dpkg -L "$package" | while read -r file; do
    { [ -f "$file" ] || [ -L "$file" ]; } || continue
    case "$file" in */doc/*|*/man/*|*/lintian/*|/etc/*) continue ;; esac
    mkdir -p "$out/ompi$(dirname "$file")"
    cp -a "$file" "$out/ompi$file"
  done
done
ln -s orterun "$out/ompi/usr/bin/mpirun"
cp -r python "$out/python"
cp tools/gpu/run_on_device.sh "$out/"
du -sh "$out"
