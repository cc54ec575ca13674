"""overlap.torch: horovod.torch's API on overlap's runtime, for current PyTorch.

``import overlap.torch as hvd`` runs scripts written for ``horovod.torch``; launch them with
``overlaprun -np 4 python train.py``. overlap's own options go to init():

    hvd.init(planner="auto")        # or wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft

The DistributedOptimizer's hooks mark each step's forward, backward and update, so the
runtime's planners see real per-layer compute windows (docs/tuning.md).
"""

import torch

from overlap import _core  # noqa: F401 (hvd._core: the binding, for tests and debugging)
from overlap.basics import (cross_rank, cross_size, init, is_homogeneous, is_initialized,
                             local_rank, local_size, rank, restore_compression_state,
                             save_compression_state, size, start_timeline, stats,
                             stop_timeline)
from overlap.basics import shutdown as _shutdown_runtime
from overlap.common import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max,
                            Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
                            ddl_built, gloo_built, gloo_enabled, global_process_set, mpi_built,
                            mpi_enabled, mpi_threads_supported, remove_process_set, rocm_built,
                            sycl_built)
from overlap.torch.compression import Compression
from overlap.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)
from overlap.torch.mpi_ops import (allgather, allgather_async, allreduce, allreduce_,
                                   allreduce_async, allreduce_async_, alltoall, alltoall_async,
                                   barrier, broadcast, broadcast_, broadcast_async,
                                   broadcast_async_, cuda_built, grouped_allgather,
                                   grouped_allgather_async,
                                   grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                   grouped_allreduce_async_, grouped_reducescatter,
                                   grouped_reducescatter_async, join, nccl_built, poll,
                                   reducescatter, reducescatter_async, sparse_allreduce_async,
                                   synchronize)
from overlap.torch.optimizer import DistributedOptimizer, apply_all_pending_updates
from overlap.torch.sync_batch_norm import SyncBatchNorm
from overlap.torch import elastic  # noqa: E402 (hvd.elastic, as in horovod.torch)


def shutdown():
    """Applies the updates DistributedOptimizer deferred (update_at_forward), finishes pending
    operations and stops the runtime (collective)."""
    if is_initialized():
        apply_all_pending_updates()
    _shutdown_runtime()
