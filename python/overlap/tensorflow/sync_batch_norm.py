"""SyncBatchNormalization: horovod.tensorflow's batch normalisation whose training-time batch
statistics cover every rank's batch, for Keras 3.

Each rank sums its inputs, their squares and their count (the mask's weight when there is a
mask) over the reduction axes, one Sum allreduce adds them up over the ranks, and the mean and
variance come from the totals: the statistics one rank would compute on the concatenated global
batch, also when ranks hold batches of different sizes (Horovod averages the ranks' moments,
which agrees only for equal sizes). The allreduce's gradient sums the ranks' gradients of the
statistics, so backward matches the global batch too. Inference uses the moving statistics,
which every rank updates with the same global values.
"""

import keras
import tensorflow as tf

from overlap import _core
from overlap.common import Sum
from overlap.tensorflow import mpi_ops


@keras.saving.register_keras_serializable(package="overlap")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with batch statistics over every rank's batch while
    training. `fused` is accepted as Horovod's (only False: Keras 3 has no fused kernel);
    Keras's own `synchronized` (tf.distribute's) does not apply and is refused."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("rank %d: SyncBatchNormalization does not support fused=True"
                             % _core.rank())
        if kwargs.pop("synchronized", False):
            raise ValueError("rank %d: SyncBatchNormalization synchronises over overlap's ranks;"
                             " synchronized=True (tf.distribute's) does not apply" % _core.rank())
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        if _core.size() == 1:
            return super()._moments(inputs, mask)
        axes = self._reduction_axes
        if mask is None:
            ones = tf.ones_like(tf.reduce_sum(inputs, axis=axes))
            count = ones * tf.cast(tf.size(inputs) // tf.size(ones), inputs.dtype)
            total = tf.reduce_sum(inputs, axis=axes)
            squares = tf.reduce_sum(tf.square(inputs), axis=axes)
        else:
            weight = tf.cast(tf.broadcast_to(tf.expand_dims(tf.cast(mask, tf.bool), -1),
                                             tf.shape(inputs)), inputs.dtype)
            count = tf.reduce_sum(weight, axis=axes)
            total = tf.reduce_sum(inputs * weight, axis=axes)
            squares = tf.reduce_sum(tf.square(inputs) * weight, axis=axes)
        count, total, squares = tf.unstack(
            mpi_ops.allreduce(tf.stack([count, total, squares]), op=Sum))
        count = tf.maximum(count, keras.backend.epsilon())
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance
