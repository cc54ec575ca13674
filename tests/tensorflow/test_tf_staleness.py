"""The staleness correction of overlap.tensorflow (overlap/tensorflow/staleness.py), checked value
by value against a reference computed here.

The suites that run this file (tests/tensorflow/BUILD) each train from one process, because the
runtime adopts one plan per process and a step is one reduction (one tape, or one Keras
DistributedOptimizer): TEST_STALENESS="way:correction" picks the way and the correction.
- tape:<c> (with OVERLAP_TEST_PLAN_SCHEDULE=d,p: every gradient bucket delay d and period p,
  phases staggered by bucket, once the plan is adopted at step A, found from the has_update
  flags: the d steps that bring nothing): one DistributedGradientTape(staleness_correction=c)
  over three models' variables, applied by a plain Keras SGD (momentum), Adam and AdamW each;
  keras:<c>: one model with the Keras DistributedOptimizer(SGD with momentum). Steps alternate
  between tf.function and eager. Each model is replayed by hand in float64 with Keras's update
  rules, each variable with its own phase: "off" is the uncorrected delayed optimizer;
  "predict" lowers momentum / beta1 to max(0, 1 - (1 - m)(1 + d + (p - 1) / 2)) for the delayed
  updates and runs each forward after a variable's first delayed update at W_k + U x (its last
  update); "auto" looks ahead: the optimizer's own updates (a period's sum of k passes as k
  updates of their mean), and each forward at the point that the optimizer's own updates from
  this rank's gradients of the passes not yet applied (d of them, d to d + p - 1 with a
  period; none before the first update) would put W_k, on a copy of the optimizer's state.
- sync (OVERLAP_TEST_PLAN_SCHEDULE=0,1: a synchronous scheduled plan, delayed updates
  configured, so the gradients carry their tags): the default correction must leave every value
  bit for bit as a plain Keras optimizer fed the same gradients (untagged) leaves its twin.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

SCHEDULE = os.environ.get("OVERLAP_TEST_PLAN_SCHEDULE", "0,1")
DELAY = int(SCHEDULE.split(",")[0])
PERIOD = int(SCHEDULE.split(",")[1])
DELAYED = DELAY != 0
STEPS = 40
MOMENTUM = 0.9
BETAS = (0.9, 0.999)
EPS = 1e-7
DECAY = 0.1
LR = {"sgd": 0.05, "adam": 0.01, "adamw": 0.01}
SHAPES = [(6, 16), (16,), (16, 3), (3,)]


def batch(rank, step):
    rng = np.random.default_rng(1000 * step + rank)
    return (rng.uniform(-1, 1, (8, 6)).astype(np.float32),
            rng.uniform(-1, 1, (8, 3)).astype(np.float32))


def make_variables(run):
    rng = np.random.default_rng(7)
    return [tf.Variable(rng.normal(0, 0.5, s).astype(np.float32), name="run%d_w%d" % (run, i))
            for i, s in enumerate(SHAPES)]


def loss_of(variables, x, y):
    w1, b1, w2, b2 = variables
    return tf.reduce_mean((tf.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)


def make_optimizer(kind):
    if kind == "sgd":
        return keras.optimizers.SGD(LR[kind], momentum=MOMENTUM)
    if kind == "adam":
        return keras.optimizers.Adam(LR[kind], beta_1=BETAS[0], beta_2=BETAS[1], epsilon=EPS)
    return keras.optimizers.AdamW(LR[kind], beta_1=BETAS[0], beta_2=BETAS[1], epsilon=EPS,
                                  weight_decay=DECAY)


def way_and_correction():
    way, correction = os.environ.get("TEST_STALENESS", "tape:auto").split(":")
    return way, correction


class Runs:
    """The models of one suite, trained in one step each time (one reduction)."""

    def __init__(self, hvd, way, correction, kinds):
        self.hvd, self.way, self.correction, self.kinds = hvd, way, correction, kinds
        self.variables = [make_variables(i) for i in range(len(kinds))]
        for variables in self.variables:
            hvd.broadcast_variables(variables, root_rank=0)
        self.optimizers = [make_optimizer(kind) for kind in kinds]
        if way == "keras":
            assert len(kinds) == 1
            self.optimizers[0] = hvd.DistributedOptimizer(self.optimizers[0],
                                                          staleness_correction=correction)
        for optimizer, variables in zip(self.optimizers, self.variables):
            optimizer.build(variables)
        self.function = tf.function(self._step)

    def _step(self, x, y):
        flat = [v for variables in self.variables for v in variables]
        if self.way == "keras":
            with tf.GradientTape() as tape:
                loss = loss_of(self.variables[0], x, y)
            self.optimizers[0].apply(tape.gradient(loss, flat), flat)
            return [tf.constant(True)]
        with self.hvd.DistributedGradientTape(tf.GradientTape(),
                                              staleness_correction=self.correction) as tape:
            loss = tf.add_n([loss_of(variables, x, y) for variables in self.variables])
        grads = tape.gradient(loss, flat)
        flags = [self.hvd.has_update(g) for g in grads]
        n = len(SHAPES)
        for i, optimizer in enumerate(self.optimizers):
            optimizer.apply_gradients(zip(grads[i * n:(i + 1) * n], self.variables[i]))
        return flags

    def step(self, step, x, y):
        run = self.function if step % 2 == 0 else self._step
        return [bool(f) for f in run(x, y)]

    def values(self):
        return [[v.numpy().astype(np.float64) for v in variables] for variables in self.variables]


def train(hvd, way, correction, kinds, steps):
    """The variables of each model at each step's forward, their true values at the end, whether
    each step brought each variable an update (all models' variables in order) and each
    optimizer's correction bytes."""
    runs = Runs(hvd, way, correction, kinds)
    at_forward = [[] for _ in kinds]
    updated = []
    for step in range(steps):
        x, y = (tf.constant(a) for a in batch(hvd.rank(), step))
        for r, values in enumerate(runs.values()):
            at_forward[r].append(values)
        updated.append(runs.step(step, x, y))
        if way == "keras":
            # The Keras wrapper keeps its flags to itself: a step that brought nothing left the
            # variables where they were (no update, and no shift yet at the plan's first step;
            # its suite has no period, so every variable updates alike).
            changed = step == 0 or not all(np.array_equal(a, b) for a, b in
                                           zip(at_forward[0][-1], runs.values()[0]))
            updated[-1] = [changed] * len(SHAPES)
    for optimizer in runs.optimizers:
        if hasattr(optimizer, "restore_staleness_shift"):
            optimizer.restore_staleness_shift()
    sizes = [getattr(o, "staleness_correction_bytes", lambda: 0)() for o in runs.optimizers]
    return at_forward, runs.values(), updated, sizes


def gradients(hvd, points, step):
    """(the average over the ranks, each rank's own) gradients of step `step`, each rank's at its
    own forward point (`points`, one per rank: under look-ahead each rank moves by its own
    gradients, so the points differ, while the true values stay alike)."""
    own = []
    for rank, values in enumerate(points):
        variables = [tf.Variable(v) for v in values]
        x, y = batch(rank, step)
        with tf.GradientTape() as tape:
            loss = loss_of(variables, x.astype(np.float64), y.astype(np.float64))
        own.append([g.numpy() for g in tape.gradient(loss, variables)])
    return [sum(g) / hvd.size() for g in zip(*own)], own


def lowered(m):
    return max(0.0, 1.0 - (1.0 - m) * (1.0 + DELAY + (PERIOD - 1) / 2.0))


def pending_passes(n, f):
    """Passes before n whose gradient no update has applied by the forward of pass n (a variable
    of phase f), counted after the last communicating pass whose update came; by enumeration."""
    applied = [c for c in range(0, n - DELAY) if c % PERIOD == f]
    return n - 1 - applied[-1] if applied else 0


class Reference:
    """Keras's SGD (m = mu m - lr g; w += m), Adam and AdamW (bias correction counting every
    apply, eps outside the root) under delay DELAY and period PERIOD from step A, with the
    correction by hand; each variable has its own phase (its bucket's), found from its first
    update."""

    def __init__(self, kind, correction, start):
        self.kind = kind
        self.lookahead = correction == "auto"
        self.predict = correction == "predict"
        self.lower = correction in ("predict", "on")
        self.w = [w.copy() for w in start]
        self.m = [np.zeros_like(w) for w in start]
        self.v = [np.zeros_like(w) for w in start]
        self.phase = [None] * len(start)
        self.last = [None] * len(start)

    def forward_point(self, n, own, t):
        """The point of the forward of pass n (None: before the plan) of the rank whose own
        gradients of every step so far are `own` (oldest first); `t` the count the next update
        will use. Look-ahead: each variable moved by the optimizer's own steps from that rank's
        gradients of the passes not yet applied; predict: W + U x (its last update)."""
        point = [w.copy() for w in self.w]
        if n is None:
            return point
        for i, f in enumerate(self.phase):
            if f is None:
                continue
            if self.lookahead:
                pending = pending_passes(n, f)
                scratch = Reference(self.kind, "off", [self.w[i]])
                scratch.m, scratch.v = [self.m[i].copy()], [self.v[i].copy()]
                for j, g in enumerate(own[len(own) - pending:]):
                    scratch.step(0, g[i], False, t + j)
                point[i] = scratch.w[0]
            elif self.predict and self.last[i] is not None:
                from overlap import staleness as maths
                ahead = maths.updates_before_applied(n, DELAY, PERIOD, f)
                point[i] = self.w[i] + ahead * self.last[i]
        return point

    def update(self, i, g, delayed, t, carried=1):
        """Variable i's update by the averaged gradient (a sum of `carried` passes' under a
        period); look-ahead applies it as `carried` updates of their mean: the decays, then the
        steps, all at count t."""
        before = self.w[i].copy()
        if delayed and self.lookahead and carried > 1:
            if self.kind == "adamw":
                for _ in range(carried):
                    self.w[i] = self.w[i] - self.w[i] * DECAY * LR["adamw"]
            for _ in range(carried):
                self.step(i, g / carried, False, t, decay=False)
        else:
            self.step(i, g, delayed and self.lower, t)
        if delayed and self.predict:
            self.last[i] = self.w[i] - before

    def step(self, i, g, lower, t, decay=True):
        mu, b1 = (lowered(MOMENTUM), lowered(BETAS[0])) if lower else (MOMENTUM, BETAS[0])
        if self.kind == "sgd":
            self.m[i] = mu * self.m[i] - LR["sgd"] * g
            self.w[i] = self.w[i] + self.m[i]
            return
        lr = LR[self.kind]
        if self.kind == "adamw" and decay:
            self.w[i] = self.w[i] - self.w[i] * DECAY * lr
        alpha = lr * np.sqrt(1 - BETAS[1] ** t) / (1 - b1 ** t)
        self.m[i] = self.m[i] + (g - self.m[i]) * (1 - b1)
        self.v[i] = self.v[i] + (g * g - self.v[i]) * (1 - BETAS[1])
        self.w[i] = self.w[i] - self.m[i] * alpha / (np.sqrt(self.v[i]) + EPS)


def close(actual, expected, what):
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, rtol=2e-4, atol=2e-5, err_msg=f"{what}, variable {i}")


