"""Delayed updates under overlap.tensorflow, checked value by value.

BUILD runs this with OVERLAP_TEST_PLAN_SCHEDULE="d,p": once the runtime adopts its plan (at step
A, which the test does not know in advance), rank 0 gives every allreduce bucket delay d and
update period p, with phases staggered by bucket (runtime/plan/plan_scheduler.cc). With r_k the average
over ranks of every rank's gradient at step k's weights (computed here from every rank's data),
a variable's gradient at step k is then (runtime/planes/plan_delays.h):
  - before the plan (k < A): r_k;
  - in pass n = k - A: nothing (has_update false) when n < d or (n - d) % p != f, its bucket's
    phase; otherwise r_(A+j) summed over j = max(0, n-d-p+1) .. n-d (what its bucket sent in
    pass n - d: that step's gradient plus the residual folded since its last send).
Every step is checked against this, the phase f of each variable being inferred from its first
update and held to after. A step without an update must leave the variable and its momentum
slot as they were; one with an update must move both as SGD with momentum does with exactly that
gradient. A metric allreduced in every step must carry that step's own sum throughout (only
gradients are delayed). The steps cycle through six ways of training that submit the same tensors:
DistributedGradientTape feeding a plain Keras optimizer, the Keras DistributedOptimizer, and
the same with update_at_forward (its pending updates applied at the end of the step; from the
plan's adoption on), each inside tf.function and eagerly (seven entries, so that with p = 2 every
way meets steps with and without an update).
"""

import os

import keras
import numpy as np
import tensorflow as tf

STEPS = 48
LR = 0.1
MOMENTUM = 0.9
WAYS = ["tape-function", "tape-eager", "keras-function", "keras-eager", "deferred-function",
        "deferred-eager", "tape-function"]


def schedule():
    d, p = (int(v) for v in os.environ["OVERLAP_TEST_PLAN_SCHEDULE"].split(","))
    return d, p


def batch(rank, step):
    rng = np.random.default_rng(1000 * step + rank)
    x = rng.uniform(-1, 1, (8, 6)).astype(np.float32)
    y = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
    return x, y


def make_variables():
    rng = np.random.default_rng(7)
    shapes = [(6, 16), (16,), (16, 3), (3,)]
    return [tf.Variable(rng.normal(0, 0.5, s).astype(np.float32), name="w%d" % i)
            for i, s in enumerate(shapes)]


def loss_of(variables, x, y):
    w1, b1, w2, b2 = variables
    return tf.reduce_mean((tf.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)


def reference(hvd, variables, step):
    """r_step: the average over ranks of each rank's gradient at the current weights. The data
    travels by allgather, which the plan leaves alone (it plans allreduces only)."""
    x, y = batch(hvd.rank(), step)
    xs = hvd.allgather(tf.constant(x), name="data.x").numpy().reshape(hvd.size(), 8, 6)
    ys = hvd.allgather(tf.constant(y), name="data.y").numpy().reshape(hvd.size(), 8, 3)
    total = None
    for r in range(hvd.size()):
        with tf.GradientTape() as tape:
            loss = loss_of(variables, xs[r], ys[r])
        grads = [g.numpy().astype(np.float64) for g in tape.gradient(loss, variables)]
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
    return [g / hvd.size() for g in total]


class Ways:
    """The four training steps, each returning the has_update flags it saw."""

    def __init__(self, hvd, variables):
        self.hvd, self.variables = hvd, variables
        self.plain = keras.optimizers.SGD(LR, momentum=MOMENTUM)
        # Delivery is checked here, so no staleness correction (test_tf_staleness.py checks it).
        # (deft would update at forward by default; this way applies in the step.)
        self.wrapped = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM),
                                                staleness_correction="off",
                                                update_at_forward=False)
        # Updates at forward (layerwise.py), applied at the end of each step here (these
        # variables belong to no layer): the flag comes from the deferred allreduce's finish.
        self.deferred = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM),
                                                 staleness_correction="off",
                                                 update_at_forward=True)
        self.plain.build(variables)
        self.wrapped.build(variables)
        self.deferred.build(variables)
        self.tape_function = tf.function(self.tape_step)
        self.keras_function = tf.function(self.keras_step)
        self.deferred_function = tf.function(self.deferred_step)

    def tape_step(self, x, y):
        with self.hvd.DistributedGradientTape(tf.GradientTape(),
                                              staleness_correction="off") as tape:
            loss = loss_of(self.variables, x, y)
        grads = tape.gradient(loss, self.variables)
        flags = [self.hvd.has_update(g) for g in grads]
        self.plain.apply_gradients(zip(grads, self.variables))
        return flags

    def keras_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(self.variables, x, y)
        grads = tape.gradient(loss, self.variables)
        self.wrapped.apply(grads, self.variables)
        return [tf.constant(True)]  # the wrapped optimizer keeps its flags to itself

    def deferred_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(self.variables, x, y)
        grads = tape.gradient(loss, self.variables)
        self.deferred.apply(grads, self.variables)
        self.deferred.apply_pending_updates()
        return [tf.constant(True)]

    def optimizer(self, way):
        return {"tape": self.plain, "keras": self.wrapped,
                "deferred": self.deferred}[way.split("-")[0]]

    def run(self, way, x, y):
        step = {"tape-function": self.tape_function, "tape-eager": self.tape_step,
                "keras-function": self.keras_function, "keras-eager": self.keras_step,
                "deferred-function": self.deferred_function,
                "deferred-eager": self.deferred_step}[way]
        return [bool(f) for f in step(tf.constant(x), tf.constant(y))]


