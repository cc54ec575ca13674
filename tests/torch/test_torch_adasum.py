"""op=hvd.Adasum in overlap.torch: allreduce (plain, in place, async, grouped) and
DistributedOptimizer, against references every rank computes itself.

The reference is the pairwise adaptive combination of whole vectors, level by level in the
runtime's pairing (ranks 2i and 2i+1 first, the lower group's vector is `a`), rounded to the
dtype after each level as the runtime does (collectives/adasum.h); it differs from the runtime
only in the order the dot products' partial sums are added. DistributedOptimizer(op=Adasum) is
checked against every rank's own local optimizer step, the deltas Adasum-combined, as Horovod
documents. On a rank count that is not a power of two (the 3-rank run) only the refusals run.
Under OVERLAP_PLANNER (the scheduled-plan run), Adasum allreduces stay out of the plan.
"""

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hvd_util import FLOAT_DTYPES, floats


def power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def require_power_of_two(hvd):
    if not power_of_two(hvd.size()):
        pytest.skip("Adasum runs on a power-of-two number of ranks; this run checks the refusal")


def adasum_pair(a, b):
    """The adaptive combination of two float64 vectors (a zero vector takes coefficient 1)."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 if aa == 0 else 1.0 - dot / (2 * aa)
    cb = 1.0 if bb == 0 else 1.0 - dot / (2 * bb)
    return ca * a + cb * b


def adasum_reference(vectors, dtype):
    """Every rank's vector (float64, already in `dtype`'s values) combined pairwise."""
    level = [v.double() for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]).to(dtype).double()
                 for i in range(0, len(level), 2)]
    return level[0]


TOLERANCE = {torch.float16: 4 * 2.0 ** -10, torch.bfloat16: 4 * 2.0 ** -7,
             torch.float32: 16 * 2.0 ** -23, torch.float64: 1e-12}


def assert_matches(got, want, dtype, what):
    scale = max(float(want.abs().max()) if want.numel() else 0.0, 1e-30)
    error = float((got.double().reshape(-1) - want).abs().max()) if want.numel() else 0.0
    assert error <= TOLERANCE[dtype] * scale, f"{what}: off by {error} (scale {scale})"


def inputs(hvd, n, dtype, seed):
    return [floats((n,), seed, q).to(dtype) for q in range(hvd.size())]


SIZES = [0, 1, 3, 7, 1001]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_allreduce_matches_the_pairwise_reference(hvd, dtype):
    require_power_of_two(hvd)
    rank = hvd.rank()
    for i, n in enumerate(SIZES):
        every = inputs(hvd, n, dtype, seed=40 + i)
        want = adasum_reference(every, dtype)
        got = hvd.allreduce(every[rank].clone(), op=hvd.Adasum, name=f"adasum.{dtype}.{n}")
        assert got.dtype == dtype and got.shape == (n,)
        assert_matches(got, want, dtype, f"allreduce of {n} {dtype}")
        in_place = every[rank].clone().reshape(1, n) if n else every[rank].clone()
        hvd.allreduce_(in_place, op=hvd.Adasum, name=f"adasum_.{dtype}.{n}")
        assert_matches(in_place, want, dtype, f"allreduce_ of {n} {dtype}")
        handle = hvd.allreduce_async(every[rank].clone(), op=hvd.Adasum,
                                     name=f"adasum.async.{dtype}.{n}")
        assert_matches(hvd.synchronize(handle), want, dtype, f"allreduce_async of {n} {dtype}")
        # Every rank holds the same bits.
        gathered = hvd.allgather(got.reshape(1, -1), name=f"adasum.check.{dtype}.{n}")
        for r in range(hvd.size()):
            assert torch.equal(gathered[r], got.reshape(-1)), f"rank {r} differs"


def test_grouped_allreduce_keeps_each_tensors_own_coefficients(hvd):
    require_power_of_two(hvd)
    rank = hvd.rank()
    sizes = [5, 1, 300, 2]
    per_tensor = [inputs(hvd, n, torch.float32, seed=70 + i) for i, n in enumerate(sizes)]
    got = hvd.grouped_allreduce([t[rank].clone() for t in per_tensor], op=hvd.Adasum,
                                name="adasum.grouped")
    for i, (g, every) in enumerate(zip(got, per_tensor)):
        assert_matches(g, adasum_reference(every, torch.float32), torch.float32,
                       f"grouped member {i}")
    # Orthogonal members are summed, parallel ones averaged, each on its own.
    size = hvd.size()
    orthogonal = torch.zeros(size)
    orthogonal[rank] = rank + 1.0
    parallel = torch.arange(1.0, 7.0) * (rank + 1)
    out = hvd.grouped_allreduce([orthogonal, parallel], op=hvd.Adasum, name="adasum.shapes")
    assert torch.equal(out[0], torch.arange(1.0, size + 1.0))
    mean_scale = sum(range(1, size + 1)) / size
    assert torch.allclose(out[1], torch.arange(1.0, 7.0) * mean_scale, rtol=1e-6)


def test_repeated_steps_give_the_reference_every_time(hvd):
    """The same names every step: the runtime freezes them into an observed plan (or leaves them
    negotiated under a scheduled planner), and the results stay right either way."""
    require_power_of_two(hvd)
    rank = hvd.rank()
    for step in range(12):
        every = inputs(hvd, 33, torch.float32, seed=90 + step)
        got = hvd.allreduce(every[rank].clone(), op=hvd.Adasum, name="adasum.repeated")
        assert_matches(got, adasum_reference(every, torch.float32), torch.float32,
                       f"step {step}")


def reference_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(seed, rank):
    return floats((8, 6), seed, rank, torch.float32), floats((8, 3), seed + 1, rank, torch.float32)


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=0.01),
], ids=["sgd_momentum", "adam"])
def test_distributed_optimizer_adasum_combines_the_local_updates(hvd, make_optimizer):
    """Each rank steps its own optimizer (and keeps its own state) on its own gradient; the
    parameter deltas are Adasum-combined and every rank adds the result. The reference runs
    every rank's optimizer here, one copy each."""
    require_power_of_two(hvd)
    size, rank = hvd.size(), hvd.rank()
    model = reference_model(5)
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Adasum)
    assert set(optimizer._parameter_names.values()) == {
        "allreduce." + n for n, _ in model.named_parameters()}
    copies = [reference_model(5) for _ in range(size)]
    local = [make_optimizer(c.parameters()) for c in copies]
    for step in range(4):
        x, y = batch(200 + step, rank)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        starts = [p.detach().clone() for p in copies[0].parameters()]
        deltas = []
        for q in range(size):
            xq, yq = batch(200 + step, q)
            local[q].zero_grad()
            F.mse_loss(copies[q](xq), yq).backward()
            local[q].step()
            deltas.append([p.detach() - s for p, s in zip(copies[q].parameters(), starts)])
        for i, (p, start) in enumerate(zip(model.parameters(), starts)):
            combined = adasum_reference([d[i].reshape(-1) for d in deltas], torch.float32)
            want = start.double().reshape(-1) + combined
            assert torch.allclose(p.detach().double().reshape(-1), want, rtol=1e-5, atol=1e-6), (
                f"step {step} parameter {i}")
            for c in copies:  # every copy continues from the combined parameters
                list(c.parameters())[i].data.copy_(p.detach())
    every = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()])
                          .unsqueeze(0), name="adasum.optimizer.check")
    for r in range(size):
        assert torch.equal(every[r], every[rank]), f"rank {r}'s parameters differ"


