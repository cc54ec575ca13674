"""DistributedGradientTape: horovod.tensorflow's tape wrapper on overlap's runtime.

gradient() returns the gradients averaged (or summed) over every rank. It wraps the user's
tf.GradientTape and delegates everything else to it, so the wrapper works whether it is made
after the forward (Horovod's usual `tape = hvd.DistributedGradientTape(tape)`) or entered as the
context itself; in that second form entering it marks the step's forward too.
"""

import tensorflow as tf

from overlap import _core
from overlap.common import Average, global_process_set
from overlap.tensorflow import step_markers
from overlap.tensorflow.compression import Compression
from overlap.tensorflow.gradients import GradientReducer


class _DistributedGradientTape:
    def __init__(self, tape, reducer):
        self._tape = tape
        self._reducer = reducer

    def __enter__(self):
        step_markers.forward()
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def register_local_var(self, var):
        """Keeps `var`'s gradient on this rank, unreduced (divided by the set's size when
        scale_local_gradients), as Horovod's register_local_source."""
        self._reducer.register_local_var(var)

    register_local_source = register_local_var

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """The gradients of `target` with respect to `sources` (any nest), reduced over ranks."""
        flat = tf.nest.flatten(sources)
        if tf.executing_eagerly():
            step_markers.backward()
        grads = self._tape.gradient(target, flat, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        reduced = self._reducer.reduce(grads, flat, backward_after=tf.nest.flatten(target))
        return tf.nest.pack_sequence_as(sources, reduced)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True,
                            staleness_correction="auto"):
    """Wraps a tf.GradientTape so that gradient() returns gradients reduced over every rank.

    As horovod.tensorflow.DistributedGradientTape: compression (Compression.fp16, or an overlap
    error-feedback compressor such as Compression.topk(0.01)), sparse_as_dense (IndexedSlices
    reduced as dense tensors instead of allgathered), op Average or Sum,
    gradient_predivide_factor, groups (an int, or lists of variables, reduced together;
    num_groups is the deprecated int spelling). Variables passed to register_local_var
    (Horovod's register_local_source) keep their own gradient on each rank, divided by the
    set's size when scale_local_gradients (Horovod's default). device_dense and device_sparse
    are accepted for compatibility. The planner and staleness are hvd.init() options.

    staleness_correction (overlap's own): "auto" (default: look-ahead where a variable's
    schedule allows, else "predict"), "predict", "on" or
    "off": what the Keras optimizer that applies these gradients does under a plan that delays
    them (overlap/tensorflow/staleness.py; docs/scheduler.md, "Staleness correction in the
    adapters"). Only with delayed updates configured (staleness or max_period at init)."""
    _core.require_init("DistributedGradientTape")
    if num_groups and groups is None:
        groups = num_groups
    reducer = GradientReducer("gradient", compression, sparse_as_dense, op,
                              gradient_predivide_factor, groups, process_set,
                              scale_local_gradients, staleness_correction)
    return _DistributedGradientTape(gradtape, reducer)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers` (a Keras layer or a list of them) keep
    their trainable weights' gradients on each rank, as registered local variables (Horovod
    0.28's)."""
    import keras
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("rank %d: local_layers must be Keras layers" % _core.rank())
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_var(var)
    return tape