@pytest.mark.skipif(not DELAYED, reason="needs the forced delayed plan")
def test_correction_matches_a_reference_by_hand_under_a_delay(hvd):
    way, correction = way_and_correction()
    kinds = ["sgd"] if way == "keras" else ["sgd", "adam", "adamw"]
    at_forward, final, updated, sizes = train(hvd, way, correction, kinds, STEPS)
    # The plan's first DELAY steps bring no variable an update (with a period, neither do the
    # steps whose pass - DELAY no bucket sent: the buckets' phases are staggered).
    none = [k for k, u in enumerate(updated) if not any(u)]
    adopted = none[0]
    assert none[:DELAY] == list(range(adopted, adopted + DELAY)), (
        f"expected {DELAY} steps in a row without updates (the plan's first): {updated}")
    assert STEPS - adopted >= 12, f"the plan came too late (step {adopted}) to test much"
    start = at_forward[0][0]
    elements = sum(int(np.prod(s)) for s in SHAPES)
    for r, kind in enumerate(kinds):
        what = f"rank {hvd.rank()} {kind} ({way}, {correction}; plan from step {adopted})"
        ref = Reference(kind, correction, start)
        averaged, own = [], []  # own[k][rank]: each rank's gradient of step k
        for k in range(STEPS):
            n = k - adopted if k >= adopted else None
            points = [ref.forward_point(n, [g[rank] for g in own], k + 1)
                      for rank in range(hvd.size())]
            close(at_forward[r][k], points[hvd.rank()], f"{what} step {k}: variables at forward")
            grads, each = gradients(hvd, points, k)
            own.append(each)
            averaged.append(grads)
            for i in range(len(SHAPES)):
                if n is None:
                    ref.update(i, grads[i], False, k + 1)
                    continue
                flag = updated[k][len(SHAPES) * r + i]
                if flag and ref.phase[i] is None:
                    ref.phase[i] = (n - DELAY) % PERIOD
                f = ref.phase[i]
                due = f is not None and n >= DELAY and (n - DELAY) % PERIOD == f
                assert flag == due, f"{what} step {k}: variable {i} updated {flag}, due {due}"
                if due:
                    sent = n - DELAY
                    first = max(0, sent - PERIOD + 1)
                    g = sum(averaged[adopted + j][i] for j in range(first, sent + 1))
                    ref.update(i, g, True, k + 1, carried=sent - first + 1)
        close(final[r], ref.w, f"{what}: true variables at the end")
        copies = {"auto": 2 + DELAY + PERIOD - 1, "predict": 2}.get(correction, 0)
        assert sizes[r] == copies * 4 * elements, (what, sizes[r], copies * 4 * elements)
    stats = hvd.stats()
    assert stats["plans_scheduled"] == 1 and stats["plan_mean_staleness"] > 0, stats


