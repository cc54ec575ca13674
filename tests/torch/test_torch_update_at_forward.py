"""DistributedOptimizer(update_at_forward=True): step() defers each parameter's update to just
before the next forward of its module (python/overlap/torch/layerwise.py).

Every test trains two copies of one model on the same data: `deferred` with update_at_forward and
`reference` without, in the same runtime. The parameters must agree after every step once the
deferred ones are applied (to rounding: the two copies' gradients may travel in different fused
buckets, and on 4 ranks a different reduction order rounds differently), and must not have moved
between step() and the forward that applies them. The suite also runs under the dear planner
(tests/torch/BUILD), where update_at_forward is the default and the plan is adopted mid-run.
"""

import os

import pytest
import torch
import torch.nn.functional as F

from hvd_util import mlp as make_model, mlp_batch as batch


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def assert_models_close(a, b, what):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=2e-5, atol=2e-6,
                                   msg=lambda m, name=name: f"{what}: {name}: {m}")


class Pair:
    """The deferred and the reference copy, their optimizers and schedulers."""

    def __init__(self, hvd, tag, make_optimizer, scheduler=False, model=make_model):
        self.deferred, self.reference = model(), model()
        self.opt_d = hvd.DistributedOptimizer(
            make_optimizer(self.deferred.parameters()),
            named_parameters=[(f"{tag}.d.{n}", p) for n, p in self.deferred.named_parameters()],
            update_at_forward=True)
        self.opt_r = hvd.DistributedOptimizer(
            make_optimizer(self.reference.parameters()),
            named_parameters=[(f"{tag}.r.{n}", p) for n, p in self.reference.named_parameters()],
            update_at_forward=False)
        self.schedulers = []
        if scheduler:
            self.schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.8)
                               for o in (self.opt_d, self.opt_r)]

    def step(self, hvd, step):
        """One training step of both copies, as one step for the runtime's step markers: both
        forwards, one backward, both step() calls."""
        x, y = batch(hvd, step)
        self.opt_d.zero_grad()
        self.opt_r.zero_grad()
        loss = F.mse_loss(self.deferred(x), y) + F.mse_loss(self.reference(x), y)
        loss.backward()
        before = snapshot(self.deferred)
        self.opt_d.step()
        for p, q in zip(self.deferred.parameters(), before):
            assert torch.equal(p.detach(), q), f"step {step}: step() updated a parameter at once"
        self.opt_r.step()
        for s in self.schedulers:
            s.step()  # after step(): the deferred update must still use the old rate


@pytest.mark.parametrize("name,make", [
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3)),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01)),
    ("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.01)),
])
def test_deferred_updates_equal_synchronous_ones(hvd, name, make):
    pair = Pair(hvd, f"uaf.{name}", make, scheduler=True)
    for step in range(12):
        pair.step(hvd, step)
        pair.opt_d.apply_pending_updates()
        assert_models_close(pair.deferred, pair.reference, f"{name} step {step}")
    # The learning rate moved under the scheduler, and both copies saw the same rates.
    assert pair.opt_d.param_groups[0]["lr"] == pair.opt_r.param_groups[0]["lr"] < 0.1 * 0.8 ** 10


