"""A run under a delayed plan, checkpointed the Horovod way at step K and resumed in fresh
processes, repeats the uninterrupted run bit for bit (runtime/plan/plan_checkpoint.h).

tests/python_util/resume_test.sh runs this file twice on the same ranks, with the runtime
settings of tests/torch/BUILD (bytescheduler, whose plans update each layer at its next forward,
and OVERLAP_TEST_PLAN_SCHEDULE=1,2: every bucket has delay 1 and period 2):
  -k save    trains K steps (the plan runs the last of them), checkpoints with torch.save of
             {model.state_dict(), optimizer.state_dict()} and hvd.save_compression_state(), goes
             on to step K + AFTER and writes every rank's parameters;
  -k resume  fresh processes load the checkpoint and call hvd.restore_compression_state() before
             their first step, run steps K .. K + AFTER - 1 and must end with the same bits.
SGD with momentum, so the optimizer's own state is part of what must survive.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import floats

BATCH = 4
AFTER = 6
SAVE_STEP = 40  # the plan is adopted after about 10 steps (OVERLAP_PROFILE_STEPS=3)


def make(hvd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 64), nn.Tanh(), nn.Linear(64, 300), nn.Tanh(),
                          nn.Linear(300, 3))
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        named_parameters=model.named_parameters())
    return model, optimizer


def train_step(hvd, model, optimizer, step):
    x = floats((BATCH, 5), 1000 + step, hvd.rank()).float()
    y = floats((BATCH, 3), 2000 + step, hvd.rank()).float()
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def path(name, hvd):
    return os.path.join(os.environ["OVERLAP_RESUME_DIR"], f"{name}.{hvd.rank()}")


def parameters(model, optimizer):
    optimizer.apply_pending_updates()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_save(hvd):
    model, optimizer = make(hvd)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # The same K on every rank: a rank-local condition ("the plan has run 4 steps here") ends
    # the loop at different steps where one rank's coordinator publishes the adoption later than
    # another's, and the ranks then run different numbers of steps.
    step = SAVE_STEP
    for n in range(step):
        train_step(hvd, model, optimizer, n)
    stats = hvd.stats()
    assert 0 <= stats["plan_adopted_step"] <= stats["steps"] - 4, \
        f"rank {hvd.rank()}: the plan has not run 4 steps in {step}: {stats}"
    assert hvd.stats()["delayed_bytes"] > 0, hvd.stats()  # what the checkpoint must carry
    # As a Horovod script checkpoints: optimizer.state_dict() applies the updates deferred to
    # the next forward, in place, so the model's state (references) holds them too.
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
               path("checkpoint", hvd))
    with open(path("runtime", hvd), "wb") as f:
        f.write(hvd.save_compression_state())
    for n in range(step, step + AFTER):
        train_step(hvd, model, optimizer, n)
    torch.save(parameters(model, optimizer), path("expected", hvd))
    assert hvd.stats()["plans_scheduled"] == 1


def test_resume(hvd):
    model, optimizer = make(hvd)
    checkpoint = torch.load(path("checkpoint", hvd))
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    with open(path("runtime", hvd), "rb") as f:
        hvd.restore_compression_state(f.read())
    step = checkpoint["step"]
    for n in range(step, step + AFTER):
        train_step(hvd, model, optimizer, n)
    expected = torch.load(path("expected", hvd))
    got = parameters(model, optimizer)
    differ = (got != expected).sum().item()
    assert differ == 0, (f"rank {hvd.rank()}: {differ} of {got.numel()} parameters differ from "
                         f"the uninterrupted run (largest difference "
                         f"{(got - expected).abs().max().item():g})")
    stats = hvd.stats()
    assert stats["planner"] == "bytescheduler", stats
    assert stats["plans_scheduled"] == 1, stats
    assert stats["negotiated_operations"] == 0, stats  # every gradient ran in the restored plan