@pytest.mark.skipif(DELAYED, reason="needs a synchronous plan")
def test_correction_changes_nothing_under_a_synchronous_plan(hvd):
    kinds = ["sgd", "adam", "adamw"]
    variables = [make_variables(i) for i in range(len(kinds))]
    for v in variables:
        hvd.broadcast_variables(v, root_rank=0)
    twins = [[tf.Variable(v) for v in vs] for vs in variables]
    optimizers = [make_optimizer(k) for k in kinds]
    plain = [make_optimizer(k) for k in kinds]
    flat = [v for vs in variables for v in vs]
    n = len(SHAPES)

    def step(x, y):
        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.add_n([loss_of(vs, x, y) for vs in variables])
        grads = tape.gradient(loss, flat)
        for i in range(len(kinds)):
            mine = grads[i * n:(i + 1) * n]
            optimizers[i].apply_gradients(zip(mine, variables[i]))
            # The same values without their tags: the Keras optimizer's own step.
            plain[i].apply_gradients(zip([tf.identity(g) for g in mine], twins[i]))

    function = tf.function(step)
    for k in range(24):
        x, y = (tf.constant(a) for a in batch(hvd.rank(), k))
        (function if k % 2 == 0 else step)(x, y)
        for i in range(len(kinds)):
            for a, b in zip(variables[i], twins[i]):
                assert np.array_equal(a.numpy(), b.numpy()), f"{kinds[i]} differs at step {k}"
    stats = hvd.stats()
    assert stats["plans_scheduled"] >= 1 and stats["plan_mean_staleness"] == 0, stats