class Attention(torch.nn.Module):
    """mlp()'s shape around a transformer encoder layer, whose nn.MultiheadAttention reads its
    out_proj's weight and bias in its own forward and never calls out_proj's."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(6, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.layer(self.inp(x).view(2, -1, 16)).reshape(x.shape[0], 16))


def test_a_submodule_used_by_its_parent_updates_before_the_parent_forward(hvd):
    """out_proj's update must land before MultiheadAttention's forward reads it, not at a later
    module's forward after autograd saved the old value (which fails backward, or trains on
    a parameter changed under it)."""
    pair = Pair(hvd, "uaf.attention", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                model=Attention)
    for step in range(8):
        pair.step(hvd, step)
        with torch.no_grad():
            pair.deferred(batch(hvd, 100 + step)[0])
        assert_models_close(pair.deferred, pair.reference, f"step {step}")


def test_each_layer_updates_just_before_its_forward(hvd):
    pair = Pair(hvd, "uaf.order", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5))
    for step in range(6):
        pair.step(hvd, step)
        first, second = pair.deferred[0], pair.deferred[2]
        x, _ = batch(hvd, 100 + step)
        before_second = snapshot(second)
        first(x)  # the first layer's forward applies its own update, and only its own
        torch.testing.assert_close(first.weight.detach(), pair.reference[0].weight.detach(),
                                   rtol=2e-5, atol=2e-6)
        for p, q in zip(second.parameters(), before_second):
            assert torch.equal(p.detach(), q), f"step {step}: layer 2 updated before its forward"
        with torch.no_grad():
            pair.deferred(x)  # an evaluation forward applies the rest
        assert_models_close(pair.deferred, pair.reference, f"step {step}")


def test_state_dict_and_zero_grad_see_the_update(hvd):
    pair = Pair(hvd, "uaf.state", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    for step in range(5):
        pair.step(hvd, step)
        if step % 2:
            # Saving the model right after step() saves the updated parameters.
            saved = pair.deferred.state_dict()
            for (name, p), q in zip(saved.items(), pair.reference.parameters()):
                torch.testing.assert_close(p, q.detach(), rtol=2e-5, atol=2e-6, msg=name)
        else:
            # zero_grad(set_to_none=False) must not zero a gradient still being averaged.
            pair.opt_d.zero_grad(set_to_none=False)
            pair.opt_d.apply_pending_updates()
            assert_models_close(pair.deferred, pair.reference, f"step {step}")
    state = pair.opt_d.state_dict()  # applies too: momentum buffers are the reference's
    for i, p in enumerate(pair.reference.parameters()):
        torch.testing.assert_close(state["state"][i]["momentum_buffer"],
                                   pair.opt_r.state[p]["momentum_buffer"], rtol=2e-5, atol=2e-6)


def test_unused_parameter_is_updated_by_the_next_backward(hvd):
    """A parameter whose module skips a forward is updated by the next backward's first
    gradient, before anything reads it."""
    pair = Pair(hvd, "uaf.skip", lambda ps: torch.optim.SGD(ps, lr=0.1))
    pair.step(hvd, 0)
    x, y = batch(hvd, 1)
    last = pair.deferred[4]
    before = snapshot(last)
    hidden = pair.deferred[:4](x)  # the last layer does not run
    for p, q in zip(last.parameters(), before):
        assert torch.equal(p.detach(), q)
    hidden.sum().backward()
    assert not pair.opt_d._deferred, "the backward left an update unapplied"
    torch.testing.assert_close(last.weight.detach(), pair.reference[4].weight.detach(),
                               rtol=2e-5, atol=2e-6)
    pair.opt_d.synchronize()  # the reductions that backward started, on every rank alike


def test_default_follows_the_planner(hvd):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=[(f"uaf.default.{n}", p)
                                                     for n, p in model.named_parameters()])
    x, y = batch(hvd, 0)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    before = snapshot(model)
    opt.step()
    moved = any(not torch.equal(p.detach(), q) for p, q in zip(model.parameters(), before))
    planner = os.environ.get("OVERLAP_PLANNER", "observed")
    if planner in ("dear", "deft"):
        assert not moved, f"under {planner} step() must defer the update"
        opt.apply_pending_updates()
        assert any(not torch.equal(p.detach(), q) for p, q in zip(model.parameters(), before))
    else:
        assert moved, f"under {planner} step() must update at once, as Horovod"


def test_training_under_the_plan(hvd):
    """Long enough for a scheduled planner to profile, plan and adopt (OVERLAP_PROFILE_STEPS=3
    in the dear suite): the copies agree before, during and after adoption."""
    pair = Pair(hvd, "uaf.plan", lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9))
    for step in range(30):
        pair.step(hvd, step)
    pair.opt_d.apply_pending_updates()
    assert_models_close(pair.deferred, pair.reference, "after 30 steps")
    every = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in pair.deferred.parameters()])
                          .unsqueeze(0), name="uaf.plan.check")
    for r in range(hvd.size()):
        assert torch.equal(every[r], every[hvd.rank()]), f"rank {r} holds other parameters"
    if os.environ.get("OVERLAP_PLANNER") == "dear":
        stats = hvd.stats()
        assert stats["plans_scheduled"] >= 1, repr(sorted(stats.items()))
