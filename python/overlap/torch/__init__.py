"""overlap.torch: horovod.torch's API on overlap's runtime, for current PyTorch.

``import overlap.torch as hvd`` runs scripts written for ``horovod.torch``; launch them with
``overlaprun -np 4 python train.py``. overlap's own options go to init():

    hvd.init(planner="auto")        # or wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft

The DistributedOptimizer's hooks mark each step's forward, backward and update, so the
runtime's planners see real per-layer compute windows (docs/tuning.md).
"""

import threading

import torch

from overlap import _core
from overlap.common import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max,
                            Min, Product, ProcessSet, Sum, add_process_set, ccl_built, cuda_built,
                            ddl_built, gloo_built, gloo_enabled, global_process_set, mpi_built,
                            mpi_enabled, mpi_threads_supported, nccl_built, remove_process_set,
                            rocm_built)
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

_cross = {}
_cross_lock = threading.Lock()


def init(comm=None, process_sets=None, planner=None, staleness=None, max_period=None,
         compression=None, profile_steps=None, timeline=None):
    """Starts overlap on every rank (collective); a second call is a no-op.

    comm and process_sets are Horovod's: overlap always uses every rank (MPI_COMM_WORLD), so a
    comm naming a subset, or extra process sets, raise. overlap's options (each also an
    OVERLAP_* variable, docs/tuning.md): planner, staleness, max_period, compression (the
    default error-feedback compressor spec, e.g. "fp16"), profile_steps, timeline (a path)."""
    is_rank_list = isinstance(comm, (list, tuple))
    if comm is not None and not is_rank_list and not hasattr(comm, "Get_size"):
        raise ValueError("init(comm=...): expected an mpi4py communicator or a list of ranks")
    _core.apply_init_settings(planner=planner, staleness=staleness, max_period=max_period,
                              compression=compression, profile_steps=profile_steps,
                              timeline=timeline)
    _core.init()
    world = _core.size()
    if comm is not None and (sorted(comm) != list(range(world)) if is_rank_list
                             else comm.Get_size() != world):
        raise NotImplementedError("rank %d: init(comm=%r): overlap runs on all ranks "
                                  "(MPI_COMM_WORLD) only" % (_core.rank(), comm))
    for process_set in process_sets or []:
        add_process_set(process_set)


def shutdown():
    """Finishes pending operations and stops the runtime (collective)."""
    _core.shutdown()
    with _cross_lock:
        _cross.clear()


def _cross_topology():
    """(cross_rank, cross_size): position among the ranks with this local_rank, one per host."""
    with _cross_lock:
        if "value" not in _cross:
            mine = torch.tensor([_core.local_rank()], dtype=torch.int32)
            locals_ = allgather(mine, name="__overlap.cross_topology").tolist()
            peers = [r for r, lr in enumerate(locals_) if lr == _core.local_rank()]
            _cross["value"] = (peers.index(_core.rank()), len(peers))
        return _cross["value"]


def cross_rank():
    return _cross_topology()[0]


def cross_size():
    return _cross_topology()[1]


def is_homogeneous():
    return _core.size() % _core.local_size() == 0


def start_timeline(file_path, mark_cycles=False):
    """Writes this rank's timeline (a Chrome trace) to file_path (rank r > 0: file_path.rank<r>)
    until stop_timeline()."""
    _core.start_timeline(file_path)


def stop_timeline():
    _core.stop_timeline()
