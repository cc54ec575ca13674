"""DistributedOptimizer's staleness correction (overlap/torch/staleness.py, docs/scheduler.md).

Suites (tests/torch/BUILD):
- staleness (OVERLAP_TEST_PLAN_SCHEDULE=1,1: every gradient bucket delay 1 once the plan is
  adopted) and staleness_periods (1,2: delay 1, update period 2, phases staggered by bucket):
  several models train in lock-step, each with its own optimizer, correction mode and update
  path (at forward or in step()). The test then replays every parameter tensor by hand (float64,
  the average over ranks of gradients it computes itself, the runtime's delayed and folded
  delivery) and checks it at every forward and after every step: "off" is the uncorrected
  delayed optimizer; "on" lowers momentum / beta1 to max(0, 1 - (1 - m)(1 + s)) for the
  staleness s = delay + (period - 1) / 2; "predict" (and the default "auto") also runs each
  forward at W + U x (last update), U the updates still to come before that gradient is
  applied, and applies SGD's period sums as p momentum steps; except that "auto" looks ahead:
  momentum / beta1 kept, the forward of pass n runs where the updates of the passes not yet
  applied put it (d of them, up to d + p - 1 with a period; SGD's and Adam's own steps, on a
  copy of their state), each from this rank's own gradient of its pass, and a period's sum of k
  passes is applied as k steps of their mean.
- staleness_delay2 (2,1) and staleness_delay2_period4 (2,4): the same with delay 2, and period 4.
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
    ("sgd", "auto", True),
    ("sgd", "predict", True),
    ("sgd", "on", False),
    ("adam", "auto", False),
    ("adam", "off", True),
    ("adamw", "auto", True),
    ("adamw", "predict", True),
    ("adamw", "off", False),
]


def train(hvd, runs, steps):
    """Trains one model per run in lock-step. Returns per run: the parameters each forward ran
    at, the parameters after each step (float64), per step whether each parameter had an update
    (from the first run, which must not defer), and each run's correction bytes at the end."""
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
                    updated.append([p.grad is not None for p in model.parameters()])
                with optimizer.skip_synchronize():
                    optimizer.step()
            after[r].append([p.detach().double().clone() for p in model.parameters()])
    return at_forward, after, updated, [o.staleness_correction_bytes() for o in optimizers]


def average_gradient(hvd, params, step, ranks=None):
    """The average over ranks of the gradients at `params` (float64), from every rank's data
    (made here: batch() depends on the rank and the step only); of `ranks` only, if given."""
    model = make_model().double()
    with torch.no_grad():
        for p, value in zip(model.parameters(), params):
            p.copy_(value)
    loss = 0
    ranks = range(hvd.size()) if ranks is None else ranks
    for rank in ranks:
        x = floats((BATCH, 5), 1000 + step, rank).float().double()
        y = floats((BATCH, 3), 2000 + step, rank).float().double()
        loss = loss + F.mse_loss(model(x), y)
    (loss / len(ranks)).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def lowered(m, staleness):
    return max(0.0, 1.0 - (1.0 - m) * (1.0 + staleness))


def updates_before_applied(n, d, p, f):
    """Updates a tensor (d, p, f) takes between the forward of pass n and the update that
    applies pass n's gradient (examples/weight_prediction.cc, by enumeration)."""
    c = next(j for j in range(n, n + p) if j % p == f)
    return sum(1 for j in range(n, c + d) if j >= d and (j - d) % p == f)


def pending_passes(n, d, p, f):
    """Passes before n whose gradient no update has applied by the forward of pass n, counted
    after the last communicating pass whose update came (pass c's comes in pass c + d); 0 before
    the first such update. By enumeration."""
    applied = [c for c in range(0, n - d) if c % p == f]
    return n - 1 - applied[-1] if applied else 0


def period_steps(m, p):
    """p torch SGD momentum steps of G / p each, from velocity v: (x change / -lr, new v) as
    functions of (v, G), by running them."""
    def run(v, g):
        x = torch.zeros_like(g)
        for _ in range(p):
            v = m * v + g / p
            x = x - v
        return -x, v
    return run


