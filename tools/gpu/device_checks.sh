#!/usr/bin/env bash
# Issues 13's and 37's GPU checks, in one run on a lent GPU machine (docs/gpu.md has the results):
#   here:   bazel build //tests/gpu/... //tests/compression:cuda_kernels_test //bench:gpu_kernels \
#             //bench:gpu_compressed_allreduce \
#             //runtime:liboverlap.so //tests/runtime:liboverlap_testing.so //launcher:overlaprun \
#             && tools/gpu/device_checks.sh --bundle
#   there:  tools/gpu/device_checks.sh   (the device tool's run, carrying .gpu)
#           tools/gpu/device_checks.sh --only 'dear|buffer_ops'   (those commands alone)
# Each check is what its Bazel target runs (tests/gpu/BUILD), with OVERLAP_REQUIRE_GPU=1 so that
# none can pass by skipping; then overlap.torch with CUDA tensors, then the benchmarks: the
# kernels, compressed allreduce on the GPU against a host copy (1 rank on NCCL, 2 staged), and
# ResNet-50 (needs torchvision) and BERT-base through overlap.torch (observed, auto, deft with
# staleness 1) against torch alone and torch's DDP, one process per planner. The checks run three
# at a time, the benchmarks one at a time after them (run_on_device.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --bundle ]; then
  exec tools/gpu/bundle.sh tests/compression/cuda_kernels_test tests/gpu/cuda_buffer_ops_test \
    tests/gpu/nccl_executor_test_bin tests/gpu/device_runtime_test_bin tests/gpu/watchdog_test_bin \
    bench/gpu_kernels bench/gpu_compressed_allreduce runtime/liboverlap.so launcher/overlaprun \
    tests/runtime/liboverlap_testing.so
fi
b=.gpu/bin
run="overlaprun --mpi-args '--mca btl self,vader,tcp' -np"
pytest="python3 -m pytest -q -x -p no:cacheprovider -p overlap_pytest"
# Every planner's scheduled plan over CUDA gradients (issue 37): NCCL on one rank, MPI staged
# through host memory on two and four ranks sharing the GPU; values exact, as on the host. Then
# overlap.torch's DistributedOptimizer with CUDA parameters under each planner, bit for bit its
# host copy (deft with every bucket delayed by the plan test hook, so the test library).
scheduled=() torch_planners=()
for planner in wfbp fusion mgwfbp bytescheduler usbyte dear deft auto; do
  env="OVERLAP_PLANNER=$planner OVERLAP_PROFILE_STEPS=3"
  scheduled+=("$env OVERLAP_TEST_EXPECT_EXECUTOR=nccl $run 1 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]' && $env OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 2 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]' && $env OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 4 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]'")
  tenv="$env OVERLAP_REPLAN_DRIFT=0"
  [ "$planner" = deft ] && tenv="$tenv OVERLAP_STALENESS=1 OVERLAP_TEST_PLAN_SCHEDULE=1,1 OVERLAP_LIBRARY=\$PWD/$b/tests/runtime/liboverlap_testing.so"
  torch_planners+=("$tenv $run 1 -- $pytest tests/torch/test_torch_cuda_planners.py && $tenv $run 2 -- $pytest tests/torch/test_torch_cuda_planners.py")
done
synthetic="python3 bench/torch_gpu_synthetic.py"
# The planners profile and adopt during the warm-up, so their runs warm up longer.
planned="OVERLAP_PROFILE_STEPS=5 OVERLAP_REPLAN_DRIFT=0"
long="--warmup 40 --steps 30"
commands=(\
  "$b/tests/compression/cuda_kernels_test" \
  "$b/tests/gpu/cuda_buffer_ops_test" \
  "$run 1 -- $b/tests/gpu/nccl_executor_test_bin" \
  "OVERLAP_TEST_EXPECT_EXECUTOR=nccl $run 1 -- $b/tests/gpu/device_runtime_test_bin" \
  "OVERLAP_DIRECT_THRESHOLD=1048576 OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 2 -- $b/tests/gpu/device_runtime_test_bin" \
  "OVERLAP_DIRECT_THRESHOLD=1048576 OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 4 -- $b/tests/gpu/device_runtime_test_bin" \
  "OVERLAP_DIRECT_THRESHOLD=1048576 OVERLAP_HIERARCHICAL_ALLREDUCE=1 OVERLAP_TEST_RANKS_PER_HOST=2 OVERLAP_TEST_EXPECT_HIERARCHY_HOSTS=2 OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 4 -- $b/tests/gpu/device_runtime_test_bin" \
  "${scheduled[@]}" \
  "OVERLAP_EXECUTOR=nccl OVERLAP_TEST_EXPECT_ERROR='NCCL cannot run two ranks on one GPU' $run 2 -- $b/tests/gpu/device_runtime_test_bin '[probe]'" \
  "OVERLAP_COLLECTIVE_TIMEOUT_S=3 OVERLAP_EXECUTOR=nccl $run 1 -- $b/tests/gpu/watchdog_test_bin" \
  "$run 1 -- $pytest tests/torch/test_torch_cuda.py" \
  "$run 2 -- $pytest tests/torch/test_torch_cuda.py" \
  "${torch_planners[@]}" \
  --serial \
  "$b/bench/gpu_kernels" \
  "$run 1 -- $b/bench/gpu_compressed_allreduce" \
  "$run 2 -- $b/bench/gpu_compressed_allreduce --tensors=16" \
  "$run 1 -- $synthetic --ddp --compression none,fp16_ef,topk" \
  "$planned OVERLAP_PLANNER=auto $run 1 -- $synthetic $long" \
  "$planned OVERLAP_PLANNER=deft OVERLAP_STALENESS=1 $run 1 -- $synthetic $long" \
  "$run 1 -- $synthetic --model bert-base --batch-size 32 --ddp" \
  "$planned OVERLAP_PLANNER=auto $run 1 -- $synthetic --model bert-base --batch-size 32 $long" \
  "$planned OVERLAP_PLANNER=deft OVERLAP_STALENESS=1 $run 1 -- $synthetic --model bert-base --batch-size 32 $long" \
  "$run 2 -- $synthetic --ddp" \
  "$planned OVERLAP_PLANNER=auto $run 2 -- $synthetic $long"
  "$planned OVERLAP_PLANNER=deft OVERLAP_STALENESS=1 OVERLAP_BUDGET=-1 $run 2 -- $synthetic $long"
)
# --only REGEX: just the commands that match (a rerun of what failed), checks and benchmarks alike.
if [ "${1:-}" = --only ]; then
  chosen=()
  for c in "${commands[@]}"; do
    if [ "$c" = --serial ] || [[ $c =~ $2 ]]; then chosen+=("$c"); fi
  done
  commands=("${chosen[@]}")
fi
exec ${DRY_RUN:+printf "%s\n"} .gpu/run_on_device.sh "${commands[@]}"