class _FakeView:
    """A plan's schedule as ScheduleView gives it (the runtime is not the point here): per
    tensor name, its slices (offset, count, delay, period, phase); the pass now running."""

    def __init__(self, slices, current):
        self._slices, self._current = slices, current

    def refresh(self):
        pass

    def current_pass(self):
        return self._current

    def slices(self, name):
        return self._slices.get(name)


def test_moving_ahead_takes_one_multiplier_per_variable_or_one_per_slice(hvd):
    """A variable whose slices share their delay and period is moved ahead by one multiplier
    (computed once, broadcast); one whose slices differ by one per slice; a variable that had no
    update this step keeps its last update. Checked eagerly against numpy."""
    from overlap import staleness as maths
    from overlap.tensorflow import staleness as tf_staleness

    correction = tf_staleness.Correction("predict")
    # "a": two slices alike (delay 1); "b": delay 1, then delay 2; "c": not delayed.
    correction._view = _FakeView({"a": [(0, 2, 1, 1, 0), (2, 4, 1, 1, 0)],
                                  "b": [(0, 3, 1, 1, 0), (3, 3, 2, 1, 0)]}, current=6)
    out = correction._factors_numpy(["a", "b", "c"], [(2, 3), (6,), (4,)])
    delayed, aheads, keep, run = out[0], out[1:4], out[7:10], out[10:13]
    assert list(keep) == [0, 0, 0] and list(run) == [0, 0, 0]  # "predict" does not look ahead
    assert delayed
    one = maths.updates_before_applied(7, 1, 1, 0)
    assert aheads[0].shape == (1,) and aheads[0][0] == one
    two = maths.updates_before_applied(7, 2, 1, 0)
    assert one != two
    np.testing.assert_array_equal(aheads[1], [one] * 3 + [two] * 3)
    assert aheads[2].shape == (1,) and aheads[2][0] == 0

    rng = np.random.default_rng(3)
    olds = [rng.normal(size=s).astype(np.float32) for s in [(2, 3), (6,), (4,)]]
    news = [o + rng.normal(size=o.shape).astype(np.float32) for o in olds]
    variables = [tf.Variable(n) for n in news]
    keys = ["a", "b", "c"]
    correction.prepare(keys, variables, [0, 1, 2])
    stale_last = np.full((4,), 5.0, np.float32)
    correction._last["c"].assign(stale_last)
    flags = [tf.constant(True), tf.constant(True), tf.constant(False)]
    correction.shift_ahead(tf.constant(True), keys, variables, [tf.constant(o) for o in olds],
                           flags, [tf.reshape(tf.constant(a), [-1]) for a in aheads])
    lasts = [news[0] - olds[0], news[1] - olds[1], stale_last]
    for variable, new, last, ahead, key in zip(variables, news, lasts, aheads, keys):
        np.testing.assert_array_equal(correction._last[key].numpy(), last)
        moved = (last.reshape(-1) * ahead).reshape(new.shape)
        np.testing.assert_array_equal(correction._saved[key].numpy(), new)
        assert bool(correction._shifted[key].numpy())
        np.testing.assert_array_equal(variable.numpy(), new + moved)
    # The true values come back exactly (a copy, not a subtraction), and only once.
    correction.take_off_shift(keys, variables)
    for variable, new, key in zip(variables, news, keys):
        np.testing.assert_array_equal(variable.numpy(), new)
        assert not bool(correction._shifted[key].numpy())
    correction.take_off_shift(keys, variables)
    for variable, new in zip(variables, news):
        np.testing.assert_array_equal(variable.numpy(), new)


