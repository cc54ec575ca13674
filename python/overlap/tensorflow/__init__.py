"""overlap.tensorflow: horovod.tensorflow's API on overlap's runtime, for TensorFlow 2.16+.

``import overlap.tensorflow as hvd`` runs scripts written for ``horovod.tensorflow``; launch
them with ``overlaprun -np 4 python train.py``. overlap's own options go to init():

    hvd.init(planner="auto")        # or wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft

The collectives are asynchronous TensorFlow ops from a small op library compiled against the
installed TensorFlow (build_ops.py), which calls the same core library (liboverlap.so) as
overlap.torch. They work eagerly and inside tf.function. DistributedGradientTape and the Keras
DistributedOptimizer place step markers, so the runtime's planners see the step's real windows
(docs/tensorflow.md).
"""

import os

from overlap import _core  # noqa: F401 (hvd._core: the binding, for tests and debugging)
from overlap.basics import shutdown as _shutdown_runtime
from overlap.basics import (cross_rank, cross_size, is_homogeneous, is_initialized,
                             local_rank, local_size, rank, restore_compression_state,
                             save_compression_state, size, start_timeline, stats,
                             stop_timeline)
from overlap.common import start_runtime as _start_runtime
from overlap.common import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max,
                            Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
                            cuda_built, ddl_built, gloo_built, gloo_enabled,
                            global_process_set, mpi_built, mpi_enabled, mpi_threads_supported,
                            nccl_built, remove_process_set, rocm_built, sycl_built)
from overlap.tensorflow.compression import Compression
from overlap.tensorflow.delayed_updates import has_update
from overlap.tensorflow.functions import (allgather_object, broadcast_, broadcast_global_variables,
                                          broadcast_object, broadcast_object_fn,
                                          broadcast_variables)
from overlap.tensorflow.gradient_tape import (DistributedGradientTape,
                                              PartialDistributedGradientTape)
from overlap.tensorflow.keras_optimizer import DistributedOptimizer
from overlap.tensorflow.mpi_ops import (allgather, allreduce, alltoall, barrier, broadcast,
                                        grouped_allgather, grouped_allreduce,
                                        grouped_reducescatter, join, reducescatter)
from overlap.tensorflow.util import (_executing_eagerly, check_num_rank_power_of_2,  # noqa: F401
                                     gpu_available, local_rank_op, local_size_op,
                                     process_set_included_op, rank_op, refs_to_vars, size_op,
                                     split_list, vars_to_refs)


def init(comm=None, process_sets=None, planner=None, staleness=None, max_period=None,
         compression=None, profile_steps=None, timeline=None, budget=None):
    """overlap.basics.init, with the coordinator's wait "auto" unless OVERLAP_COORDINATOR_WAIT is
    set (the comment below says why). With staleness > 0 or max_period > 1 and a budget not 0
    (the bound by default here), deft may delay updates: DistributedGradientTape's gradients
    then carry a has_update flag (has_update()) and Keras 3 optimizers skip a variable in the
    steps that bring it none (delayed_updates.py)."""
    # TensorFlow's graph executor runs each step's ops on threads of its own, which coordinators
    # spinning on MPI starve where ranks outnumber cores (emulated bert-base: 963-997 ms a step
    # spinning, 695 ms napping; the Keras Fashion-MNIST example's epochs 16-17.5 s against
    # 12-13.4 s on 300 Mbit/s links; docs/tensorflow.md "Found: the spinning coordinators").
    # "auto" naps only while the host is oversubscribed and spins otherwise, as "spin" (the C++
    # and torch default) does; OVERLAP_COORDINATOR_WAIT, where set, decides.
    wait = None if os.environ.get("OVERLAP_COORDINATOR_WAIT") else "auto"
    _start_runtime(comm, process_sets, planner=planner, staleness=staleness,
                   max_period=max_period, budget=budget, compression=compression,
                   profile_steps=profile_steps, timeline=timeline, coordinator_wait=wait)


def shutdown():
    """Applies the updates the Keras DistributedOptimizer deferred (update_at_forward),
    finishes pending operations and stops the runtime (collective)."""
    if is_initialized():
        from overlap.tensorflow import layerwise
        layerwise.apply_all_pending_updates()
    _shutdown_runtime()


def __getattr__(name):
    # SyncBatchNormalization is a Keras layer: keras is imported at its first use only.
    if name == "SyncBatchNormalization":
        from overlap.tensorflow.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


from overlap.tensorflow import elastic  # noqa: E402 (hvd.elastic, as in horovod.tensorflow)
