"""Staleness correction in overlap.tensorflow (overlap/staleness.py has the maths;
docs/scheduler.md, "Staleness correction in the adapters").

It runs inside the Keras optimizer's apply() that delayed_updates.py wraps, so it serves both
DistributedGradientTape (feeding any Keras optimizer) and the Keras DistributedOptimizer, eagerly
and inside tf.function (the plan's schedule is read when the step runs, by tf.numpy_function).
Per apply(), for each variable whose gradient the plan in force delays:
  1. a variable moved ahead by the last apply() gets its true value back (a copy, exact);
  2. the update runs with momentum (SGD) or beta1 (Adam, AdamW) lowered for the variable's mean
     staleness (modes "on" and "predict"), or as the optimizer's own step (look-ahead);
  3. "predict": its last update is recorded (when it had one), and the variable is moved ahead by
     (updates still to come before the next step's gradient is applied) x (last update), so the
     next forward, and the gradient it takes, run where that gradient will be applied;
     look-ahead ("auto", on a variable whose every slice has the same schedule: delay d <= the
     configured staleness, period p <= the configured max_period, phase f): this rank's
     gradient of this step is kept (the last d + p - 1 are), and the variable is moved to where
     the updates of the passes not yet applied will put it (overlap/staleness.py's
     pending_passes: d of them with no period, d to d + p - 1 with one; none before the first
     update): the Keras optimizer's own update (clipping, weight decay, its slots, its step
     count), run once per such pass from this rank's kept gradient of it, oldest first,
     standing in for the averages they will bring; its slots, step count and other state are
     then put back as they were. With a period, an update that carries the sum of k passes'
     gradients is applied as k updates of the optimizer (weight decay k times, then k steps),
     each with their mean, at the step count of that apply(). As overlap.torch's look-ahead
     (overlap/torch/staleness.py), whose measurements it shares.
So between two steps the variables hold the moved-ahead values: code that reads them between
steps under a delayed plan (evaluation, a checkpoint) reads those, unless it calls
restore_variables(optimizer) first (the next apply() then moves on from the true values).
While no plan delays a variable nothing above runs for it, and values are bit for bit those
without the correction.

Checkpoints: the state above lives in tf.Variables that the optimizer tracks (the attribute
`_overlap_staleness_state`, named by each variable's index among the optimizer's variables), so
tf.train.Checkpoint(optimizer=...) saves it beside the optimizer's slots, and a fresh process
that restores the checkpoint before its first step gets it back as the correction makes it
(TensorFlow restores a tracked variable when it is created). With hvd.save_compression_state()
for the plan, a resumed run repeats the saved one bit for bit (tests/tensorflow/test_tf_resume.py).

Memory (staleness_correction_bytes()): "predict", per variable with tagged gradients, whatever
the plan, made at the first apply(): two copies of it (its true value while moved ahead, and its
last update); "auto" adds staleness + max_period - 1 (its kept gradients, configured values).
The scratch slots of look-ahead live only during apply(). The scratch updates, and a period's k
updates, run in tf.while_loops, so a traced step holds one copy of the optimizer's update per
variable for each, whatever the staleness and max_period. The kept gradients form a ring (a
step writes one row, moves none), and a variable with nothing to move by prediction skips that
multiply and add: per step, a look-ahead variable copies its true value and writes its new
gradient, besides the scratch updates. Unlike overlap.torch, each pass recomputes its
look-ahead from the true value (up to d + p - 1 updates a pass under a period), since Keras
counts one step per apply() for all variables alike.
"""

import numpy as np
import tensorflow as tf

from overlap import staleness

_BOOL = np.bool_


def _slot_lists(optimizer):
    """The optimizer's per-variable state: its attributes that are lists of Keras variables,
    one entry (or None) per trainable variable, in the optimizer's variable order (momentums,
    Adam's moments, RMSprop's averages, EMA copies, ...). Found by shape rather than by name, so
    that any Keras optimizer's look-ahead puts back what its scratch steps changed."""
    import keras
    trainable = list(optimizer._trainable_variables)
    own = {id(v) for v in trainable}
    found = []
    for value in vars(optimizer).values():
        if (isinstance(value, list) and value and len(value) == len(trainable) and
                all(e is None or isinstance(e, keras.Variable) for e in value) and
                any(e is not None for e in value) and
                not any(id(e) in own for e in value if e is not None)):
            found.append(value)
    return found