def test_look_ahead_factors_follow_each_variables_schedule(hvd):
    """Look-ahead takes a variable whose slices share one delay d <= the configured staleness and
    period 1, from the pass d + 1 on (its gradients kept from the plan's start); any other delayed
    variable is predicted, and a synchronous one is left alone."""
    from overlap import staleness as maths
    from overlap.tensorflow import staleness as tf_staleness

    correction = tf_staleness.Correction("predict", lookahead=True, most_delay=2)
    slices = {"a": [(0, 2, 1, 1, 0), (2, 4, 1, 1, 0)], "b": [(0, 3, 1, 1, 0), (3, 3, 2, 1, 0)],
              "p": [(0, 4, 1, 2, 0)], "far": [(0, 4, 3, 1, 0)], "two": [(0, 4, 2, 1, 0)]}
    names = ["a", "b", "p", "far", "two", "sync"]
    shapes = [(2, 3), (6,), (4,), (4,), (4,), (4,)]
    for current, runs in [(0, [0, 0, 0, 0, 0, 0]), (1, [1, 0, 0, 0, 0, 0]),
                          (2, [1, 0, 0, 0, 2, 0])]:
        correction._view = _FakeView(slices, current=current)
        out = correction._factors_numpy(names, shapes)
        n = len(names)
        aheads, stale = out[1:n + 1], out[n + 1:2 * n + 1]
        keep, run = out[2 * n + 1:3 * n + 1], out[3 * n + 1:4 * n + 1]
        assert list(keep) == [1, 0, 0, 0, 2, 0], current
        assert list(run) == runs, current
        assert list(out[4 * n + 1:]) == [1] * n, current  # no period looks ahead
        # Look-ahead variables are neither predicted nor lowered.
        for i in (0, 4, 5):
            assert aheads[i].shape == (1,) and aheads[i][0] == 0 and stale[i] == 0
        assert aheads[3][0] == maths.updates_before_applied(current + 1, 3, 1, 0)
        assert stale[3] == 3 and stale[2] == 1.5


