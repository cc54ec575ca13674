"""DistributedOptimizer for Keras 3 optimizers (horovod.tensorflow.keras.DistributedOptimizer).

Keras 3 computes the gradients in the model's train_step and hands them to optimizer.apply();
the wrapper reduces them over every rank there, then lets the optimizer apply them. It is the
user's optimizer object itself, re-classed, so its variables, configuration, learning-rate
schedule and isinstance checks are unchanged (Horovod 0.28 fails on Keras 3 here, issue 4290:
its wrapper expects the old optimizer API).

Inside model.fit's tf.function each gradient's allreduce starts when backward produces that
gradient. The wrapper places the step markers: the forward at the start of the step function,
the backward at the first gradient backward produces (the last layer's), the update once all
gradients are in.

With update_at_forward (by default on under the planners that plan forward windows, as in
overlap.torch; docs/tensorflow.md), apply() submits the allreduces and returns; each variable's
update is applied just before its layer's next forward (layerwise.py).
"""

import tensorflow as tf

from overlap import _core
from overlap.common import FORWARD_WINDOW_PLANNERS, Adasum, Average, global_process_set
from overlap.tensorflow import delayed_updates, layerwise, step_markers
from overlap.tensorflow.compression import Compression
from overlap.tensorflow.gradients import GradientReducer


