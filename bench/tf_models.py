"""Emulated Keras models for the TensorFlow side-by-side (bench/tf_side_by_side.sh).

The Keras counterpart of bench/torch_models.py, with the same profiles, shapes and scaling (its
helpers are reused): every layer of a bundled profile (scheduler/profiles/<model>.json) is a
Keras layer that owns variables of the real layer's shapes (first dimension scaled), and whose
forward and backward sleep the profile's (scaled) times, so the CPU stays free for the
communication runtime as it would be while a GPU computes. The sleeps are tf.py_function calls
chained through a one-element activation, inside tf.function: layer i's forward starts when
layer i-1's has ended and layer i's weights have been read (so after any update pending on them),
its backward when layer i+1's has ended, and each variable's gradient (a constant, rank + 1, as in
torch_models) appears when its layer's backward ends. That is when overlap's allreduce of that
gradient can start; MultiWorkerMirroredStrategy, through the Keras optimizer, reduces them all
once backward is done.

SleepOptimizer is the GPU's optimizer step: a Keras 3 optimizer whose update_step sleeps the
variable's share of the profile's update time and then writes a zero into one element (so that,
as after a real update, the variable's next read waits for it). It also records the
smallest and largest gradient element it saw (first and last of each gradient), so the driver can
check that what was applied was really reduced across ranks.
"""

import math

import keras
import tensorflow as tf

import torch_models
from torch_models import BATCH, CLOCK, choose_scaling, load_profile, ring_factor  # noqa: F401


def _sleep(x, ms):
    """x, after ms of emulated compute (ComputeClock keeps the sum of sleeps exact)."""
    if ms <= 0:
        return tf.identity(x)

    def run(t):
        CLOCK.run(ms)
        return t

    y = tf.py_function(run, [x], x.dtype)
    y.set_shape(x.shape)
    return y


def layer_specs(model, time_scale, bytes_scale):
    """[(path, [(name, shape)], forward_ms, backward_ms)] in forward order, scaled: the layers
    torch_models.build_emulated builds for the same profile."""
    profile = load_profile(model)
    specs = []
    scaled = lambda shapes: [(n, torch_models._scaled(s, bytes_scale)) for n, s in shapes]
    if model in ("vgg16", "resnet50"):
        real = iter(torch_models._vgg16_shapes() if model == "vgg16"
                    else torch_models._resnet50_shapes())
        for layer in profile["layers"]:
            if layer["tensors"]:
                path, shapes = next(real)
                want = layer["tensors"][0]["bytes"]
                got = 4 * sum(math.prod(s) for _, s in shapes)
                assert got == want, f"{model} {path}: shapes hold {got} bytes, profile {want}"
            else:
                path, shapes = "compute." + torch_models._sanitize(layer["name"]), []
            specs.append((path, scaled(shapes), layer["forward_ms"] * time_scale,
                          layer["backward_ms"] * time_scale))
    elif model == "bert-base":
        for layer in profile["layers"]:
            groups = {}
            for t in layer["tensors"]:
                module, _, pname = t["name"].rpartition(".")
                groups.setdefault(module, []).append(
                    (pname, torch_models._bert_shape(t["name"], t["bytes"]), t["bytes"]))
            layer_bytes = sum(t["bytes"] for t in layer["tensors"])
            for module, tensors in groups.items():
                share = sum(b for _, _, b in tensors) / layer_bytes
                specs.append((module, scaled([(n, s) for n, s, _ in tensors]),
                              layer["forward_ms"] * share * time_scale,
                              layer["backward_ms"] * share * time_scale))
    else:
        raise ValueError(f"unknown model '{model}' (vgg16, resnet50, bert-base)")
    return specs, profile["update_ms"] * time_scale


class SleepLayer(keras.layers.Layer):
    """One profile layer: its variables, and a forward and backward that only take time."""

    def __init__(self, path, shapes, forward_ms, backward_ms, grad_value, **kwargs):
        super().__init__(name=path.replace(".", "_"), **kwargs)
        self.forward_ms, self.backward_ms = forward_ms, backward_ms
        self.grad_value = grad_value
        self.params = [self.add_weight(shape=tuple(s), initializer="zeros", name=n)
                       for n, s in shapes]

    def call(self, x):
        forward_ms, backward_ms, value = self.forward_ms, self.backward_ms, self.grad_value

        @tf.custom_gradient
        def block(x, *weights):
            def grad(dy):
                dx = _sleep(dy, backward_ms)
                with tf.control_dependencies([dx]):  # the gradients exist once backward ends
                    grads = [tf.fill(tf.shape(w), tf.constant(value, w.dtype)) for w in weights]
                return [dx] + grads

            # A real layer's forward reads its weights, so it cannot run before their update
            # lands; the sleep must wait for the reads too, or under updates at forward
            # (docs/tensorflow.md) TensorFlow runs the next forward and backward while the
            # updates are still pending, which no real model can.
            with tf.control_dependencies(weights):
                return _sleep(x, forward_ms), grad

        return block(x, *[tf.convert_to_tensor(p) for p in self.params])


class EmulatedModel(keras.Model):
    def __init__(self, specs, grad_value):
        super().__init__()
        self.blocks = [SleepLayer(path, shapes, f, b, grad_value)
                       for path, shapes, f, b in specs]

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class SleepOptimizer(keras.optimizers.Optimizer):
    """Sleeps update_ms x (the variable's bytes / all bytes) per variable it updates; records the
    extremes of the gradient elements it saw (checked by the driver)."""

    def __init__(self, ms_per_byte, **kwargs):
        super().__init__(learning_rate=0.0, **kwargs)
        self.ms_per_byte = ms_per_byte

    def build(self, variables):
        super().build(variables)
        self.seen_min = self.add_variable((), initializer="zeros", name="seen_min")
        self.seen_max = self.add_variable((), initializer="zeros", name="seen_max")
        self.seen_min.assign(float("inf"))
        self.seen_max.assign(float("-inf"))

    def update_step(self, gradient, variable, learning_rate):
        nbytes = int(variable.shape.num_elements()) * variable.dtype.size
        flat = tf.reshape(gradient, [-1])
        ends = tf.stack([flat[0], flat[-1]])
        done = _sleep(ends, nbytes * self.ms_per_byte)
        # A real update writes the variable, and TensorFlow orders the next read of it (the
        # layer's forward) after that write. Adding a zero to one element keeps that order at
        # the cost of one element, after the sleep, so no forward runs ahead of its update.
        with tf.control_dependencies([done]):
            value = variable.value
            target = value if isinstance(value, tf.Variable) else variable
            target.scatter_nd_add([[0] * len(variable.shape)], tf.zeros([1], variable.dtype))
        self.seen_min.assign(tf.minimum(self.seen_min, tf.reduce_min(done)))
        self.seen_max.assign(tf.maximum(self.seen_max, tf.reduce_max(done)))
