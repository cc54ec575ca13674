"""DistributedOptimizer's staleness correction (overlap/torch/staleness.py, docs/scheduler.md).

Two suites run this file (tests/torch/BUILD):
- staleness: OVERLAP_TEST_PLAN_SCHEDULE=1,1 gives every gradient bucket delay 1 once the plan is
  adopted. Several models train in lock-step, each with its own optimizer and correction mode;
  the test then replays every run by hand (float64 maths, the average over ranks of gradients
  it computes itself) and checks each step's parameters: "off" is the uncorrected delayed
  optimizer; "predict" (the default) runs the forward at W + (last update) and uses momentum /
  beta1 lowered to max(0, 1 - (1 - m)(1 + s)) for staleness s = 1; "on" only lowers them.
- staleness_sync: a synchronous scheduled plan; the default correction must leave every value
  bit for bit as "off" does.
"""

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import floats

DELAYED = bool(os.environ.get("OVERLAP_TEST_PLAN_SCHEDULE"))
BATCH = 4
STEPS = 50
LR = {"sgd": 0.05, "adam": 0.01, "adamw": 0.01}
MOMENTUM = 0.9
BETAS = (0.9, 0.999)
EPS = 1e-8
DECAY = 0.1


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(hvd, step):
    return (floats((BATCH, 5), 1000 + step, hvd.rank()).float(),
            floats((BATCH, 3), 2000 + step, hvd.rank()).float())


def make_optimizer(hvd, kind, model, tag, correction, update_at_forward):
    if kind == "sgd":
        base = torch.optim.SGD(model.parameters(), lr=LR[kind], momentum=MOMENTUM)
    elif kind == "adam":
        base = torch.optim.Adam(model.parameters(), lr=LR[kind], betas=BETAS, eps=EPS)
    else:
        base = torch.optim.AdamW(model.parameters(), lr=LR[kind], betas=BETAS, eps=EPS,
                                 weight_decay=DECAY)
    named = [(f"{tag}.{n}", p) for n, p in model.named_parameters()]
    return hvd.DistributedOptimizer(base, named_parameters=named,
                                    staleness_correction=correction,
                                    update_at_forward=update_at_forward)


# (kind, correction, update_at_forward) of each run.
RUNS = [
    ("sgd", "auto", False),
    ("sgd", "off", False),
    ("sgd", "predict", True),
    ("sgd", "on", False),
    ("adam", "auto", False),
    ("adam", "off", True),
    ("adamw", "predict", True),
    ("adamw", "off", False),
]


def train(hvd, runs, steps):
    """Trains one model per run in lock-step. Returns per run: the parameters each forward ran
    at, the parameters after each step (float64), whether each step brought an update (from the
    first run, which must not defer), and each run's correction bytes at the end."""
    models, optimizers = [], []
    for index, (kind, correction, deferred) in enumerate(runs):
        model = make_model()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        models.append(model)
        optimizers.append(make_optimizer(hvd, kind, model, f"run{index}", correction, deferred))
    assert not runs[0][2], "the first run must synchronize by hand"
    at_forward = [[] for _ in runs]
    after = [[] for _ in runs]
    updated = []
    for step in range(steps):
        x, y = batch(hvd, step)
        for r, (model, optimizer) in enumerate(zip(models, optimizers)):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            # Until synchronize() or step(), the parameters are those the forward ran at.
            at_forward[r].append([p.detach().double().clone() for p in model.parameters()])
        for r, (model, optimizer) in enumerate(zip(models, optimizers)):
            if runs[r][2]:
                optimizer.step()
                optimizer.apply_pending_updates()
            else:
                optimizer.synchronize()
                if r == 0:
                    updated.append(any(p.grad is not None for p in model.parameters()))
                with optimizer.skip_synchronize():
                    optimizer.step()
            after[r].append([p.detach().double().clone() for p in model.parameters()])
    return at_forward, after, updated, [o.staleness_correction_bytes() for o in optimizers]


def average_gradient(hvd, params, step):
    """The average over ranks of the gradients at `params` (float64), from every rank's data
    (made here: batch() depends on the rank and the step only)."""
    model = make_model().double()
    with torch.no_grad():
        for p, value in zip(model.parameters(), params):
            p.copy_(value)
    loss = 0
    for rank in range(hvd.size()):
        x = floats((BATCH, 5), 1000 + step, rank).float().double()
        y = floats((BATCH, 3), 2000 + step, rank).float().double()
        loss = loss + F.mse_loss(model(x), y)
    (loss / hvd.size()).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def lowered(m, staleness):
    return max(0.0, 1.0 - (1.0 - m) * (1.0 + staleness))