def momentum_slots(optimizer, variables):
    return [optimizer.momentums[optimizer._get_variable_index(v)].numpy().copy()
            for v in variables]


def expected_gradient(history, plan_start, step, d, p, phase, i):
    """What the schedule delivers to variable `i` at `step` (None: no update)."""
    n = step - plan_start
    if n < d or (n - d) % p != phase:
        return None
    sent = n - d
    return sum(history[plan_start + j][i] for j in range(max(0, sent - p + 1), sent + 1))


def test_gradients_arrive_as_the_delayed_plan_says(hvd):
    d, p = schedule()
    variables = make_variables()
    hvd.broadcast_variables(variables, root_rank=0)
    ways = Ways(hvd, variables)
    history = {}            # step -> [r_step per variable]
    plan_start = None       # A
    phases = [None] * len(variables)
    kinds = []              # per step: "sync", "none" (nothing for any variable) or "planned"
    skipped_in = set()      # ways that met a variable without an update
    for step in range(STEPS):
        way = WAYS[step % len(WAYS)]
        if plan_start is None and way.startswith("deferred"):
            # Deferred ways join once the plan is in force: while the runtime profiles, their
            # steps' windows differ from the others', and adoption waits for a steady profile.
            way = way.replace("deferred", "keras")
        optimizer = ways.optimizer(way)
        history[step] = [r.copy() for r in reference(hvd, variables, step)]
        before = [v.numpy().astype(np.float64) for v in variables]
        slots = [m.astype(np.float64) for m in momentum_slots(optimizer, variables)]
        flags = ways.run(way, *batch(hvd.rank(), step))
        # Not a gradient: under the delayed plan too, a metric carries this step's sum.
        metric = hvd.allreduce(tf.fill([16], float(step + hvd.rank())), op=hvd.Sum,
                               name="metric").numpy()
        want = step * hvd.size() + hvd.size() * (hvd.size() - 1) // 2
        assert np.all(metric == want), (
            f"rank {hvd.rank()} step {step}: metric {metric[0]}, expected {want}")
        after = [v.numpy().astype(np.float64) for v in variables]
        new_slots = [m.astype(np.float64) for m in momentum_slots(optimizer, variables)]
        moved = [not np.array_equal(a, b) or not np.array_equal(s, t)
                 for a, b, s, t in zip(after, before, new_slots, slots)]
        where = f"rank {hvd.rank()} step {step} ({way}; steps so far {' '.join(kinds)})"
        if plan_start is None and not any(moved):
            plan_start = step  # pass 0 of a plan with d >= 1 delivers nothing to anyone
        for i in range(len(variables)):
            if plan_start is None:
                grad = history[step][i]
            else:
                if phases[i] is None and moved[i]:
                    phases[i] = (step - plan_start - d) % p
                grad = expected_gradient(history, plan_start, step, d, p,
                                         phases[i] if phases[i] is not None else -1, i)
            if grad is None:
                assert not moved[i], f"{where}: variable {i} or its slot changed without an update"
                if way.startswith("tape"):
                    assert not flags[i], f"{where}: variable {i}'s gradient says has_update"
                skipped_in.add(way)
                continue
            assert moved[i], f"{where}: variable {i} was due an update and did not move"
            slot = MOMENTUM * slots[i] - LR * grad
            np.testing.assert_allclose(new_slots[i], slot, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{where}: variable {i}'s momentum")
            np.testing.assert_allclose(after[i], before[i] + slot, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{where}: variable {i}")
        kinds.append("sync" if plan_start is None else "none" if not any(moved) else "planned")
        every = hvd.allgather(tf.concat([tf.reshape(v, [1, -1]) for v in variables], 1),
                              name="check").numpy()
        for r in range(hvd.size()):
            assert np.array_equal(every[r], every[hvd.rank()]), f"{where}: rank {r} differs"
    text = " ".join(kinds)
    print(f"rank {hvd.rank()}: d={d} p={p} plan from step {plan_start}, phases {phases}: {text}")
    assert plan_start is not None, f"the plan was never adopted: {text}; {hvd.stats()}"
    assert STEPS - plan_start >= 12, f"too few planned steps: {text}"
    assert all(f is not None for f in phases), f"a variable never got an update: {text}"
    if p > 1:
        assert skipped_in >= set(WAYS), f"ways that met no skipped step: {set(WAYS) - skipped_in}"
    stats = hvd.stats()
    assert stats["plans_scheduled"] == 1, stats
    assert stats["delayed_bytes"] > 0, stats
