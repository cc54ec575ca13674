#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, over the bundle that
# tools/gpu/bundle.sh made: sets up the library path and MPI for root, then runs each command
# given (one string each), teeing its output to $OUT/<n>.log. Exits non-zero if any failed.
set -uo pipefail
root=$(pwd)
export LD_LIBRARY_PATH="$root/.gpu/lib:${LD_LIBRARY_PATH:-}"
export PATH="$root/.gpu/bin/launcher:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OVERLAP_REQUIRE_GPU=1 OVERLAP_LIBRARY="$root/.gpu/bin/runtime/liboverlap.so"
export PYTHONPATH="$root/.gpu/python" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
failed=0 n=0
for cmd in "$@"; do
  n=$((n + 1))
  echo "=== [$n] $cmd"
  start=$SECONDS
  if timeout 300 bash -c "$cmd" >"${OUT:-/tmp}/$n.log" 2>&1; then rc=0; else rc=$?; fi
  tail -n 25 "${OUT:-/tmp}/$n.log"
  echo "=== [$n] rc=$rc in $((SECONDS - start)) s"
  [ "$rc" = 0 ] || failed=1
done
exit $failed
