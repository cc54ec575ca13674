"""The staleness correction of overlap.tensorflow (overlap/tensorflow/staleness.py), checked value
by value against a reference computed here.

The suites that run this file (tests/tensorflow/BUILD) each train from one process, because the
runtime adopts one plan per process and a step is one reduction (one tape, or one Keras
DistributedOptimizer): TEST_STALENESS="way:correction" picks the way and the correction.
- tape:<c> (with OVERLAP_TEST_PLAN_SCHEDULE=d,1, every gradient bucket delay d once the plan
  is adopted at step A, found from the has_update flags: the d steps that bring nothing): one
  DistributedGradientTape(staleness_correction=c) over three models' variables, applied by a
  plain Keras SGD (momentum), Adam and AdamW each; keras:<c>: one model with the Keras
  DistributedOptimizer(SGD with momentum). Steps alternate between tf.function and eager. Each
  model is replayed by hand in float64 with Keras's update rules: "off" is the uncorrected
  delayed optimizer; "predict" lowers momentum / beta1 to max(0, 1 - (1 - m)(1 + d)) for the
  delayed updates and runs the forward of a step after the first delayed update at W_k + U x
  (the last update); "auto" looks ahead: the optimizer's own updates, and the forward of step
  k >= A + d + 1 at the point d more updates from this rank's own gradients of steps k - d ..
  k - 1 (on a copy of the optimizer's state) would put W_k.
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
    each step brought an update (tape only) and each optimizer's correction bytes."""
    runs = Runs(hvd, way, correction, kinds)
    at_forward = [[] for _ in kinds]
    updated = []
    for step in range(steps):
        x, y = (tf.constant(a) for a in batch(hvd.rank(), step))
        for r, values in enumerate(runs.values()):
            at_forward[r].append(values)
        flags = runs.step(step, x, y)
        updated.append(any(flags))
        if way == "keras" and step > 0:
            # The Keras wrapper keeps its flags to itself: a step that brought nothing left the
            # variables where they were (no update, and no shift yet at the plan's first step).
            updated[-1] = not all(np.array_equal(a, b) for a, b in
                                  zip(at_forward[0][-1], runs.values()[0]))
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
    return max(0.0, 1.0 - (1.0 - m) * (1.0 + DELAY))


class Reference:
    """Keras's SGD (m = mu m - lr g; w += m), Adam and AdamW (bias correction counting every
    apply, eps outside the root) under delay DELAY from step A, with the correction by hand."""

    def __init__(self, kind, correction, start):
        self.kind = kind
        self.lookahead = correction == "auto"
        self.predict = correction == "predict"
        self.lower = correction in ("predict", "on")
        self.w = [w.copy() for w in start]
        self.m = [np.zeros_like(w) for w in start]
        self.v = [np.zeros_like(w) for w in start]
        self.last = None

    def forward_point(self, ahead, local, t):
        """The point of a forward: `ahead` (predict: U, the updates to come; 0: none), `local`
        (look-ahead: this rank's last DELAY gradients, oldest first, or None), `t` the count the
        next update will use."""
        if self.lookahead and local is not None:
            scratch = Reference(self.kind, "off", self.w)
            scratch.m = [m.copy() for m in self.m]
            scratch.v = [v.copy() for v in self.v]
            for i, g in enumerate(local):
                scratch.update(g, False, t + i)
            return scratch.w
        if ahead and self.predict and self.last is not None:
            return [w + ahead * d for w, d in zip(self.w, self.last)]
        return [w.copy() for w in self.w]

    def update(self, grads, delayed, t):
        before = [w.copy() for w in self.w]
        mu, b1 = MOMENTUM, BETAS[0]
        if delayed and self.lower:
            mu, b1 = lowered(mu), lowered(b1)
        for i, g in enumerate(grads):
            if self.kind == "sgd":
                self.m[i] = mu * self.m[i] - LR["sgd"] * g
                self.w[i] = self.w[i] + self.m[i]
                continue
            lr = LR[self.kind]
            if self.kind == "adamw":
                self.w[i] = self.w[i] - self.w[i] * DECAY * lr
            alpha = lr * np.sqrt(1 - BETAS[1] ** t) / (1 - b1 ** t)
            self.m[i] = self.m[i] + (g - self.m[i]) * (1 - b1)
            self.v[i] = self.v[i] + (g * g - self.v[i]) * (1 - BETAS[1])
            self.w[i] = self.w[i] - self.m[i] * alpha / (np.sqrt(self.v[i]) + EPS)
        if delayed and self.predict:
            self.last = [w - b for w, b in zip(self.w, before)]


def close(actual, expected, what):
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, rtol=2e-4, atol=2e-5, err_msg=f"{what}, variable {i}")


@pytest.mark.skipif(not DELAYED, reason="needs the forced delayed plan")
def test_correction_matches_a_reference_by_hand_under_a_delay(hvd):
    from overlap import staleness as maths
    way, correction = way_and_correction()
    kinds = ["sgd"] if way == "keras" else ["sgd", "adam", "adamw"]
    at_forward, final, updated, sizes = train(hvd, way, correction, kinds, STEPS)
    none = [k for k, u in enumerate(updated) if not u]
    assert len(none) == DELAY and none == list(range(none[0], none[0] + DELAY)), (
        f"expected {DELAY} steps in a row without updates (the plan's first): {updated}")
    adopted = none[0]
    assert STEPS - adopted >= 12, f"the plan came too late (step {adopted}) to test much"
    start = at_forward[0][0]
    elements = sum(int(np.prod(s)) for s in SHAPES)
    for r, kind in enumerate(kinds):
        what = f"rank {hvd.rank()} {kind} ({way}, {correction}; plan from step {adopted})"
        ref = Reference(kind, correction, start)
        pending, own = [], []  # own[k][rank]: each rank's gradient of step k
        for k in range(STEPS):
            ahead = maths.updates_before_applied(k - adopted, DELAY, 1, 0) if k > adopted else 0
            points = [ref.forward_point(ahead, [g[rank] for g in own[-DELAY:]]
                                        if k >= adopted + DELAY + 1 else None, k + 1)
                      for rank in range(hvd.size())]
            close(at_forward[r][k], points[hvd.rank()], f"{what} step {k}: variables at forward")
            grads, each = gradients(hvd, points, k)
            own.append(each)
            if k < adopted:
                ref.update(grads, False, k + 1)
            elif k >= adopted + DELAY:
                ref.update(pending[k - DELAY], True, k + 1)
            pending.append(grads)
        close(final[r], ref.w, f"{what}: true variables at the end")
        copies = {"auto": 2 + DELAY, "predict": 2}.get(correction, 0)
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
    correction.prepare(keys, variables)
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
        keep, run = out[2 * n + 1:3 * n + 1], out[3 * n + 1:]
        assert list(keep) == [1, 0, 0, 0, 2, 0], current
        assert list(run) == runs, current
        # Look-ahead variables are neither predicted nor lowered.
        for i in (0, 4, 5):
            assert aheads[i].shape == (1,) and aheads[i][0] == 0 and stale[i] == 0
        assert aheads[3][0] == maths.updates_before_applied(current + 1, 3, 1, 0)
        assert stale[3] == 3 and stale[2] == 1.5


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
    correction.prepare(keys, variables)
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