def test_look_ahead_under_a_period_runs_the_passes_not_yet_applied(hvd):
    """With max_period 4, a variable of delay 1, period 2 (phase 0) looks ahead: it keeps 2
    gradients, its next forward runs ahead by the passes whose update has not come (1 or 2), and
    an update carries 1 pass (the first) or 2; period 8 is beyond the configured bound."""
    from overlap.tensorflow import staleness as tf_staleness

    correction = tf_staleness.Correction("predict", lookahead=True, most_delay=1, most_period=4)
    assert correction.depth == 4
    slices = {"p": [(0, 4, 1, 2, 0)], "wide": [(0, 4, 1, 8, 0)]}
    names, shapes = ["p", "wide"], [(4,), (4,)]
    # current pass -> (runs ahead at the next forward, passes this step's update carries)
    for current, run, carried in [(0, 0, 1), (1, 1, 1), (2, 2, 1), (3, 1, 2), (4, 2, 1),
                                  (5, 1, 2)]:
        correction._view = _FakeView(slices, current=current)
        out = correction._factors_numpy(names, shapes)
        keep, runs, spread = out[5:7], out[7:9], out[9:11]
        assert list(keep) == [2, 0] and list(runs) == [run, 0], current
        assert list(spread) == [carried, 1], current
        assert out[4] > 0  # "wide" keeps its prediction, and its lowered momentum


@pytest.mark.parametrize("kind", ["sgd", "nesterov", "adam", "adamw", "rmsprop", "nadam",
                                  "adagrad", "lion", "adamax"])
