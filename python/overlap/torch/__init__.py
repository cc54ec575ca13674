"""overlap.torch: horovod.torch's API on overlap's runtime, for current PyTorch.

``import overlap.torch as hvd`` runs scripts written for ``horovod.torch``; launch them with
``overlaprun -np 4 python train.py``. overlap's own options go to init():

    hvd.init(planner="auto")        # or wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft

The DistributedOptimizer's hooks mark each step's forward, backward and update, so the
runtime's planners see real per-layer compute windows (docs/tuning.md).
"""

import torch

from overlap import _core
from overlap.common import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max,
                            Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
                            cross_topology, cuda_built, ddl_built, gloo_built, gloo_enabled,
                            global_process_set, mpi_built, mpi_enabled, mpi_threads_supported,
                            nccl_built, remove_process_set, reset_cross_topology, rocm_built,
                            start_runtime)
from overlap.torch.compression import Compression
from overlap.torch.functions import (allgather_object, broadcast_object,
                                     broadcast_optimizer_state, broadcast_parameters)
from overlap.torch.mpi_ops import (allgather, allgather_async, allreduce, allreduce_,
                                   allreduce_async, allreduce_async_, alltoall, alltoall_async,
                                   barrier, broadcast, broadcast_, broadcast_async,
                                   broadcast_async_, grouped_allgather, grouped_allgather_async,
                                   grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                   grouped_allreduce_async_, grouped_reducescatter,
                                   grouped_reducescatter_async, join, poll, reducescatter,
                                   reducescatter_async, sparse_allreduce_async, synchronize)
from overlap.torch.optimizer import DistributedOptimizer
from overlap.torch.sync_batch_norm import SyncBatchNorm

is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
stats = _core.stats
save_compression_state = _core.save_compression_state
restore_compression_state = _core.restore_compression_state

def init(comm=None, process_sets=None, planner=None, staleness=None, max_period=None,
         compression=None, profile_steps=None, timeline=None):
    """Starts overlap on every rank (collective); a second call is a no-op.

    comm and process_sets are Horovod's: overlap always uses every rank (MPI_COMM_WORLD), so a
    comm naming a subset, or extra process sets, raise. overlap's options (each also an
    OVERLAP_* variable, docs/tuning.md): planner, staleness, max_period, compression (the
    default error-feedback compressor spec, e.g. "fp16"), profile_steps, timeline (a path)."""
    start_runtime(comm, process_sets, planner=planner, staleness=staleness,
                  max_period=max_period, compression=compression, profile_steps=profile_steps,
                  timeline=timeline)


def shutdown():
    """Finishes pending operations and stops the runtime (collective)."""
    _core.shutdown()
    reset_cross_topology()


def cross_rank():
    return cross_topology()[0]


def cross_size():
    return cross_topology()[1]


def is_homogeneous():
    return _core.size() % _core.local_size() == 0


def start_timeline(file_path, mark_cycles=False):
    """Writes this rank's timeline (a Chrome trace) to file_path (rank r > 0: file_path.rank<r>)
    until stop_timeline()."""
    _core.start_timeline(file_path)


def stop_timeline():
    _core.stop_timeline()