class _Checkpointed(tf.Module):
    """The correction's state variables by stable name, for tf.train.Checkpoint."""

    def __init__(self):
        super().__init__(name="overlap_staleness")
        self.state = {}


class Correction:
    """One Keras optimizer's correction; `mode` "predict" or "on"; `lookahead`: "auto", which
    looks ahead where a variable's schedule allows and predicts elsewhere; `most_delay`,
    `most_period`: the configured staleness and max_period, which bound the schedules that look
    ahead and so the gradients a variable keeps (most_delay + most_period - 1)."""

    def __init__(self, mode, lookahead=False, most_delay=1, most_period=1):
        self.checkpointed = _Checkpointed()
        self.mode = mode
        self.lookahead = bool(lookahead) and mode == "predict"
        self.most_delay = max(1, int(most_delay))
        self.most_period = max(1, int(most_period))
        self.depth = self.most_delay + self.most_period - 1
        self._view = staleness.ScheduleView()
        self._last = {}     # variable key -> tf.Variable: its last update
        self._saved = {}    # variable key -> tf.Variable: its true value while moved ahead
        self._shifted = {}  # variable key -> bool tf.Variable: it is moved ahead now
        # variable key -> tf.Variable [depth, *shape]: a ring of its kept gradients, the newest
        # at row _head, older ones after it (a kept gradient is written once, not shifted)
        self._local = {}
        self._head = {}     # variable key -> int32 tf.Variable: the newest one's row
        self._kept = {}     # variable key -> int32 tf.Variable: consecutive steps kept
        self._cache = {}

    @property
    def requested(self):
        """The mode as the gradients' tags name it ("auto" where it looks ahead)."""
        return "auto" if self.lookahead else self.mode

    def bytes(self):
        return sum(int(np.prod(v.shape)) * v.dtype.size
                   for store in (self._last, self._saved, self._local) for v in store.values())

    # -- the schedule, read when the step runs --------------------------------------------------

    def _look_ahead_schedule(self, slices):
        """(delay, period, phase) by which a variable with these slices looks ahead, or None."""
        schedule = staleness.uniform_schedule(slices) if self.lookahead else None
        if schedule is None or schedule[0] > self.most_delay or schedule[1] > self.most_period:
            return None
        return schedule

    def _factors_numpy(self, names, shapes):
        """(delayed, [ahead multiplier of the next step per element, per variable],
        [mean staleness, per variable], [look-ahead: how many gradients it keeps (d + p - 1),
        else 0, per variable], [look-ahead: how many passes the next forward runs ahead, per
        variable], [look-ahead under a period: how many passes this step's update carries, else
        1, per variable]) for the step running now."""
        self._view.refresh()
        current = self._view.current_pass()
        next_pass = current + 1
        aheads, stale, keep, run, spread = [], [], [], [], []
        delayed = False
        for name, shape in zip(names, shapes):
            slices = self._view.slices(name)
            schedule = self._look_ahead_schedule(slices)
            if slices is None or schedule:
                counts, key = (), ("none", tuple(shape))
            else:
                counts = tuple(staleness.updates_before_applied(next_pass, d_, p, f)
                               if next_pass >= 0 else 0 for _, _, d_, p, f in slices)
                key = (id(slices), tuple(shape), counts)
            delayed = delayed or slices is not None
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
            stale.append(np.float32(0 if slices is None or schedule else
                                    staleness.mean_staleness(slices)))
            d, p, f = schedule or (0, 1, 0)
            keep.append(np.int32(d + p - 1 if schedule else 0))
            # No pass runs ahead before the first update: whether this rank kept the gradients
            # of pass 0 depends on when it saw the plan, and every rank must move alike.
            run.append(np.int32(staleness.pending_passes(next_pass, d, p, f) if schedule else 0))
            spread.append(np.int32(max(1, staleness.carried_passes(current - d, p, f))
                                   if schedule else 1))
        return [_BOOL(delayed)] + aheads + stale + keep + run + spread

    def factors(self, names, variables, flags):
        """Tensors (delayed, aheads, staleness, keep, run, spread) of _factors_numpy, read when
        the step runs: after this step's reductions (`flags`, their has_update outputs), so after
        its forward marker (a tf.function runs the py function by data dependence, not in
        program order)."""
        shapes = [tuple(v.shape) for v in variables]
        n = len(variables)
        out = tf.numpy_function(lambda *_: self._factors_numpy(names, shapes),
                                [tf.stack([tf.cast(f, tf.bool) for f in flags])],
                                [tf.bool] + [tf.float32] * (2 * n) + [tf.int32] * (3 * n),
                                stateful=True)
        delayed = tf.reshape(out[0], [])
        aheads = [tf.reshape(a, [-1]) for a in out[1:n + 1]]  # one element, or one per element
        stale = [tf.reshape(s, []) for s in out[n + 1:2 * n + 1]]
        keep = [tf.reshape(k, []) for k in out[2 * n + 1:3 * n + 1]]
        run = [tf.reshape(r, []) for r in out[3 * n + 1:4 * n + 1]]
        spread = [tf.reshape(c, []) for c in out[4 * n + 1:]]
        return delayed, aheads, stale, keep, run, spread

    # -- state ----------------------------------------------------------------------------------

    def _state(self, store, kind, key, index, shape, dtype):
        found = store.get(key)
        if found is None:
            with tf.init_scope():
                found = tf.Variable(tf.zeros(shape, dtype), trainable=False,
                                    name="overlap_staleness_%s_%d" % (kind, index))
                # Tracked under a name every process gives it alike; a checkpoint restored
                # before this moment fills it now.
                self.checkpointed.state["%s_%d" % (kind, index)] = found
            store[key] = found
        return found

    def prepare(self, keys, variables, indices):
        """Makes the state variables ("predict" only; outside any tf.function's graph).
        `indices`: each variable's index among the optimizer's variables, which names its state
        in checkpoints."""
        if self.mode != "predict":
            return
        for key, variable, index in zip(keys, variables, indices):
            self._state(self._last, "last", key, index, variable.shape, variable.dtype)
            self._state(self._saved, "saved", key, index, variable.shape, variable.dtype)
            self._state(self._shifted, "shifted", key, index, [], tf.bool)
            if self.lookahead:
                self._state(self._local, "local", key, index,
                            [self.depth] + list(variable.shape), variable.dtype)
                self._state(self._kept, "kept", key, index, [], tf.int32)
                self._state(self._head, "head", key, index, [], tf.int32)

    def take_off_shift(self, keys, variables):
        """Step 1: every variable back to its true value; returns them as they are now. Whatever
        the plan now: one dropped since the last step leaves nothing moved ahead."""
        if self.mode == "predict":
            for key, variable in zip(keys, variables):
                shifted, saved = self._shifted[key], self._saved[key]

                def restore(variable=variable, shifted=shifted, saved=saved):
                    variable.assign(saved)
                    shifted.assign(False)
                    return tf.constant(True)
                tf.cond(shifted, restore, lambda: tf.constant(False))
        return [tf.identity(v) for v in variables]

    def shift_ahead(self, delayed, keys, variables, before, flags, aheads, keep=None, run=None,
                    optimizer=None, local=None):
        """Step 3. `keep`, `run`: factors()'s; `local`: this rank's gradient of each variable
        (look-ahead only); `optimizer`: the Keras optimizer whose own update looks ahead."""
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
                self._saved[key].assign(variable)
                self._shifted[key].assign(True)

                def move(last=last, variable=variable, ahead=ahead):
                    moved = tf.reshape(tf.reshape(last, [-1]) * tf.cast(ahead, last.dtype),
                                       tf.shape(last))
                    variable.assign_add(moved)
                    return tf.constant(True)
                # Not for a variable that looks ahead or has nothing to come (all zeros): a
                # multiply and an add of its whole size, for nothing.
                tf.cond(tf.reduce_any(tf.not_equal(ahead, 0)), move, lambda: tf.constant(False))
            if self.lookahead and optimizer is not None:
                self._look_ahead(optimizer, keys, variables, keep, run, local)
            return tf.constant(True)
        tf.cond(delayed, shift, lambda: tf.constant(False))

    # -- look-ahead -----------------------------------------------------------------------------

    def _keep_local(self, keys, variables, keep, local):
        """Keeps this step's gradient of each look-ahead variable (in its ring, the last
        `depth`); a step that keeps none for a variable starts its window again. Returns, per
        variable, how many consecutive steps' gradients it holds."""
        held = []
        for key, variable, k, g in zip(keys, variables, keep, local):
            buffer, kept, head = self._local[key], self._kept[key], self._head[key]

            def store(buffer=buffer, kept=kept, head=head, g=g):
                g = tf.cast(tf.convert_to_tensor(g), buffer.dtype)[None]
                # The oldest row becomes the newest: one gradient written, none moved.
                newest = tf.math.floormod(head - 1, self.depth)
                buffer.scatter_update(tf.IndexedSlices(g, newest[None]))
                head.assign(newest)
                kept.assign(tf.minimum(kept + 1, self.depth))
                return tf.constant(True)

            def forget(kept=kept):
                kept.assign(0)
                return tf.constant(False)
            if g is None:  # no gradient of this rank's to keep (not a dense reduction)
                forget()
            else:
                tf.cond(k > 0, store, forget)
            held.append(tf.identity(kept))
        return held

    def _look_ahead(self, optimizer, keys, variables, keep, run, local):
        held = self._keep_local(keys, variables, keep, local)
        moving = [tf.logical_and(r > 0, h >= r) for r, h in zip(run, held)]
        lists = _slot_lists(optimizer)
        slots = []
        for variable in variables:
            i = optimizer._get_variable_index(variable)
            slots += [lst[i] for lst in lists if lst[i] is not None]
        per_variable = {id(s) for lst in lists for s in lst if s is not None}
        shared = [v for v in optimizer.variables if id(v) not in per_variable]
        kept_slots = [tf.identity(s) for s in slots]
        kept_shared = [tf.identity(v) for v in shared]
        scale = getattr(optimizer, "loss_scale_factor", None)
        saved_flags, saved_stale = optimizer._overlap_flags, optimizer._overlap_stale
        saved_spread = optimizer._overlap_spread
        use_ema = getattr(optimizer, "use_ema", False)
        optimizer.use_ema = False  # the moving averages see true updates only
        # As many scratch updates as the variable furthest behind needs (repeat: traced once).
        passes = tf.reduce_max(tf.stack([tf.where(m, r, 0) for m, r in zip(moving, run)]))

        def scratch_update(j):
            # Scratch update j + 1 of r (the passes to run ahead): the kept gradient of
            # r - 1 - j steps ago; the step count moves as the real updates' will.
            grads = []
            for key, r in zip(keys, run):
                ago = tf.maximum(r - 1 - j, 0)  # the kept gradient of `ago` steps before now
                g = tf.gather(self._local[key],
                              tf.math.floormod(self._head[key] + ago, self.depth))
                grads.append(g if scale is None else g / scale)
            optimizer._overlap_flags = {key: tf.logical_and(m, j < r)
                                        for key, m, r in zip(keys, moving, run)}
            optimizer._overlap_stale = None
            optimizer._backend_apply_gradients(grads, list(variables))
            optimizer._iterations.assign_add(1)

        try:
            optimizer._overlap_spread = None
            repeat(passes, scratch_update, most=self.depth)
        finally:
            optimizer._overlap_flags, optimizer._overlap_stale = saved_flags, saved_stale
            optimizer._overlap_spread = saved_spread
            optimizer.use_ema = use_ema
        for s, value in zip(slots, kept_slots):
            s.assign(value)
        for v, value in zip(shared, kept_shared):
            v.assign(value)

    def restore_variables(self, variables, key_of):
        """Puts every moved-ahead variable back (eagerly), leaving the true values."""
        for variable in variables:
            key = key_of(variable)
            shifted = self._shifted.get(key)
            if shifted is not None and bool(shifted.numpy()):
                variable.assign(self._saved[key])
                shifted.assign(False)


def repeat(times, fn, most=None):
    """Runs fn(j) for j = 0 .. `times` - 1 (an int32 scalar tensor; at most `most`) in a
    tf.while_loop: traced once whatever the count, each pass's state updates after the last's
    (eagerly, a Python loop). The adapters' look-ahead and spread run their optimizer updates
    through it: unrolled, bert-base's 204 variables under periods up to 4 took minutes to trace."""
    def body(j):
        fn(j)
        return [j + 1]
    tf.while_loop(lambda j: j < times, body, [tf.constant(0, tf.int32)],
                  maximum_iterations=most)


def lowered(momentum, stale):
    """staleness.lowered_momentum as a tensor op on a float32 scalar `stale`."""
    return tf.maximum(tf.constant(0.0, tf.float32),
                      1.0 - (1.0 - tf.cast(momentum, tf.float32)) * (1.0 + stale))
