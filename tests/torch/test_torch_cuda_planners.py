"""overlap.torch's DistributedOptimizer with CUDA parameters under the scheduler's plans (issue 37).

The planner is the target's (OVERLAP_PLANNER; tools/gpu/device_checks.sh runs every one, deft with
every bucket forced to delay 1 by the plan test hook). One model on the GPU and a copy of it on
the host train in lockstep on the same data, in one runtime and so under one plan, with what
DistributedOptimizer defaults to under that planner (updates at the next forward for
bytescheduler, usbyte, dear, deft and auto). Each layer multiplies its input by its weight, so a
gradient is the input itself, and inputs are multiples of 1/8: every sum, average and update is
exact on either device in any order, and the two copies must agree bit for bit at every forward.
Under a synchronous planner both must also equal plain SGD on the average gradient, computed
here from every rank's inputs.

Without a GPU the second copy is a host twin: what is left to check is that two models of one
runtime are treated alike, which the H200 run of 2026-12-04 found they were not under a delayed
plan (the staleness correction classified an update by the plan it saw when the update ran, not
by the step its gradient came from, so the copy updated after the adoption ran its forward moved
ahead and the other did not). With OVERLAP_REQUIRE_GPU=1 it fails instead of running the twin.
"""
import os

import pytest
import torch

from hvd_util import ints

if not torch.cuda.is_available() and os.environ.get("OVERLAP_REQUIRE_GPU") == "1":
    raise RuntimeError("OVERLAP_REQUIRE_GPU=1 but torch sees no GPU")
# The second copy's device: the GPU, or without one a host twin (the module docstring).
TWIN = "cuda" if torch.cuda.is_available() else "cpu"

PLANNER = os.environ.get("OVERLAP_PLANNER", "observed")
DELAYED = bool(os.environ.get("OVERLAP_TEST_PLAN_SCHEDULE"))
# From 3 elements to 400,000: small tensors fuse, large ones are sliced by bytescheduler/usbyte.
SIZES = [3, 1000, 20000, 400000, 7, 65536, 123457, 5]
LR = 0.5
STEPS = 12


class Scale(torch.nn.Module):
    def __init__(self, n, device):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n, device=device))

    def forward(self, x):
        return self.weight * x


def make_model(device):
    return torch.nn.ModuleList([Scale(n, device) for n in SIZES])


def inputs(step, rank):
    return [ints((n,), -8, 8, torch.float32, 100 * step + i, rank) / 8 for i, n in enumerate(SIZES)]


def test_cuda_parameters_train_as_the_host_copy_under_the_plan(hvd):
    if TWIN == "cuda":
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    models = {"host": make_model("cpu"), "cuda": make_model(TWIN)}
    opts = {where: hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=LR),
        named_parameters=[(f"planners.{where}.{n}", p) for n, p in m.named_parameters()])
        for where, m in models.items()}
    reference = [torch.zeros(n, dtype=torch.float64) for n in SIZES]
    for step in range(STEPS):
        xs = inputs(step, hvd.rank())
        losses = []
        for where, m in models.items():
            opts[where].zero_grad()
            device = TWIN if where == "cuda" else "cpu"
            losses.append(sum(layer(x.to(device)).sum() for layer, x in zip(m, xs)))
        # Both forwards ran, so every update of the last step is applied (at forward, or by step()).
        for i, (h, c) in enumerate(zip(models["host"], models["cuda"])):
            assert torch.equal(c.weight.detach().cpu(), h.weight.detach()), \
                f"step {step}, layer {i} ({SIZES[i]} elements): the GPU copy differs from the host's"
            if not DELAYED:
                assert torch.equal(h.weight.detach().double(), reference[i]), \
                    f"step {step}, layer {i}: not plain SGD on the average gradient"
        (losses[0] + losses[1].cpu()).backward()
        for opt in opts.values():
            opt.step()
        every = [inputs(step, r) for r in range(hvd.size())]
        for i in range(len(SIZES)):
            mean = sum(x[i].double() for x in every) / hvd.size()
            reference[i] -= LR * mean
    stats = hvd.stats()
    if PLANNER != "observed":
        assert stats["planner"], f"the {PLANNER} planner never adopted a plan: {stats}"
        assert stats["plans_scheduled"] >= 1, stats
    if DELAYED:
        assert stats["plan_mean_staleness"] > 0, " ".join("%s=%s" % kv for kv in stats.items())
