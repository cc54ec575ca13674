"""Re-planning under real training: the step slows down for good after the first plan is
adopted, so the drift checks drop it and a new one is made and adopted (tests/torch/BUILD sets
OVERLAP_PLANNER=deft, OVERLAP_STALENESS=1 and a small OVERLAP_REPLAN_DRIFT).

overlap.torch's program thread runs ahead of the coordinator by a different number of steps on
each rank. A drop once scheduled the next plan's votes from that program step count, so the ranks
voted a step apart, each holding back the submissions the others waited for: four ranks stalled
within an epoch. Here every rank must finish every step and agree on the final parameters.
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import floats

STEPS = 150
SLOW_FROM = 45  # after the first plan (adopted near step 12) has been checked a few times


def test_replan_after_a_slow_down_finishes_every_step(hvd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(STEPS):
        x = floats((16, 32), 100 + step, hvd.rank()).float()
        y = floats((16, 4), 200 + step, hvd.rank()).float()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        if step >= SLOW_FROM:
            time.sleep(0.03)  # the backward's compute grows for good
        loss.backward()
        opt.step()
    opt.apply_pending_updates()
    stats = hvd.stats()
    assert stats["plans_scheduled"] >= 2, stats  # the first plan and at least one re-plan
    # The same parameters on every rank: the largest and smallest over ranks agree.
    for name, p in model.named_parameters():
        top = hvd.allreduce(p.detach().clone(), op=hvd.Max, name=f"check.max.{name}")
        low = hvd.allreduce(p.detach().clone(), op=hvd.Min, name=f"check.min.{name}")
        assert torch.equal(top, low), name
