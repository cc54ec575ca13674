"""The staleness correction of overlap.tensorflow (overlap/tensorflow/staleness.py), checked value
by value against a reference computed here.

Two suites run this file (tests/tensorflow/BUILD):
- staleness: OVERLAP_TEST_PLAN_SCHEDULE=1,1, every gradient bucket delay 1 once the plan is
  adopted (at step A, found from the has_update flags: the one step that brings nothing). Several
  runs train in lock-step, each with its own variables, optimizer, way (DistributedGradientTape
  with a plain Keras optimizer, or the Keras DistributedOptimizer; eagerly or in tf.function) and
  correction mode. Each is replayed by hand in float64 with Keras's update rules: "off" is the
  uncorrected delayed optimizer; "on" lowers momentum / beta1 to max(0, 1 - (1 - m)(1 + 1)) for
  the delayed updates; "predict" (the default) also runs the forward of step k >= A + 2 at
  W_k + (the update of step k - 1).
- staleness_sync: OVERLAP_TEST_PLAN_SCHEDULE=0,1, a synchronous scheduled plan with delayed
  updates configured (so the gradients carry their tags): the default correction must give bit
  for bit what "off" gives.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

SCHEDULE = os.environ.get("OVERLAP_TEST_PLAN_SCHEDULE", "0,1")
DELAYED = SCHEDULE.split(",")[0] != "0"
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


class Run:
    """One run: kind, way ("tape" or "keras"), tf.function or eager, correction mode."""

    def __init__(self, hvd, index, kind, way, function, correction):
        self.hvd, self.kind, self.way, self.correction = hvd, kind, way, correction
        self.variables = make_variables(index)
        hvd.broadcast_variables(self.variables, root_rank=0)
        optimizer = make_optimizer(kind)
        if way == "keras":
            optimizer = hvd.DistributedOptimizer(optimizer, staleness_correction=correction)
        optimizer.build(self.variables)
        self.optimizer = optimizer
        self.step = tf.function(self._step) if function else self._step

    def _step(self, x, y):
        if self.way == "tape":
            with self.hvd.DistributedGradientTape(tf.GradientTape(),
                                                  staleness_correction=self.correction) as tape:
                loss = loss_of(self.variables, x, y)
            grads = tape.gradient(loss, self.variables)
            flags = [self.hvd.has_update(g) for g in grads]
            self.optimizer.apply_gradients(zip(grads, self.variables))
            return flags
        with tf.GradientTape() as tape:
            loss = loss_of(self.variables, x, y)
        self.optimizer.apply(tape.gradient(loss, self.variables), self.variables)
        return [tf.constant(True)]

    def values(self):
        return [v.numpy().astype(np.float64) for v in self.variables]


def train(hvd, specs, steps):
    """Per run, the variables at each step's forward (and true values at the end), and the
    first run's has_update flags per step (it must be a tape run)."""
    runs = [Run(hvd, i, *spec) for i, spec in enumerate(specs)]
    at_forward = [[] for _ in runs]
    updated = []
    for step in range(steps):
        x, y = (tf.constant(a) for a in batch(hvd.rank(), step))
        for r, run in enumerate(runs):
            at_forward[r].append(run.values())
            flags = run.step(x, y)
            if r == 0:
                updated.append(any(bool(f) for f in flags))
    for run in runs:
        if hasattr(run.optimizer, "restore_staleness_shift"):
            run.optimizer.restore_staleness_shift()
    final = [run.values() for run in runs]
    sizes = [getattr(run.optimizer, "staleness_correction_bytes", lambda: 0)() for run in runs]
    return at_forward, final, updated, sizes


def average_gradient(hvd, values, step):
    variables = [tf.Variable(v) for v in values]
    total = None
    for rank in range(hvd.size()):
        x, y = batch(rank, step)
        with tf.GradientTape() as tape:
            loss = loss_of(variables, x.astype(np.float64), y.astype(np.float64))
        grads = [g.numpy() for g in tape.gradient(loss, variables)]
        total = grads if total is None else [a + b for a, b in zip(total, grads)]
    return [g / hvd.size() for g in total]