def test_distributed_optimizer_adasum_accumulates_backward_passes(hvd):
    """backward_passes_per_step=2: the local step sees the gradient of both passes."""
    require_power_of_two(hvd)
    size, rank = hvd.size(), hvd.rank()
    model = reference_model(6)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Adasum, backward_passes_per_step=2)
    copies = [reference_model(6) for _ in range(size)]
    starts = [p.detach().clone() for p in model.parameters()]
    optimizer.zero_grad()
    for part in range(2):
        x, y = batch(300 + part, rank)
        F.mse_loss(model(x), y).backward()
    optimizer.step()
    deltas = []
    for q in range(size):
        for part in range(2):
            xq, yq = batch(300 + part, q)
            F.mse_loss(copies[q](xq), yq).backward()
        deltas.append([-0.1 * p.grad for p in copies[q].parameters()])
    for i, (p, start) in enumerate(zip(model.parameters(), starts)):
        want = start.double().reshape(-1) + adasum_reference(
            [d[i].reshape(-1) for d in deltas], torch.float32)
        assert torch.allclose(p.detach().double().reshape(-1), want, rtol=1e-5, atol=1e-6), i


def test_adasum_stays_out_of_scheduled_plans(hvd):
    """With a scheduler planner, a step of averaged gradients gets a scheduled plan while an
    Adasum allreduce in the same step stays negotiated, with the right value every step."""
    require_power_of_two(hvd)
    if os.environ.get("OVERLAP_PLANNER", "observed") == "observed":
        pytest.skip("runs under a scheduler planner (torch_adasum_scheduled_*)")
    rank = hvd.rank()
    model = reference_model(8)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(30):
        x, y = batch(400 + step, rank)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        every = inputs(hvd, 21, torch.float32, seed=500 + step)
        got = hvd.allreduce(every[rank].clone(), op=hvd.Adasum, name="adasum.metric")
        assert_matches(got, adasum_reference(every, torch.float32), torch.float32,
                       f"step {step}")
        optimizer.step()
    stats = hvd.stats()
    assert stats["plans_scheduled"] >= 1, f"no plan was scheduled: {stats}"
    params = len(list(model.parameters()))
    assert stats["planned_tensors"] == params, (
        f"the plan holds {stats['planned_tensors']} tensors, not the {params} gradients: {stats}")


def test_refusals(hvd):
    me = "rank %d: " % hvd.rank()
    size = hvd.size()
    if not power_of_two(size):
        for call in [lambda: hvd.allreduce(torch.ones(4), op=hvd.Adasum, name="adasum.odd"),
                     lambda: hvd.grouped_allreduce([torch.ones(2)], op=hvd.Adasum,
                                                   name="adasum.odd.group")]:
            with pytest.raises(ValueError) as info:
                call()
            assert ("Adasum needs a power-of-two number of ranks, and this job has %d" % size
                    in str(info.value)), str(info.value)
        model = reference_model(1)
        with pytest.raises(ValueError) as info:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters(), op=hvd.Adasum)
        assert "power-of-two number of ranks" in str(info.value) and str(size) in str(info.value)
    with pytest.raises(ValueError) as info:
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum, name="adasum.int")
    assert str(info.value).startswith(me + "allreduce 'adasum.int': "), str(info.value)
    assert "Adasum" in str(info.value), str(info.value)
    with pytest.raises(NotImplementedError) as info:  # a RuntimeError, as Horovod's tests expect
        hvd.reducescatter(torch.ones(2 * size), op=hvd.Adasum, name="adasum.rs")
    assert str(info.value) == me + "reducescatter 'adasum.rs': Adasum is an allreduce only"
    # The runtime goes on working.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="adasum.after"),
                       torch.full((2,), float(size)))