class Reference:
    """One parameter tensor of one run replayed by hand: plain until the plan's first pass (step
    A); then schedule (d, p, f): in pass n it receives, when (n - d) % p == f, the sum of the
    average gradients of passes n - d - p + 1 .. n - d (its bucket's fold), else nothing."""

    def __init__(self, kind, correction, start, schedule):
        self.kind = kind
        self.predict = correction in ("auto", "predict")
        self.lower = correction != "off"
        self.d, self.p = schedule
        self.lookahead = correction == "auto"
        self.local = {}  # look-ahead: each rank's own gradients of the last d + p - 1 forwards
        self.f = None  # found from its first update under the plan
        self.w = start.clone()
        self.state = {}
        self.last = None

    def forward_point(self, n, rank):
        """Where rank `rank`'s forward of pass n (None: before the plan) runs: under look-ahead
        each rank's own, from its own gradient."""
        if self.lookahead:
            local = self.local.get(rank, [])
            pending = 0 if n is None or self.f is None else pending_passes(n, self.d, self.p,
                                                                            self.f)
            assert len(local) >= pending, (n, pending, len(local))
            point = self.w.clone()
            state = {k: v.clone() if torch.is_tensor(v) else v for k, v in self.state.items()}
            for g in local[len(local) - pending:]:  # the optimizer's own steps, oldest first,
                self.step(point, state, g, BETAS[0], MOMENTUM, False)  # on a copy of its state
            return point
        if n is None or not (self.predict and self.last is not None):
            return self.w.clone()
        return self.w + updates_before_applied(n, self.d, self.p, self.f) * self.last

    def carried(self, n):
        """How many passes the update of pass n sums."""
        return min(self.p, n - self.d + 1)

    def delivered(self, history, adopted, n):
        if n < self.d or (n - self.d) % self.p != self.f:
            return None
        sent = n - self.d
        return sum(history[adopted + j] for j in range(max(0, sent - self.p + 1), sent + 1))

    def update(self, g, delayed):
        before = self.w.clone()
        lower = delayed and self.lower and not self.lookahead
        staleness = self.d + (self.p - 1) / 2.0 if lower else 0.0
        if delayed and self.lookahead and self.p > 1:
            for _ in range(self.carried(self.n)):  # the period's sum as steps of its mean
                self.step(self.w, self.state, g / self.carried(self.n), BETAS[0], MOMENTUM,
                          False)
            return
        self.step(self.w, self.state, g, lowered(BETAS[0], staleness),
                  lowered(MOMENTUM, staleness), delayed and self.predict and self.p > 1)
        if delayed and self.predict and not self.lookahead:
            self.last = self.w - before

    def step(self, w, state, g, b1, m, period_sum):
        """One step of the run's optimizer on `w` and `state` in place (b1 / m: its beta1 or
        momentum; period_sum: SGD's period sum as p momentum steps)."""
        if self.kind == "sgd":
            buf = state.get("buf")
            if period_sum:
                move, state["buf"] = period_steps(m, self.p)(
                    torch.zeros_like(g) if buf is None else buf, g)
                w -= LR["sgd"] * move
            else:
                state["buf"] = g.clone() if buf is None else m * buf + g
                w -= LR["sgd"] * state["buf"]
            return
        lr = LR[self.kind]
        if self.kind == "adamw":
            w *= 1 - lr * DECAY
        t = state["t"] = state.get("t", 0) + 1
        state["m"] = b1 * state.get("m", torch.zeros_like(w)) + (1 - b1) * g
        state["v"] = BETAS[1] * state.get("v", torch.zeros_like(w)) + (1 - BETAS[1]) * g * g
        denom = (state["v"].sqrt() / (1 - BETAS[1] ** t) ** 0.5) + EPS
        w -= lr / (1 - b1 ** t) * state["m"] / denom


def close(actual, expected, what, rtol=2e-4, atol=2e-5):
    if not torch.allclose(actual, expected, rtol=rtol, atol=atol):
        raise AssertionError(f"{what}: max difference {(actual - expected).abs().max().item():.3g}")