class Reference:
    """One run replayed by hand under delay 1 from step `adopted` on (no update at that step)."""

    def __init__(self, kind, correction, start):
        self.kind = kind
        self.predict = correction in ("auto", "predict")
        self.lower = correction != "off"
        self.w = [t.clone() for t in start]
        self.state = [{} for _ in start]
        self.last = None

    def forward_point(self, shifted):
        if shifted and self.predict and self.last is not None:
            # One update (the next step's) comes before this gradient is applied.
            return [w + d for w, d in zip(self.w, self.last)]
        return [w.clone() for w in self.w]

    def update(self, grads, delayed):
        before = [w.clone() for w in self.w]
        b1 = BETAS[0]
        m = MOMENTUM
        if delayed and self.lower:
            b1, m = lowered(b1, 1.0), lowered(m, 1.0)
        for i, g in enumerate(grads):
            w, state = self.w[i], self.state[i]
            if self.kind == "sgd":
                buf = state.get("buf")
                state["buf"] = g.clone() if buf is None else m * buf + g
                w -= LR["sgd"] * state["buf"]
                continue
            lr = LR[self.kind]
            if self.kind == "adamw":
                w *= 1 - lr * DECAY
            t = state.get("t", 0) + 1
            state["t"] = t
            state["m"] = b1 * state.get("m", torch.zeros_like(w)) + (1 - b1) * g
            state["v"] = BETAS[1] * state.get("v", torch.zeros_like(w)) + (1 - BETAS[1]) * g * g
            denom = (state["v"].sqrt() / (1 - BETAS[1] ** t) ** 0.5) + EPS
            w -= lr / (1 - b1 ** t) * state["m"] / denom
        if delayed and self.predict:
            self.last = [w - b for w, b in zip(self.w, before)]


def close(actual, expected, what, rtol=2e-4, atol=2e-5):
    for a, e in zip(actual, expected):
        if not torch.allclose(a, e, rtol=rtol, atol=atol):
            raise AssertionError(f"{what}: max difference {(a - e).abs().max().item():.3g}")


@pytest.mark.skipif(not DELAYED, reason="needs the forced delayed plan (suite staleness)")
def test_correction_matches_a_reference_by_hand_under_delay_1(hvd):
    at_forward, after, updated, correction_bytes = train(hvd, RUNS, STEPS)
    none = [k for k, u in enumerate(updated) if not u]
    assert len(none) == 1, f"expected one step without updates (the plan's first): {updated}"
    adopted = none[0]
    assert STEPS - adopted >= 15, f"the plan came too late (step {adopted}) to test much"
    start = at_forward[0][0]
    for r, (kind, correction, deferred) in enumerate(RUNS):
        what = f"rank {hvd.rank()} run {r} ({kind}, {correction}, update_at_forward={deferred})"
        ref = Reference(kind, correction, start)
        pending = None
        for k in range(STEPS):
            # The forward is moved ahead once a delayed update was taken (k >= adopted + 2).
            point = ref.forward_point(shifted=k >= adopted + 2)
            close(at_forward[r][k], point, f"{what} step {k}: parameters at forward")
            grads = average_gradient(hvd, point, k)
            if k < adopted:
                ref.update(grads, delayed=False)
            elif k > adopted:
                ref.update(pending, delayed=True)
            pending = grads
            close(after[r][k], ref.w, f"{what} step {k}: parameters after the step")
        predicting = correction in ("auto", "predict")
        params = sum(t.numel() for t in start)
        if predicting:
            assert correction_bytes[r] == 2 * 4 * params, (what, correction_bytes[r])
        else:
            assert correction_bytes[r] == 0, (what, correction_bytes[r])
    # The correction does change the values: predict and off part ways.
    assert not torch.allclose(after[0][-1][0], after[1][-1][0], atol=1e-3)
    assert hvd.stats()["plan_mean_staleness"] > 0


@pytest.mark.skipif(DELAYED, reason="needs a synchronous plan (suite staleness_sync)")
def test_correction_changes_nothing_under_a_synchronous_plan(hvd):
    runs = [(kind, correction, deferred) for kind in ("sgd", "adamw")
            for deferred in (False, True) for correction in ("auto", "off")]
    at_forward, after, _, correction_bytes = train(hvd, runs, 30)
    for r in range(0, len(runs), 2):
        for k in range(30):
            for a, b in zip(after[r][k] + at_forward[r][k], after[r + 1][k] + at_forward[r + 1][k]):
                assert torch.equal(a, b), f"runs {runs[r]} and {runs[r + 1]} differ at step {k}"
    assert correction_bytes == [0] * len(runs)
    stats = hvd.stats()
    assert stats["plans_scheduled"] >= 1 and stats["plan_mean_staleness"] == 0, stats


def test_correction_mode_is_checked(hvd):
    model = make_model()
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="staleness_correction"):
        hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                 staleness_correction="sometimes")
    assert type(base) is torch.optim.SGD  # refused: still the user's optimizer
