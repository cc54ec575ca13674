#!/usr/bin/env bash
# Issues 13's and 37's GPU checks, in one run on a lent GPU machine (docs/gpu.md has the results):
#   here:   bazel build //tests/gpu/... //tests/compression:cuda_kernels_test //bench:gpu_kernels \
#             //bench:gpu_compressed_allreduce \
#             //runtime:liboverlap.so //launcher:overlaprun && tools/gpu/device_checks.sh --bundle
#   there:  tools/gpu/device_checks.sh   (the device tool's run, carrying .gpu)
# Each check is what its Bazel target runs (tests/gpu/BUILD), with OVERLAP_REQUIRE_GPU=1 so that
# none can pass by skipping; then overlap.torch with CUDA tensors, then the benchmarks: the
# kernels, compressed allreduce on the GPU against a host copy (1 rank on NCCL, 2 staged), and
# ResNet-50 through overlap.torch against torch alone and torch's DDP (needs torchvision), on the
# frozen plan and negotiating every step (OVERLAP_PLAN_AFTER_STEPS=0), on the same machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --bundle ]; then
  exec tools/gpu/bundle.sh tests/compression/cuda_kernels_test tests/gpu/cuda_buffer_ops_test \
    tests/gpu/nccl_executor_test_bin tests/gpu/device_runtime_test_bin tests/gpu/watchdog_test_bin \
    bench/gpu_kernels bench/gpu_compressed_allreduce runtime/liboverlap.so launcher/overlaprun
fi
b=.gpu/bin
run="overlaprun --mpi-args '--mca btl self,vader,tcp' -np"
pytest="python3 -m pytest -q -x -p no:cacheprovider -p overlap_pytest tests/torch/test_torch_cuda.py"
# Every planner's scheduled plan over CUDA gradients (issue 37): NCCL on one rank, MPI staged
# through host memory on two and four ranks sharing the GPU; values exact, as on the host.
scheduled=()
for planner in wfbp fusion mgwfbp bytescheduler usbyte dear deft auto; do
  env="OVERLAP_PLANNER=$planner OVERLAP_PROFILE_STEPS=3"
  scheduled+=("$env OVERLAP_TEST_EXPECT_EXECUTOR=nccl $run 1 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]' && $env OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 2 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]' && $env OVERLAP_TEST_EXPECT_EXECUTOR=mpi+host-staging $run 4 -- $b/tests/gpu/device_runtime_test_bin '[scheduled]'")
done
exec .gpu/run_on_device.sh \
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
  "$run 1 -- $pytest" \
  "$run 2 -- $pytest" \
  "$b/bench/gpu_kernels" \
  "$run 1 -- $b/bench/gpu_compressed_allreduce" \
  "$run 2 -- $b/bench/gpu_compressed_allreduce --tensors=16" \
  "$run 1 -- python3 bench/torch_gpu_synthetic.py --ddp --compression none,fp16_ef,topk" \
  "OVERLAP_PLAN_AFTER_STEPS=0 $run 1 -- python3 bench/torch_gpu_synthetic.py --compression none,fp16_ef" \
  "$run 1 -- python3 bench/torch_gpu_synthetic.py --ddp --batch-size 128 --compression none" \
  "$run 2 -- python3 bench/torch_gpu_synthetic.py --ddp --compression none" \
  "OVERLAP_PLAN_AFTER_STEPS=0 $run 2 -- python3 bench/torch_gpu_synthetic.py --compression none"
