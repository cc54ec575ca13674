"""Staleness correction in overlap.tensorflow (overlap/staleness.py has the maths;
docs/scheduler.md, "Staleness correction in the adapters").

It runs inside the Keras optimizer's apply() that delayed_updates.py wraps, so it serves both
DistributedGradientTape (feeding any Keras optimizer) and the Keras DistributedOptimizer, eagerly
and inside tf.function (the plan's schedule is read when the step runs, by tf.numpy_function).
Per apply(), for each variable whose gradient the plan in force delays:
  1. its shift (below) is taken off, so the optimizer updates the true value;
  2. the update runs with momentum (SGD) or beta1 (Adam, AdamW) lowered for the variable's mean
     staleness (modes "on" and "predict");
  3. "predict": its last update is recorded (when it had one), and the variable is moved ahead by
     (updates still to come before the next step's gradient is applied) x (last update), so the
     next forward, and the gradient it takes, run where that gradient will be applied.
So between two steps the variables hold the extrapolated values: code that reads them between
steps under a delayed plan (evaluation, a checkpoint) reads those, unless it calls
restore_variables(optimizer) first (the next apply() then moves on from the true values).
While no plan delays a variable nothing above runs for it, and values are bit for bit those
without the correction.

Memory (staleness_correction_bytes()): two variables the size of each corrected variable (its
last update and its shift), made at the first apply() with tagged gradients, whatever the plan.
"""

import numpy as np
import tensorflow as tf

from overlap import staleness

_BOOL = np.bool_


class Correction:
    """One Keras optimizer's correction; `mode` "predict" or "on"."""

    def __init__(self, mode):
        self.mode = mode
        self._view = staleness.ScheduleView()
        self._last = {}   # variable key -> tf.Variable
        self._shift = {}  # variable key -> tf.Variable
        self._cache = {}

    def bytes(self):
        return sum(int(np.prod(v.shape)) * v.dtype.size
                   for store in (self._last, self._shift) for v in store.values())

    # -- the schedule, read when the step runs --------------------------------------------------

    def _factors_numpy(self, names, shapes):
        """(delayed, [ahead multiplier of the next step per element, per variable],
        [mean staleness, per variable]) for the step running now."""
        self._view.refresh()
        next_pass = self._view.current_pass() + 1
        aheads, stale = [], []
        delayed = False
        for name, shape in zip(names, shapes):
            slices = self._view.slices(name)
            if slices is None:
                counts, key = (), ("synchronous", tuple(shape))
            else:
                delayed = True
                counts = tuple(staleness.updates_before_applied(next_pass, d, p, f)
                               if next_pass >= 0 else 0 for _, _, d, p, f in slices)
                key = (id(slices), tuple(shape), counts)
            cached = self._cache.get(key)
            if cached is None:
                if len(set(counts)) <= 1:
                    # One multiplier for the whole variable (the usual case: one slice, or
                    # slices alike): a single element, broadcast, not a copy of its size.
                    flat = np.full(1, counts[0] if counts else 0, np.float32)
                else:
                    flat = np.zeros(int(np.prod(shape)), np.float32)
                    for (offset, count, _, _, _), ahead in zip(slices, counts):
                        flat[offset:offset + count] = ahead
                if len(self._cache) > 4096:
                    self._cache.clear()
                # The slices are kept with their array so that their id is not reused.
                cached = self._cache[key] = (flat, slices)
            aheads.append(cached[0])
            stale.append(np.float32(0 if slices is None else staleness.mean_staleness(slices)))
        return [_BOOL(delayed)] + aheads + stale

    def factors(self, names, variables, flags):
        """Tensors (delayed, aheads, staleness) of _factors_numpy, read when the step runs: after
        this step's reductions (`flags`, their has_update outputs), so after its forward marker
        (a tf.function runs the py function by data dependence, not in program order)."""
        shapes = [tuple(v.shape) for v in variables]
        n = len(variables)
        out = tf.numpy_function(lambda *_: self._factors_numpy(names, shapes),
                                [tf.stack([tf.cast(f, tf.bool) for f in flags])],
                                [tf.bool] + [tf.float32] * (2 * n), stateful=True)
        delayed = tf.reshape(out[0], [])
        aheads = [tf.reshape(a, [-1]) for a in out[1:n + 1]]  # one element, or one per element
        stale = [tf.reshape(s, []) for s in out[n + 1:]]
        return delayed, aheads, stale

    # -- state ----------------------------------------------------------------------------------

    def _state(self, store, key, variable):
        found = store.get(key)
        if found is None:
            with tf.init_scope():
                found = tf.Variable(tf.zeros(variable.shape, variable.dtype), trainable=False,
                                    name="overlap_staleness")
            store[key] = found
        return found

    def prepare(self, keys, variables):
        """Makes the state variables ("predict" only; outside any tf.function's graph)."""
        if self.mode != "predict":
            return
        for key, variable in zip(keys, variables):
            self._state(self._last, key, variable)
            self._state(self._shift, key, variable)

    def take_off_shift(self, delayed, keys, variables):
        """Step 1: every variable back to its true value; returns them as they are now."""
        if self.mode == "predict":
            def restore():
                for key, variable in zip(keys, variables):
                    variable.assign_sub(self._shift[key])
                return tf.constant(True)
            tf.cond(delayed, restore, lambda: tf.constant(False))
        return [tf.identity(v) for v in variables]

    def shift_ahead(self, delayed, keys, variables, before, flags, aheads):
        """Step 3."""
        if self.mode != "predict":
            return

        def shift():
            for key, variable, old, flag, ahead in zip(keys, variables, before, flags, aheads):
                last = self._last[key]

                def record(last=last, variable=variable, old=old):
                    last.assign(tf.cast(variable, last.dtype) - old)
                    return tf.constant(True)
                # A cond, not a where over the whole variable: a step without an update for it
                # leaves its last update as it was.
                tf.cond(tf.cast(flag, tf.bool), record, lambda: tf.constant(False))
                moved = tf.reshape(tf.reshape(last, [-1]) * tf.cast(ahead, last.dtype),
                                   tf.shape(last))
                self._shift[key].assign(moved)
                variable.assign_add(moved)
            return tf.constant(True)
        tf.cond(delayed, shift, lambda: tf.constant(False))

    def restore_variables(self, variables, key_of):
        """Takes every shift off (eagerly), leaving the true values and no shift in force."""
        for variable in variables:
            shift = self._shift.get(key_of(variable))
            if shift is not None:
                variable.assign_sub(shift)
                shift.assign(tf.zeros_like(shift))


def lowered(momentum, stale):
    """staleness.lowered_momentum as a tensor op on a float32 scalar `stale`."""
    return tf.maximum(tf.constant(0.0, tf.float32),
                      1.0 - (1.0 - tf.cast(momentum, tf.float32)) * (1.0 + stale))
