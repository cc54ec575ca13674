#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, over the bundle that
# tools/gpu/bundle.sh made: sets up the library path (the bundle's libraries, the machine's NCCL
# and driver) and MPI for root (the machine's Open MPI, else the bundled one), then runs each
# command given (one string each) under a 150 s timeout, the checks a few at a time and the
# benchmarks after `--serial` one at a time, printing each verdict (and the end of the output of
# a failed check or of a benchmark), appending every output to $OUT/checks.log and the
# benchmarks' JSON lines to $OUT/bench.jsonl (the device tool brings back at most 8 files).
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
# Runs command number $1 (the string $2) under the timeout into logs/$1; prints its verdict.
logs=$(mktemp -d)
run_one() {
  local n=$1 cmd=$2 start=$SECONDS rc
  if timeout -k 5 150 bash -c "$cmd" >"$logs/$n" 2>&1; then rc=0; else rc=$?; fi
  echo "$rc $((SECONDS - start))" >"$logs/$n.rc"
}
report() {  # the end of a failed command's output; every command's whole output to checks.log
  local n=$1 cmd=$2 rc secs
  read -r rc secs <"$logs/$n.rc"
  echo "=== [$n] rc=$rc in ${secs} s: $cmd"
  if [ "$rc" != 0 ] || [ "$parallel" = 0 ]; then tail -n 12 "$logs/$n"; fi
  { echo "=== [$n] rc=$rc in ${secs} s: $cmd"; cat "$logs/$n"; } >>"${OUT:-/tmp}/checks.log"
  [ "$rc" = 0 ] || failed=$((failed + 1))
}
# Commands before a `--serial` argument are checks: they run CHECK_LANES at a time (default 3;
# ranks of several jobs share the GPU and the 16 cores, as ranks of one job do). Commands after
# it are benchmarks and run one at a time, alone on the machine.
failed=0 n=0 parallel=1 lanes=${CHECK_LANES:-3} pids=() names=()
declare -A cmds
for cmd in "$@"; do
  if [ "$cmd" = --serial ]; then
    for i in "${!pids[@]}"; do wait "${pids[$i]}" 2>/dev/null; report "${names[$i]}" "${cmds[${names[$i]}]}"; done
    pids=() parallel=0
    continue
  fi
  n=$((n + 1))
  cmds[$n]=$cmd
  if [ "$parallel" = 1 ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n; done
    run_one "$n" "$cmd" & pids+=($!) names+=("$n")
  else
    run_one "$n" "$cmd"
    report "$n" "$cmd"
  fi
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" 2>/dev/null; report "${names[$i]}" "${cmds[${names[$i]}]}"; done
echo "=== $failed of $n commands failed"
grep -h '^{"bench"' "$logs"/* 2>/dev/null >"${OUT:-/tmp}/bench.jsonl"
rm -rf "$logs"
[ "$failed" = 0 ]