class _DistributedOptimizer:
    """Mixed in ahead of the Keras optimizer's own class."""

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = list(trainable_variables if trainable_variables is not None
                         else self._trainable_variables)
        if grads and self._overlap_reducer.op == Adasum:
            return self._apply_adasum(grads, variables, trainable_variables)
        if grads and self._overlap_deferred is not None:
            return self._apply_deferred(grads, variables)
        if grads:
            step_markers.forward()
            # Keras lists variables in layer order, so backward produces the last one's first.
            first = next((g for g in reversed(grads) if g is not None), None)
            grads = self._overlap_reducer.reduce(grads, variables, backward_after=[first])
        # Timed for the planner's price of look-ahead (step_markers.timed_update); with
        # update_at_forward (synchronous plans only, where nothing looks ahead) it is not.
        return step_markers.timed_update(
            lambda: super(_DistributedOptimizer, self).apply(grads, trainable_variables),
            grads, variables)

    _overlap_deferred = None       # layerwise.DeferredUpdates with update_at_forward
    _overlap_learning_rate = None  # the pending step's learning rate, while it is applied

    def build(self, variables):
        super().build(variables)
        if self._overlap_deferred is not None:
            self._overlap_deferred.register(variables)

    def _get_current_learning_rate(self):
        if self._overlap_learning_rate is not None:
            return self._overlap_learning_rate
        return super()._get_current_learning_rate()

    def apply_pending_updates(self):
        """Applies the updates apply() deferred (update_at_forward) now. Needed only before
        reading variables other than through a layer's forward, model.save(), save_weights()
        or get_weights() right after a step (layerwise.py)."""
        if self._overlap_deferred is not None:
            self._overlap_deferred.apply_pending()

    def _apply_deferred(self, grads, variables):
        """update_at_forward: submits each gradient that can wait (dense, floating-point, not
        local, not in a group) and applies the others now (layerwise.py)."""
        import keras
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        reducer = self._overlap_reducer
        step_markers.forward()
        first = next((g for g in reversed(grads) if g is not None), None)
        step_markers.backward(after=[first])
        groups = reducer._group_of(variables)
        deferrable = set()
        for i, (g, v) in enumerate(zip(grads, variables)):
            if (g is None or reducer.is_local(v) or i in groups or
                    not tf.as_dtype(v.dtype).is_floating or
                    (isinstance(g, tf.IndexedSlices) and not reducer.sparse_as_dense)):
                continue
            if isinstance(g, tf.IndexedSlices):
                grads[i] = tf.convert_to_tensor(g)
            deferrable.add(i)
        others = [i for i, g in enumerate(grads) if g is not None and i not in deferrable]
        if others:
            done = reducer.reduce([grads[i] for i in others], [variables[i] for i in others])
            for i, g in zip(others, done):
                grads[i] = g
        step_markers.update(after=[g for g in grads if isinstance(g, tf.Tensor)])
        self._overlap_deferred.step(grads, variables, deferrable)

    def _apply_adasum(self, grads, variables, trainable_variables):
        """op=Adasum, as Horovod's Adasum optimizer: this rank's optimizer steps on its own
        gradients; the change it made to each shared variable (the delta) is Adasum-reduced over
        the ranks, and every rank sets the variable to its value before the step plus the
        reduced delta. Local variables (register_local_var) keep their local step."""
        step_markers.forward()
        reducer = self._overlap_reducer
        shared = [i for i, (g, v) in enumerate(zip(grads, variables))
                  if g is not None and not reducer.is_local(v)]
        starts = [tf.identity(tf.convert_to_tensor(variables[i])) for i in shared]
        with tf.control_dependencies(starts):
            result = super().apply(grads, trainable_variables)
        if not shared or not reducer.included:
            return result
        deltas = [tf.convert_to_tensor(variables[i]) - s for i, s in zip(shared, starts)]
        reduced = reducer.reduce(deltas, [variables[i] for i in shared])
        for i, start, delta in zip(shared, starts, reduced):
            variables[i].assign(start + tf.cast(delta, start.dtype))
        return result

    def register_local_var(self, var):
        """Keeps `var`'s gradient on this rank, unreduced (divided by the set's size when
        scale_local_gradients), as Horovod 0.28's."""
        self._overlap_reducer.register_local_var(var)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """As in Horovod, a working DistributedOptimizer with the same options: the wrapped
        class rebuilds the optimizer, which is then wrapped as this one was."""
        base, options = cls._overlap_wrapping
        return DistributedOptimizer(base.from_config(config, custom_objects), **options)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=True, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True,
                         staleness_correction="auto", update_at_forward=None):
    """Wraps a Keras 3 optimizer so that it applies gradients reduced over every rank.

    As horovod.tensorflow.keras.DistributedOptimizer: compression (Compression.fp16, or an overlap
    error-feedback compressor such as Compression.topk(0.01)), sparse_as_dense, op Average, Sum or
    Adasum (each rank steps on its own gradients and the variables' deltas are Adasum-reduced, the
    semantics of Horovod's Adasum optimizer), gradient_predivide_factor, groups (num_groups is the
    deprecated int spelling). backward_passes_per_step > 1 uses Keras 3's own gradient accumulation
    (gradient_accumulation_steps): gradients are reduced every pass and Keras applies their average
    every backward_passes_per_step passes, the result of Horovod's local aggregation with
    average_aggregated_gradients=True. Variables passed to register_local_var keep their own
    gradient on each rank, divided by the set's size when scale_local_gradients (Horovod's default).
    name, device_dense and device_sparse are accepted for compatibility. The planner and staleness
    are hvd.init() options.

    staleness_correction (overlap's own): "auto" (default: look-ahead where a variable's
    schedule allows, else "predict"), "predict", "on" or
    "off", under a plan that delays gradients (overlap/tensorflow/staleness.py; docs/scheduler.md,
    "Staleness correction in the adapters"); optimizer.staleness_correction_bytes() reports its
    memory once it has applied delayed gradients.

    update_at_forward (overlap's own; by default on under the bytescheduler, usbyte, dear, deft
    and auto planners unless something below rules it out, off otherwise): apply() submits the
    allreduces and returns, and each variable's update is applied just before the next forward
    of the layer that owns it, so averaging overlaps the next forward (docs/tensorflow.md,
    "Updates at forward"), with the synchronous optimizer's values. Call
    optimizer.apply_pending_updates() before reading variables other than through a forward,
    save, save_weights or get_weights right after a step. Refused, naming why, with
    op=Adasum, gradient accumulation, use_ema, global_clipnorm, a LossScaleOptimizer, or a
    staleness correction under a delayed plan (True raises; the default then applies in the
    step)."""
    _core.require_init("DistributedOptimizer")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("rank %d: the optimizer is already a DistributedOptimizer" % _core.rank())
    if not hasattr(optimizer, "apply") or not hasattr(optimizer, "build"):
        raise ValueError("rank %d: DistributedOptimizer wraps Keras 3 optimizers "
                         "(keras.optimizers.*), got %s" % (_core.rank(),
                                                          type(optimizer).__name__))
    if backward_passes_per_step < 1:
        raise ValueError("rank %d: backward_passes_per_step must be >= 1, got %r" %
                         (_core.rank(), backward_passes_per_step))
    if backward_passes_per_step > 1:
        if not average_aggregated_gradients:
            raise ValueError("rank %d: backward_passes_per_step > 1 needs "
                             "average_aggregated_gradients=True (Keras 3 averages the "
                             "accumulated gradients)" % _core.rank())
        if getattr(optimizer, "built", False):
            raise ValueError("rank %d: backward_passes_per_step > 1 must be set before the "
                             "optimizer is built (wrap it before model.compile/fit)" %
                             _core.rank())
        optimizer.gradient_accumulation_steps = int(backward_passes_per_step)
    if num_groups and groups is None:
        groups = num_groups
    base = optimizer.__class__
    options = dict(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                   gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                   process_set=process_set, scale_local_gradients=scale_local_gradients,
                   staleness_correction=staleness_correction)
    # The wrapped class's module, so that a saved model names the Keras optimizer (load_model
    # wraps it again) rather than a class that exists only in this process.
    optimizer.__class__ = type(base.__name__, (_DistributedOptimizer, base),
                               {"__module__": base.__module__,
                                "_overlap_wrapping": (base, options)})
    optimizer._overlap_reducer = GradientReducer("gradient", **options)
    refusals = _deferral_refusals(optimizer, op, backward_passes_per_step, staleness_correction)
    if update_at_forward is None:
        # As overlap.torch: on where the plan has next-forward windows to fill, unless ruled out.
        planner = _core.setting("OVERLAP_PLANNER", "observed")
        update_at_forward = not refusals and planner in FORWARD_WINDOW_PLANNERS
    elif update_at_forward and refusals:
        raise ValueError("rank %d: update_at_forward=True cannot be used with %s" %
                         (_core.rank(), "; ".join(refusals)))
    options["update_at_forward"] = update_at_forward
    if update_at_forward and optimizer._overlap_reducer.included:
        optimizer._overlap_deferred = layerwise.DeferredUpdates(optimizer,
                                                                optimizer._overlap_reducer,
                                                                _keras_apply)
        if optimizer.built:
            optimizer._overlap_deferred.register(optimizer._trainable_variables)
    return optimizer


def _keras_apply(optimizer, grads, variables):
    """The Keras optimizer's own apply(), past the DistributedOptimizer."""
    return super(_DistributedOptimizer, optimizer).apply(grads, variables)


def _deferral_refusals(optimizer, op, backward_passes_per_step, staleness_correction):
    """Why this optimizer cannot defer its updates to the next forward (empty if it can)."""
    import keras
    refusals = []
    if op == Adasum:
        refusals.append("op=hvd.Adasum (its optimizer steps before it reduces)")
    if backward_passes_per_step > 1:
        refusals.append("backward_passes_per_step > 1 (Keras gradient accumulation)")
    if getattr(optimizer, "use_ema", False):
        refusals.append("use_ema (it averages every variable at each apply)")
    if getattr(optimizer, "global_clipnorm", None):
        refusals.append("global_clipnorm (it clips with every gradient at once)")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        refusals.append("a LossScaleOptimizer (it checks every gradient at once)")
    if delayed_updates.enabled() and staleness_correction != "off":
        refusals.append("a staleness correction under a delayed plan (staleness > 0 or "
                        "max_period > 1; pass staleness_correction='off' to defer instead)")
    return refusals
