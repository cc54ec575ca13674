"""DistributedOptimizer under a delayed plan (planner deft with staleness > 0; runtime/planes/plan_delays.h).

Run with OVERLAP_TEST_PLAN_SCHEDULE=1,1 (tests/torch/BUILD): rank 0 gives every bucket of the
planner's plan delay 1, so once the plan is adopted each step's p.grad must be the average of the
previous step's gradients (computed at the previous weights), the first planned step must bring
no update at all (p.grad None, so step() leaves the parameters alone), and every rank must hold
the same parameters throughout. Before adoption p.grad is the step's own average. The test does
not know when the plan comes; it checks that every step is one of these cases, in this order.
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import assert_close, floats

BATCH = 4
STEPS = 40


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 64), nn.Tanh(), nn.Linear(64, 300), nn.Tanh(),
                         nn.Linear(300, 3))  # float32: what the planners plan


def batch(hvd, step):
    return (floats((BATCH, 5), 1000 + step, hvd.rank()).float(),
            floats((BATCH, 3), 2000 + step, hvd.rank()).float())


def reference_gradients(hvd, model, step):
    """The average over ranks of each rank's gradient at its own current weights (under the
    default correction's look-ahead each rank's forward runs at a point of its own). Called
    after the step's own forward, so that the copy's forward is not taken for the step's start."""
    x, y = batch(hvd, step)
    copy_ = copy.deepcopy(model)
    copy_.zero_grad()
    F.mse_loss(copy_(x), y).backward()
    return [hvd.allreduce(p.grad.detach().clone(), name="reference.%d" % i)
            for i, p in enumerate(copy_.parameters())]


def matches(grads, reference):
    return all(g is not None and torch.allclose(g, r, rtol=1e-5, atol=1e-7)
               for g, r in zip(grads, reference))


def test_delayed_plan_applies_each_average_one_step_later(hvd):
    model = make_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    previous = None
    phases = []  # per step: "sync", "none" or "delayed"
    for step in range(STEPS):
        x, y = batch(hvd, step)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        reference = reference_gradients(hvd, model, step)
        optimizer.synchronize()
        grads = [p.grad for p in model.parameters()]
        if all(g is None for g in grads):
            phases.append("none")
        elif previous is not None and matches(grads, previous) and not matches(grads, reference):
            phases.append("delayed")
        else:
            assert matches(grads, reference), (
                f"rank {hvd.rank()} step {step}: p.grad is neither this step's average, nor the "
                f"last step's, nor absent (phases so far {phases})")
            phases.append("sync")
        before = [p.detach().clone() for p in model.parameters()]
        with optimizer.skip_synchronize():
            optimizer.step()
        if phases[-1] == "none":
            for p, q in zip(model.parameters(), before):
                assert torch.equal(p.detach(), q), "a step without an update changed a parameter"
        previous = reference
        every = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()])
                              .unsqueeze(0), name="check")
        for r in range(hvd.size()):
            assert torch.equal(every[r], every[hvd.rank()]), f"step {step}: rank {r} differs"
    text = " ".join(phases)
    assert "none" in phases, f"the plan was never adopted: {text}; {hvd.stats()}"
    first = phases.index("none")
    assert all(p == "sync" for p in phases[:first]), text
    assert phases[first + 1:] and all(p == "delayed" for p in phases[first + 1:]), text
    assert len(phases) - first - 1 >= 5, f"too few delayed steps: {text}"
    stats = hvd.stats()
    assert stats["plans_scheduled"] == 1, stats
    assert stats["delayed_bytes"] > 0, stats


def test_a_metric_and_sync_batch_norm_keep_their_own_step_under_a_delayed_plan(hvd):
    """Only DistributedOptimizer's gradients may come late. An allreduce the step reads at once
    (a metric in the forward; SyncBatchNorm's statistics, forward and backward) must carry this
    step's values under the same delayed plan, on every step, before and after adoption."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 32), hvd.SyncBatchNorm(32), nn.Tanh(), nn.Linear(32, 3))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(STEPS):
        x, y = batch(hvd, step)
        optimizer.zero_grad()
        hidden = model[0](x)
        normalized = model[1](hidden)
        # Reference: torch's batch norm over the concatenated global batch, this rank's rows.
        every = hvd.allgather(hidden.detach(), name="check.hidden")
        mean, var = every.mean(0), every.var(0, unbiased=False)
        expected = ((hidden.detach() - mean) / torch.sqrt(var + model[1].eps) *
                    model[1].weight.detach() + model[1].bias.detach())
        assert_close(normalized.detach(), expected, rtol=1e-4, atol=1e-5)
        metric = hvd.allreduce(torch.full((16,), float(step + hvd.rank())), op=hvd.Sum,
                               name="metric")
        want = float(step * hvd.size() + hvd.size() * (hvd.size() - 1) // 2)
        assert torch.equal(metric, torch.full((16,), want)), (
            f"rank {hvd.rank()} step {step}: metric {metric[0].item()}, expected {want} "
            f"({hvd.stats()})")
        loss = F.mse_loss(model[3](model[2](normalized)), y)
        loss.backward()
        optimizer.step()
    stats = hvd.stats()
    assert stats["plan_mean_staleness"] > 0, f"the plan was never delayed: {stats}"
    assert stats["delayed_bytes"] > 0, stats