@pytest.mark.skipif(not DELAYED, reason="needs a forced delayed plan (suites staleness*)")
def test_correction_matches_a_reference_by_hand_under_the_forced_plan(hvd):
    schedule = tuple(int(v) for v in os.environ["OVERLAP_TEST_PLAN_SCHEDULE"].split(","))
    at_forward, after, updated, correction_bytes = train(hvd, RUNS, STEPS)
    none = [k for k, u in enumerate(updated) if not any(u)]
    assert none, f"the plan was never adopted: {updated}"
    adopted = none[0]  # pass 0 of a plan with delay >= 1 brings nothing to anyone
    assert STEPS - adopted >= 15, f"the plan came too late (step {adopted}) to test much"
    start = at_forward[0][0]
    tensors = len(start)
    for r, (kind, correction, deferred) in enumerate(RUNS):
        what = f"rank {hvd.rank()} run {r} ({kind}, {correction}, update_at_forward={deferred})"
        refs = [Reference(kind, correction, start[i], schedule) for i in range(tensors)]
        # Which tensors each step updated: a step without an update leaves a tensor exactly as
        # it was (its phase, staggered by bucket, differs between runs).
        moved = [[True] * tensors] + [
            [not torch.equal(after[r][k][i], after[r][k - 1][i]) for i in range(tensors)]
            for k in range(1, STEPS)]
        assert moved[adopted] == updated[adopted] == [False] * tensors, what
        history = {}
        for k in range(STEPS):
            n = k - adopted if k >= adopted else None
            by_rank = [[ref.forward_point(n, rank) for ref in refs]
                       for rank in range(hvd.size())]
            points = by_rank[hvd.rank()]
            for i in range(tensors):
                close(at_forward[r][k][i], points[i],
                      f"{what} step {k} (pass {n}): tensor {i} at forward")
            if refs[0].lookahead:
                # Each rank's gradient at its own point; the runtime averages those.
                local = [average_gradient(hvd, by_rank[rank], k, ranks=[rank])
                         for rank in range(hvd.size())]
                grads = [sum(g[i] for g in local) / hvd.size() for i in range(tensors)]
                for i, ref in enumerate(refs):
                    for rank in range(hvd.size()):
                        kept = ref.d + ref.p - 1
                        ref.local[rank] = (ref.local.get(rank, []) + [local[rank][i]])[-kept:]
            else:
                grads = average_gradient(hvd, points, k)
            history[k] = grads
            for i, ref in enumerate(refs):
                if n is None:
                    ref.update(grads[i], delayed=False)
                    continue
                if ref.f is None and moved[k][i]:
                    ref.f = (n - ref.d) % ref.p
                g = ref.delivered({j: h[i] for j, h in history.items()}, adopted, n) \
                    if ref.f is not None else None
                assert (g is not None) == moved[k][i], (
                    f"{what} step {k}: tensor {i} moved {moved[k][i]} against the schedule")
                if g is not None:
                    ref.n = n
                    ref.update(g, delayed=True)
                close(after[r][k][i], ref.w, f"{what} step {k} (pass {n}): tensor {i} after")
        params = sum(t.numel() for t in start)
        if correction in ("auto", "predict"):
            # The saved value, and the last update or (look-ahead) the last d + p - 1 local
            # gradients; under a period, a tensor whose last forward looked ahead and that the
            # last step did not update also keeps its scratch optimizer state, to continue from
            # (SGD's momentum buffer; Adam's two moments and its step count, a 0-d float).
            copies = 1 + (refs[0].d + refs[0].p - 1 if refs[0].lookahead else 1)
            expected = copies * 4 * params
            last = STEPS - 1 - adopted
            for i, ref in enumerate(refs):
                if (ref.lookahead and ref.p > 1 and not moved[STEPS - 1][i] and
                        pending_passes(last, ref.d, ref.p, ref.f) > 0):
                    expected += 4 * (start[i].numel() if kind == "sgd" else
                                     2 * start[i].numel() + 1)
            assert correction_bytes[r] == expected, (what, correction_bytes[r], expected)
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


def test_look_ahead_pass_counts_match_enumeration():
    from overlap import staleness
    for d in range(0, 4):
        for p in (1, 2, 4, 8):
            for f in range(p):
                if (d, p) == (0, 1):
                    continue
                most = 0
                for n in range(0, 40):
                    pending = staleness.pending_passes(n, d, p, f)
                    assert pending == pending_passes(n, d, p, f), (n, d, p, f)
                    most = max(most, pending)
                    carried = staleness.carried_passes(n, p, f)
                    expected = min(p, n + 1) if n % p == f else 0
                    assert carried == expected, (n, p, f)
                # The kept gradients suffice: the bound keep_local keeps.
                assert most == d + p - 1, (d, p, f, most)
    assert staleness.uniform_schedule([[0, 4, 1, 2, 1], [4, 4, 1, 2, 1]]) == (1, 2, 1)
    assert staleness.uniform_schedule([[0, 4, 1, 2, 1], [4, 4, 1, 2, 0]]) is None
    assert staleness.uniform_schedule([[0, 4, 0, 1, 0]]) is None
    assert staleness.uniform_schedule(None) is None