def test_look_ahead_is_the_optimizers_own_update_on_scratch_state(hvd, kind):
    """Eagerly, any Keras optimizer: the look-ahead of one step moves a variable exactly as the
    optimizer's own apply() of that gradient moves a twin, and leaves every optimizer variable
    (slots, step count) as it was; a variable whose turn has not come stays where it is."""
    from overlap.tensorflow import delayed_updates
    from overlap.tensorflow import staleness as tf_staleness

    def make():
        return {"sgd": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
                "nesterov": lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
                "adam": lambda: keras.optimizers.Adam(0.01),
                "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1),
                "rmsprop": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5),
                "nadam": lambda: keras.optimizers.Nadam(0.01),
                "adagrad": lambda: keras.optimizers.Adagrad(0.05),
                "lion": lambda: keras.optimizers.Lion(0.01),
                "adamax": lambda: keras.optimizers.Adamax(0.01)}[kind]()

    rng = np.random.default_rng(5)
    start = [rng.normal(size=s).astype(np.float32) for s in [(3, 2), (2,)]]
    grads = [[rng.normal(size=w.shape).astype(np.float32) for w in start] for _ in range(3)]
    variables = [tf.Variable(w) for w in start]
    twin = [tf.Variable(w) for w in start]
    optimizer, reference = make(), make()
    optimizer.build(variables)
    reference.build(twin)
    for g in grads[:2]:  # some state in the slots first
        optimizer.apply(g, variables)
        reference.apply(g, twin)
    delayed_updates._adopt(optimizer)
    state = [v.numpy().copy() for v in optimizer.variables]
    correction = tf_staleness.Correction("predict", lookahead=True, most_delay=1)
    keys = [optimizer._var_key(v) for v in variables]
    correction.prepare(keys, variables, [optimizer._get_variable_index(v) for v in variables])
    # The first variable looks ahead by its kept gradient; the second has kept one but its
    # turn has not come (run 0).
    correction._look_ahead(optimizer, keys, variables, [tf.constant(1), tf.constant(1)],
                           [tf.constant(1), tf.constant(0)], grads[2])
    reference.apply([grads[2][0], tf.zeros_like(grads[2][1])], twin)
    np.testing.assert_array_equal(variables[0].numpy(), twin[0].numpy(), err_msg=kind)
    np.testing.assert_array_equal(variables[1].numpy(), reference_before(start, grads[:2], make),
                                  err_msg=kind)
    for before, after in zip(state, optimizer.variables):
        np.testing.assert_array_equal(before, after.numpy(), err_msg=f"{kind}: {after.path}")


def reference_before(start, grads, make):
    """The second variable after the optimizer's own updates of `grads` (its value before the
    look-ahead)."""
    variables = [tf.Variable(w) for w in start]
    optimizer = make()
    optimizer.build(variables)
    for g in grads:
        optimizer.apply(g, variables)
    return variables[1].numpy()


def test_mixed_or_changed_corrections_are_refused_naming_the_rank_and_gradients(hvd):
    from overlap.tensorflow import delayed_updates

    variables = [tf.Variable(np.zeros(3, np.float32)), tf.Variable(np.zeros(2, np.float32))]
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(variables)

    def tagged(modes):
        return [delayed_updates.tag(tf.ones_like(v), tf.constant(True), name="g%d" % i,
                                    correction=m) for i, (v, m) in enumerate(zip(variables, modes))]
    with pytest.raises(ValueError, match=r"rank %d: .*auto, predict \(g0: auto, g1: predict\)"
                       % hvd.rank()):
        optimizer.apply(tagged(["auto", "predict"]), variables)
    delayed_updates._corrected(optimizer, tagged(["on", "on"]), variables)
    with pytest.raises(ValueError, match=r"rank %d: .* is 'on'; its gradients \(g0, g1\) now "
                       r"ask for 'auto'" % hvd.rank()):
        optimizer.apply(tagged(["auto", "auto"]), variables)


def test_a_correction_without_look_ahead_warns_under_the_default_budget(hvd):
    """The suites' init gives staleness but no budget: the adapters' default, the bound, was
    measured with look-ahead only, so a tape asking for another correction warns; the default
    does not."""
    import warnings
    from overlap import _core
    assert _core.config()["OVERLAP_BUDGET"] == "-1"
    with pytest.warns(UserWarning, match=r"rank %d: the gradient reducer: "
                      r"staleness_correction='predict' does not look ahead" % hvd.rank()):
        hvd.DistributedGradientTape(tf.GradientTape(), staleness_correction="predict")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hvd.DistributedGradientTape(tf.GradientTape())
