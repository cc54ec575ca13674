"""Gradient accumulation (backward_passes_per_step) under a delayed plan with the default
staleness correction's look-ahead (overlap/torch/staleness.py).

Suite accumulation_delayed (tests/torch/BUILD): every gradient bucket gets delay 2 and update
period 2 once the plan is adopted, so a forward runs up to 3 passes ahead. Two models train in
lock-step on the same data: one accumulates two backward passes over the same batch, the other
takes one pass of twice the loss. Their gradients, and so their plans' deliveries, are equal, and
each step's two forwards of the first must run where the second's one forward runs, look-ahead
included. A later forward of a step used to empty the look-ahead's window of kept gradients, so
under accumulation a delay of 2 or a period never looked ahead.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import floats

STEPS = 60


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def test_look_ahead_under_gradient_accumulation(hvd):
    models, optimizers = [], []
    for tag, passes in (("accumulated", 2), ("single", 1)):
        model = make_model()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        base = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        named = [(f"{tag}.{n}", p) for n, p in model.named_parameters()]
        models.append(model)
        optimizers.append(hvd.DistributedOptimizer(base, named_parameters=named,
                                                   backward_passes_per_step=passes))
    moved = 0
    for step in range(STEPS):
        x = floats((4, 5), 1000 + step, hvd.rank()).float()
        y = floats((4, 3), 2000 + step, hvd.rank()).float()
        true_values = [p.detach().clone() for p in models[1].parameters()]
        points = []
        for model, optimizer, passes in zip(models, optimizers, (2, 1)):
            optimizer.zero_grad()
            for _ in range(passes):
                out = model(x)
                points.append([p.detach().clone() for p in model.parameters()])
                (F.mse_loss(out, y) * (2 / passes)).backward()
        first, second, single = points
        for i, (a, b, s) in enumerate(zip(first, second, single)):
            assert torch.equal(a, b), f"step {step}: tensor {i}: the step's two forwards differ"
            assert torch.allclose(a, s, rtol=1e-5, atol=1e-6), (
                f"step {step}: tensor {i}: accumulated forward at {a.flatten()[:3]}, one "
                f"forward of twice the loss at {s.flatten()[:3]}")
        for optimizer in optimizers:
            optimizer.step()
        moved += any(not torch.equal(s, t) for s, t in zip(single, true_values))
    # The plan delayed them and the look-ahead moved their forwards: all but its first passes.
    assert hvd.stats()["plan_mean_staleness"] > 0, hvd.stats()
    assert moved >= STEPS // 3, f"the look-ahead moved {moved} of {STEPS} forwards"
    for a, s in zip(models[0].parameters(), models[1].parameters()):
        assert torch.allclose(a, s, rtol=1e-5, atol=1e-6)
