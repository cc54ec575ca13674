"""overlap.tensorflow.keras: horovod.tensorflow.keras's API on overlap's runtime, for Keras 3.

``import overlap.tensorflow.keras as hvd``; the collectives and init options are those of
overlap.tensorflow, and DistributedOptimizer wraps Keras 3 optimizers:

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())),
                  loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])
"""

from overlap.tensorflow import (Adasum, Average, Compression, HorovodInternalError, Max, Min,
                                Product, ProcessSet, Sum, add_process_set, allgather,
                                allgather_object, allreduce, alltoall, barrier, broadcast,
                                broadcast_global_variables, broadcast_object,
                                broadcast_variables, ccl_built, cross_rank, cross_size,
                                cuda_built, ddl_built, gloo_built, gloo_enabled,
                                global_process_set, grouped_allreduce, init, is_initialized, join,
                                local_rank, local_size, mpi_built, mpi_enabled,
                                mpi_threads_supported, nccl_built, rank, reducescatter,
                                remove_process_set, rocm_built, shutdown, size, size_op, sycl_built,
                                start_timeline, stop_timeline)
from overlap.tensorflow.keras import callbacks, elastic
from overlap.tensorflow.keras_optimizer import DistributedOptimizer


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None):
    """keras.saving.load_model, with the loaded model's optimizer wrapped in DistributedOptimizer
    (compression as given). custom_optimizers is accepted for Horovod compatibility: Keras 3
    resolves optimizer classes itself (pass custom ones in custom_objects)."""
    import keras
    model = keras.saving.load_model(filepath, custom_objects=custom_objects)
    if getattr(model, "optimizer", None) is not None:
        kwargs = {} if compression is None else {"compression": compression}
        DistributedOptimizer(model.optimizer, **kwargs)
    return model
