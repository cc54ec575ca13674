"""Delayed updates under overlap.tensorflow: the optimizer skips a variable in the steps where the
runtime's plan brings it no update.

Under a delayed plan (planner deft with staleness > 0 or max_period > 1; runtime/planes/plan_delays.h) a
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

import tensorflow as tf

from overlap import _core, staleness
from overlap.tensorflow import staleness as tf_staleness

_ATTR = "_overlap_has_update"
_NAME = "_overlap_name"            # the gradient's allreduce name, for its schedule
_CORRECTION = "_overlap_correction"  # the staleness correction mode its reducer asks for
_LOCAL = "_overlap_local"          # this rank's gradient before the reduction (look-ahead)
_installed = False


def enabled():
    """Whether the runtime may deliver delayed results: staleness > 0 or max_period > 1 (the
    runtime's configuration: the environment and hvd.init()'s options), or, in the test build of
    the library (liboverlap_testing.so), a plan test hook that delays (runtime/plan/plan_test_hooks.h).
    The shipped library has no such hook, so the symbol is looked up, never assumed."""
    if staleness.delays_configured():
        return True
    test_hook = getattr(_core.lib(), "overlap_test_plan_may_delay", None)
    return bool(test_hook is not None and test_hook())


def tag(gradient, flag, name=None, correction="off", local=None):
    """Marks `gradient` (a reduced tensor) with its has_update flag (a bool scalar tensor), and
    with the allreduce name, the staleness correction mode the optimizer uses for its variable
    ("auto", "predict", "on" or "off"; overlap/staleness.py) and, for "auto"'s look-ahead, this
    rank's gradient before the reduction, scaled as the reduction scales it."""
    install()
    setattr(gradient, _ATTR, flag)
    setattr(gradient, _NAME, name)
    setattr(gradient, _CORRECTION, correction)
    setattr(gradient, _LOCAL, local)
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
    _overlap_stale = None          # variable key -> its mean staleness (float32 scalar tensor)
    # variable key -> how many passes its update carries (int32 scalar tensor; look-ahead under
    # a period: applied as that many updates of their mean), or None
    _overlap_spread = None
    _overlap_staleness = None      # its staleness.Correction, once one is asked for

    def _overlap_flag(self, variable):
        return (self._overlap_flags or {}).get(self._var_key(variable))

    def staleness_correction_bytes(self):
        """Bytes of extra state the staleness correction holds (overlap/tensorflow/staleness.py):
        two copies of each corrected variable with "predict", 2 + the configured staleness with
        "auto" (its kept gradients), none otherwise."""
        return 0 if self._overlap_staleness is None else self._overlap_staleness.bytes()

    def restore_staleness_shift(self):
        """Puts back the true values of the variables the staleness correction moved ahead
        (eagerly; before evaluating or saving between steps under a delayed plan)."""
        if self._overlap_staleness is not None:
            self._overlap_staleness.restore_variables(self._trainable_variables,
                                                      self._var_key)

    def update_step(self, gradient, variable, learning_rate):
        parent = super(_SkipsWithoutUpdate, self)
        flag = self._overlap_flag(variable)
        if flag is None:
            return parent.update_step(gradient, variable, learning_rate)
        stale = (self._overlap_stale or {}).get(self._var_key(variable))
        spread = (self._overlap_spread or {}).get(self._var_key(variable))

        def one(gradient):
            if stale is None:
                parent.update_step(gradient, variable, learning_rate)
            else:
                # Lowered momentum / beta1 only while the plan delays it: bit for bit the
                # optimizer's own step otherwise.
                tf.cond(stale > 0, lambda: self._overlap_lowered_step(
                    gradient, variable, learning_rate, stale),
                    lambda: parent.update_step(gradient, variable, learning_rate))

        def update():
            if spread is None:
                one(gradient)
                return
            # A period's sum of `spread` passes as that many updates of their mean (x / 1 is
            # exact: a variable without a period updates as before).
            if isinstance(gradient, tf.IndexedSlices):
                mean = tf.IndexedSlices(gradient.values / tf.cast(spread, gradient.dtype),
                                        gradient.indices, gradient.dense_shape)
            else:
                mean = gradient / tf.cast(spread, gradient.dtype)
            tf_staleness.repeat(spread, lambda _: one(mean))  # a loop, traced once

        tf.cond(flag, update, lambda: None)
        return None

    def _overlap_lowered_step(self, gradient, variable, learning_rate, stale):
        parent = super(_SkipsWithoutUpdate, self)
        if hasattr(self, "beta_1"):  # Adam, AdamW, and others with a first-moment decay
            saved = self.beta_1
            self.beta_1 = tf.cast(tf_staleness.lowered(saved, stale), variable.dtype)
            try:
                parent.update_step(gradient, variable, learning_rate)
            finally:
                self.beta_1 = saved
        elif (getattr(self, "momentum", 0) and not getattr(self, "nesterov", False) and
              hasattr(self, "momentums")):
            # Keras SGD's step (m = momentum m - lr g; x += m) with the lowered momentum.
            m = self.momentums[self._get_variable_index(variable)]
            momentum = tf.cast(tf_staleness.lowered(self.momentum, stale), variable.dtype)
            lr = tf.cast(learning_rate, variable.dtype)
            self.assign(m, m * momentum - tf.cast(gradient, variable.dtype) * lr)
            self.assign_add(variable, m)
        else:
            parent.update_step(gradient, variable, learning_rate)

    def _apply_weight_decay(self, variables):
        parent = super(_SkipsWithoutUpdate, self)
        for variable in variables:
            flag = self._overlap_flag(variable)
            if flag is None:
                parent._apply_weight_decay([variable])
                continue

            def decay(variable=variable):
                parent._apply_weight_decay([variable])

            spread = (self._overlap_spread or {}).get(self._var_key(variable))
            if spread is None:
                tf.cond(flag, decay, lambda: None)
            else:
                # Look-ahead under a period: the decay of each update the sum stands for.
                tf.cond(flag, lambda: tf_staleness.repeat(spread, lambda _: decay()),
                        lambda: None)


