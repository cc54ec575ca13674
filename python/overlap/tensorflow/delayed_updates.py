"""Delayed updates under overlap.tensorflow: the optimizer skips a variable in the steps where the
runtime's plan brings it no update.

Under a delayed plan (planner deft with staleness > 0 or max_period > 1; runtime/plan_delays.h) a
gradient's allreduce delivers, at step k, the average its bucket communicated d steps earlier,
or nothing: in the first d steps after the plan is adopted and, with an update period p, in the
steps when its bucket only folds the gradient into its error-feedback residual. Then the result
is zeros and the op's has_update output is false. Applying those zeros is not a no-op: momentum,
Adam's moments and weight decay would still move the variable. So, as overlap.torch sets
p.grad = None, the variable is skipped: its value and its optimizer slots stay as they are.

How: the gradient reducer (gradients.py) tags each reduced gradient tensor with its flag
(`tag`). Keras 3 optimizers' apply() is wrapped (`install`, done once when the first tagged
gradient is made): when the gradients it gets carry tags, the optimizer object is re-classed
with `_SkipsWithoutUpdate`, whose update_step and weight decay run under tf.cond(flag), inside
tf.function and eagerly alike. So both the Keras DistributedOptimizer and a plain Keras optimizer
fed by DistributedGradientTape skip. The optimizer's iteration counter still advances (as in
Keras when a gradient is None), so Adam's bias correction counts steps, not updates.

Limits: a tag lives on the tensor object, so a gradient transformed between the tape and the
optimizer (clipped, scaled) loses it and is applied as zeros; read the flag first with
has_update(). Keras gradient accumulation (backward_passes_per_step > 1) is refused with
delayed updates, and EMA (use_ema) still averages every variable each step.
"""

import os

import tensorflow as tf

_ATTR = "_overlap_has_update"
_installed = False


def enabled():
    """Whether the runtime may deliver delayed results: staleness > 0, max_period > 1, or the
    test hook OVERLAP_TEST_PLAN_SCHEDULE (runtime/plan_scheduler.cc). Read from the OVERLAP_*
    variables, which hvd.init() sets from its arguments."""
    def number(variable, default):
        try:
            return int(os.environ.get(variable) or default)
        except ValueError:
            return default
    return (number("OVERLAP_STALENESS", 0) > 0 or number("OVERLAP_MAX_PERIOD", 1) > 1 or
            bool(os.environ.get("OVERLAP_TEST_PLAN_SCHEDULE")))


def tag(gradient, flag):
    """Marks `gradient` (a reduced tensor) with its has_update flag (a bool scalar tensor)."""
    install()
    setattr(gradient, _ATTR, flag)
    return gradient


def has_update(gradient):
    """The has_update flag of a gradient from DistributedGradientTape: a bool scalar tensor,
    false in a step where a delayed plan brought the variable no update (the gradient is zeros
    then). True for an untagged gradient (no delayed updates configured)."""
    flag = getattr(gradient, _ATTR, None)
    return tf.constant(True) if flag is None else flag


class _SkipsWithoutUpdate:
    """Mixed in ahead of a Keras optimizer's class: update_step and weight decay of a variable
    whose flag is false do not run. `_overlap_flags` (variable key -> flag) is set for the
    duration of one apply()."""

    _overlap_flags = None

    def _overlap_flag(self, variable):
        return (self._overlap_flags or {}).get(self._var_key(variable))

    def update_step(self, gradient, variable, learning_rate):
        parent = super(_SkipsWithoutUpdate, self)
        flag = self._overlap_flag(variable)
        if flag is None:
            return parent.update_step(gradient, variable, learning_rate)

        def update():
            parent.update_step(gradient, variable, learning_rate)

        tf.cond(flag, update, lambda: None)
        return None

    def _apply_weight_decay(self, variables):
        parent = super(_SkipsWithoutUpdate, self)
        for variable in variables:
            flag = self._overlap_flag(variable)
            if flag is None:
                parent._apply_weight_decay([variable])
                continue

            def decay(variable=variable):
                parent._apply_weight_decay([variable])

            tf.cond(flag, decay, lambda: None)


def _adopt(optimizer):
    if not isinstance(optimizer, _SkipsWithoutUpdate):
        base = optimizer.__class__
        optimizer.__class__ = type(base.__name__, (_SkipsWithoutUpdate, base), {})


def install():
    """Wraps keras.optimizers.Optimizer.apply once (apply_gradients calls it) so that tagged
    gradients skip their variables; untagged calls go through unchanged."""
    global _installed
    if _installed:
        return
    import keras

    original = keras.optimizers.Optimizer.apply

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        flags = [getattr(g, _ATTR, None) for g in grads]
        if all(f is None for f in flags):
            return original(self, grads, trainable_variables)
        if getattr(self, "gradient_accumulation_steps", None):
            raise ValueError(
                "overlap.tensorflow: delayed updates (staleness > 0 or max_period > 1) cannot be "
                "combined with gradient accumulation (backward_passes_per_step > 1, Keras "
                "gradient_accumulation_steps): an accumulated step would mix steps with and "
                "without an update")
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))
        _adopt(self)
        self._overlap_flags = {self._var_key(v): f for v, f in zip(variables, flags)
                               if f is not None}
        try:
            return original(self, grads, trainable_variables)
        finally:
            self._overlap_flags = None

    keras.optimizers.Optimizer.apply = apply
    _installed = True
