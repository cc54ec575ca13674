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

from overlap import _core
from overlap.common import (Adasum, Average, HorovodInternalError, HostsUpdatedInterrupt, Max,
                            Min, Product, ProcessSet, Sum, add_process_set, ccl_built,
                            cross_topology, cuda_built, ddl_built, gloo_built, gloo_enabled,
                            global_process_set, mpi_built, mpi_enabled, mpi_threads_supported,
                            nccl_built, remove_process_set, reset_cross_topology, rocm_built,
                            start_runtime)
from overlap.tensorflow.compression import Compression
from overlap.tensorflow.functions import (allgather_object, broadcast_global_variables,
                                          broadcast_object, broadcast_variables)
from overlap.tensorflow.gradient_tape import DistributedGradientTape
from overlap.tensorflow.keras_optimizer import DistributedOptimizer
from overlap.tensorflow.mpi_ops import (allgather, allreduce, alltoall, barrier, broadcast,
                                        grouped_allgather, grouped_allreduce,
                                        grouped_reducescatter, join, reducescatter)

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
    """Writes this rank's timeline (a Chrome trace) to file_path until stop_timeline()."""
    _core.start_timeline(file_path)


def stop_timeline():
    _core.stop_timeline()