def lowered(m):
    return max(0.0, 1.0 - (1.0 - m) * 2.0)


class Reference:
    """Keras's SGD (m = mu m - lr g; w += m), Adam and AdamW (bias correction counting every
    apply, eps outside the root) under delay 1 from step A, with the correction by hand."""

    def __init__(self, kind, correction, start):
        self.kind = kind
        self.predict = correction in ("auto", "predict")
        self.lower = correction != "off"
        self.w = [w.copy() for w in start]
        self.m = [np.zeros_like(w) for w in start]
        self.v = [np.zeros_like(w) for w in start]
        self.last = None

    def forward_point(self, shifted):
        if shifted and self.predict and self.last is not None:
            return [w + d for w, d in zip(self.w, self.last)]
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


RUNS = [
    ("sgd", "tape", True, "auto"),
    ("sgd", "tape", False, "off"),
    ("sgd", "keras", False, "auto"),
    ("sgd", "tape", False, "on"),
    ("adam", "tape", True, "auto"),
    ("adam", "keras", True, "off"),
    ("adamw", "keras", True, "predict"),
]


@pytest.mark.skipif(not DELAYED, reason="needs the forced delayed plan (suite staleness)")
def test_correction_matches_a_reference_by_hand_under_delay_1(hvd):
    at_forward, final, updated, sizes = train(hvd, RUNS, STEPS)
    none = [k for k, u in enumerate(updated) if not u]
    assert len(none) == 1, f"expected one step without updates (the plan's first): {updated}"
    adopted = none[0]
    assert STEPS - adopted >= 12, f"the plan came too late (step {adopted}) to test much"
    start = at_forward[0][0]
    elements = sum(int(np.prod(s)) for s in SHAPES)
    for r, (kind, way, function, correction) in enumerate(RUNS):
        what = f"rank {hvd.rank()} run {r} ({kind}, {way}, function={function}, {correction})"
        ref = Reference(kind, correction, start)
        pending = None
        for k in range(STEPS):
            point = ref.forward_point(shifted=k >= adopted + 2)
            close(at_forward[r][k], point, f"{what} step {k}: variables at forward")
            grads = average_gradient(hvd, point, k)
            if k < adopted:
                ref.update(grads, False, k + 1)
            elif k > adopted:
                ref.update(pending, True, k + 1)
            pending = grads
        close(final[r], ref.w, f"{what}: true variables at the end")
        expected = 2 * 4 * elements if correction in ("auto", "predict") else 0
        assert sizes[r] == expected, (what, sizes[r], expected)
    assert not np.allclose(final[0][0], final[1][0], atol=1e-3), "predict and off agree"


@pytest.mark.skipif(DELAYED, reason="needs a synchronous plan (suite staleness_sync)")
def test_correction_changes_nothing_under_a_synchronous_plan(hvd):
    specs = [(kind, way, function, correction)
             for kind, way, function in [("sgd", "tape", True), ("adam", "keras", False),
                                         ("adamw", "tape", False)]
             for correction in ("auto", "off")]
    at_forward, final, _, _ = train(hvd, specs, 24)
    for r in range(0, len(specs), 2):
        for k, (a, b) in enumerate(zip(at_forward[r], at_forward[r + 1])):
            for x, y in zip(a, b):
                assert np.array_equal(x, y), f"{specs[r]} and {specs[r + 1]} differ at step {k}"
        for x, y in zip(final[r], final[r + 1]):
            assert np.array_equal(x, y), f"{specs[r]} and {specs[r + 1]} differ at the end"
    stats = hvd.stats()
    assert stats["plans_scheduled"] >= 1 and stats["plan_mean_staleness"] == 0, stats