def _adopt(optimizer):
    if not isinstance(optimizer, _SkipsWithoutUpdate):
        base = optimizer.__class__
        optimizer.__class__ = type(base.__name__, (_SkipsWithoutUpdate, base), {})


def _corrected(optimizer, grads, variables):
    """(correction, [(index, name, variable)]) of the tagged gradients whose reducer asked for a
    staleness correction, or None."""
    chosen = [(i, getattr(g, _NAME, None), v, getattr(g, _CORRECTION, "off"))
              for i, (g, v) in enumerate(zip(grads, variables)) if g is not None]
    chosen = [(i, n, v, m) for i, n, v, m in chosen if n is not None and m != "off"]
    if not chosen:
        return None
    modes = {m for _, _, _, m in chosen}
    if len(modes) > 1:
        raise ValueError("overlap.tensorflow: rank %d: one optimizer's gradients ask for "
                         "different staleness corrections: %s (%s): give every "
                         "DistributedGradientTape feeding it the same staleness_correction" %
                         (_core.rank(), ", ".join(sorted(modes)),
                          ", ".join("%s: %s" % (n, m) for _, n, _, m in chosen)))
    mode = modes.pop()
    if optimizer._overlap_staleness is None:
        optimizer._overlap_staleness = tf_staleness.Correction(
            "predict" if mode == "auto" else mode, lookahead=mode == "auto",
            most_delay=_core.setting("OVERLAP_STALENESS", 1),
            most_period=_core.setting("OVERLAP_MAX_PERIOD", 1))
        # Tracked: tf.train.Checkpoint(optimizer=...) carries the correction's state.
        optimizer._overlap_staleness_state = optimizer._overlap_staleness.checkpointed
    elif optimizer._overlap_staleness.requested != mode:
        raise ValueError("overlap.tensorflow: rank %d: the optimizer's staleness correction is "
                         "%r; its gradients (%s) now ask for %r: one optimizer keeps the "
                         "correction it started with" %
                         (_core.rank(), optimizer._overlap_staleness.requested,
                          ", ".join(n for _, n, _, _ in chosen), mode))
    return optimizer._overlap_staleness, [(i, n, v) for i, n, v, _ in chosen]


def _apply_corrected(optimizer, original, grads, trainable_variables, corrected):
    correction, chosen = corrected
    names = [n for _, n, _ in chosen]
    variables = [v for _, _, v in chosen]
    keys = [optimizer._var_key(v) for v in variables]
    flags = [optimizer._overlap_flags[k] for k in keys]
    local = [getattr(grads[i], _LOCAL, None) for i, _, _ in chosen]
    if not optimizer.built:  # as Keras's apply() would next: the state is named by the index
        import keras
        with keras.name_scope(optimizer.name, caller=optimizer):
            optimizer.build(trainable_variables)
        optimizer.built = True
    correction.prepare(keys, variables, [optimizer._get_variable_index(v) for v in variables])
    delayed, aheads, stale, keep, run, spread = correction.factors(names, variables, flags)
    optimizer._overlap_stale = dict(zip(keys, stale))
    if correction.lookahead and correction.most_period > 1:
        optimizer._overlap_spread = dict(zip(keys, spread))
    before = correction.take_off_shift(keys, variables)
    result = original(optimizer, grads, trainable_variables)
    correction.shift_ahead(delayed, keys, variables, before, flags, aheads, keep, run,
                           optimizer, local)
    return result


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
                "overlap.tensorflow: rank %d: delayed updates (staleness > 0 or max_period > 1) "
                "cannot be combined with gradient accumulation (backward_passes_per_step > 1, "
                "Keras gradient_accumulation_steps): an accumulated step would mix steps with "
                "and without an update" % _core.rank())
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))
        _adopt(self)
        self._overlap_flags = {self._var_key(v): f for v, f in zip(variables, flags)
                               if f is not None}
        corrected = _corrected(self, grads, variables)
        try:
            if corrected is None:
                return original(self, grads, trainable_variables)
            return _apply_corrected(self, original, grads, trainable_variables, corrected)
        finally:
            self._overlap_flags = None
            self._overlap_stale = None
            self._overlap_spread = None

    keras.optimizers.Optimizer.apply = apply
    _installed = True
