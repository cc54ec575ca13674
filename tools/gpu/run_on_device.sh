#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, over the bundle that
# tools/gpu/bundle.sh made: sets up the library path (the bundle's libraries, the machine's NCCL
# and driver) and MPI for root (the machine's Open MPI, else the bundled one), then runs each
# command given (one string each) under a 150 s timeout, printing the end of its output and
# appending all of it to $OUT/checks.log (the device tool brings back at most 8 files).
# Exits non-zero if any failed.
set -uo pipefail
root=$(pwd)
lib_path="$root/.gpu/lib"
for dir in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu \
  $(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0] + "/lib")' 2>/dev/null); do
  [ -e "$dir/libnccl.so.2" ] && { lib_path="$lib_path:$dir"; echo "NCCL from $dir"; break; }
done
[ -d /usr/local/nvidia/lib64 ] && lib_path="$lib_path:/usr/local/nvidia/lib64"
if ! mpirun --version >/dev/null 2>&1; then
  echo "no mpirun on this machine: using the bundled Open MPI"
  export OPAL_PREFIX="$root/.gpu/ompi/usr"
  export PMIX_INSTALL_PREFIX="$OPAL_PREFIX/lib/x86_64-linux-gnu/pmix2"
  export PMIX_MCA_mca_base_component_path="$PMIX_INSTALL_PREFIX/lib/pmix"
  export PATH="$OPAL_PREFIX/bin:$PATH"
  lib_path="$lib_path:$OPAL_PREFIX/lib/x86_64-linux-gnu/openmpi/lib:$OPAL_PREFIX/lib/x86_64-linux-gnu"
fi
export LD_LIBRARY_PATH="$lib_path:${LD_LIBRARY_PATH:-}"
export PATH="$root/.gpu/bin/launcher:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
export OVERLAP_REQUIRE_GPU=1 OVERLAP_LIBRARY="$root/.gpu/bin/runtime/liboverlap.so"
export PYTHONPATH="$root/.gpu/python:$root/tests/python_util:$root/tests/torch" PYTHONUNBUFFERED=1
export HOME=${HOME:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
failed=0 n=0
for cmd in "$@"; do
  n=$((n + 1))
  echo "=== [$n] $cmd"
  start=$SECONDS
  log=$(mktemp)
  if timeout -k 5 150 bash -c "$cmd" >"$log" 2>&1; then rc=0; else rc=$?; fi
  tail -n 12 "$log"
  { echo "=== [$n] $cmd"; cat "$log"; } >>"${OUT:-/tmp}/checks.log"
  rm -f "$log"
  echo "=== [$n] rc=$rc in $((SECONDS - start)) s"
  [ "$rc" = 0 ] || failed=1
done
exit $failed
