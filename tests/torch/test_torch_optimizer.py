"""overlap.torch's DistributedOptimizer, broadcast helpers and SyncBatchNorm, against references.

Training: every rank trains the same model on its own batch; the reference trains a plain copy
on every rank's batch, gathered with hvd.allgather, with the loss Horovod's reduction implies
(the average over ranks of each rank's loss for op=Average, their sum for op=Sum). After
training, every rank must hold the same parameters, and they must equal the reference's.
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hvd_util import assert_close, floats, ints

BATCH = 4
STEPS = 4


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def local_batch(rank, step, micro=0):
    seed = 1000 + 10 * step + micro
    return floats((BATCH, 5), seed, rank), floats((BATCH, 3), seed + 500, rank)


def gathered_batches(hvd, step, micro=0):
    """Every rank's batch for this step, from hvd.allgather: lists indexed by rank."""
    x, y = local_batch(hvd.rank(), step, micro)
    xs = hvd.allgather(x, name=f"data.x.{step}.{micro}")
    ys = hvd.allgather(y, name=f"data.y.{step}.{micro}")
    return list(xs.split(BATCH)), list(ys.split(BATCH))


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def assert_same_on_every_rank(hvd, model, what):
    flat = flat_parameters(model)
    every = hvd.allgather(flat.unsqueeze(0), name=f"check.{what}")
    for r in range(hvd.size()):
        assert torch.equal(every[r], flat), f"{what}: rank {r}'s parameters differ from rank {hvd.rank()}'s"


def assert_models_close(model, reference, what, rtol=1e-9, atol=1e-10):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.detach(), q.detach(), f"{what}: parameter {name}", rtol=rtol, atol=atol)


def train(hvd, make_optimizer, op="Average", bpps=1, steps=STEPS, rtol=1e-9, atol=1e-10,
          model_seed=0, wrap=None, **options):
    """Trains with DistributedOptimizer and with the reference; checks both agree. `wrap(model,
    optimizer)` builds the DistributedOptimizer when the test needs its own arguments."""
    model = make_model(model_seed)
    reference = copy.deepcopy(model)
    if wrap is not None:
        optimizer = wrap(model, make_optimizer(model.parameters()))
    else:
        optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                             named_parameters=model.named_parameters(),
                                             op=getattr(hvd, op), backward_passes_per_step=bpps,
                                             **options)
    reference_optimizer = make_optimizer(reference.parameters())
    rank = hvd.rank()
    for step in range(steps):
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
        for micro in range(bpps):
            x, y = local_batch(rank, step, micro)
            F.mse_loss(model(x), y).backward()
            xs, ys = gathered_batches(hvd, step, micro)
            losses = [F.mse_loss(reference(a), b) for a, b in zip(xs, ys)]
            total = sum(losses)
            (total / len(losses) if op == "Average" else total).backward()
        optimizer.step()
        reference_optimizer.step()
    assert_same_on_every_rank(hvd, model, f"{op}, bpps={bpps}, {options}")
    assert_models_close(model, reference, f"{op}, bpps={bpps}, {options}", rtol=rtol, atol=atol)
    return optimizer


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


# ---- DistributedOptimizer -------------------------------------------------------------------


@pytest.mark.parametrize("make_optimizer", [sgd, adam], ids=["sgd_momentum", "adam"])
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_distributed_optimizer(hvd, op, make_optimizer):
    optimizer = train(hvd, make_optimizer, op=op)
    assert isinstance(optimizer, torch.optim.Optimizer)


def test_distributed_optimizer_without_named_parameters(hvd):
    train(hvd, sgd, wrap=lambda model, optimizer: hvd.DistributedOptimizer(optimizer))


def test_parameter_names_as_horovod(hvd):
    """_parameter_names, which Horovod's tests and some scripts read: a dict from each parameter
    to its name, the model's names when named_parameters is given, unique, and the same on every
    rank either way."""
    model = make_model()
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters()}]
    named = hvd.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1),
                                     named_parameters=model.named_parameters())
    assert named._parameter_names == {p: n for n, p in model.named_parameters()}
    unnamed = hvd.DistributedOptimizer(torch.optim.SGD(make_model().parameters(), lr=0.1))
    names = unnamed._parameter_names
    assert len(names) == 4 and len(set(names.values())) == 4, names
    assert all(isinstance(p, torch.nn.Parameter) for p in names)
    every_rank = hvd.allgather_object(sorted(names.values()), name="parameter_names")
    assert every_rank == [sorted(names.values())] * hvd.size()


def test_distributed_optimizer_fp16_compression(hvd):
    train(hvd, sgd, compression=hvd.Compression.fp16, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("bpps", [2, 3])
def test_backward_passes_per_step(hvd, bpps):
    train(hvd, sgd, bpps=bpps)


def test_gradient_predivide_factor(hvd):
    train(hvd, sgd, gradient_predivide_factor=2.0)
    # Horovod accepts the factor only with op=Average.
    model = make_model()
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters(),
                                 op=hvd.Sum, gradient_predivide_factor=2.0)


def test_groups_as_a_number(hvd):
    train(hvd, sgd, groups=2)


def test_groups_as_lists_of_parameters(hvd):
    def wrap(model, optimizer):
        groups = [[model[0].weight, model[2].weight], [model[0].bias], [model[2].bias]]
        return hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                        groups=groups)

    train(hvd, sgd, wrap=wrap)


class Bag(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.embedding = nn.Embedding(10, 4, sparse=sparse)
        self.linear = nn.Linear(4, 2)

    def forward(self, indices):
        return self.linear(self.embedding(indices).mean(1))


def bag_batch(rank, step):
    return ints((BATCH, 3), 0, 10, torch.int64, 2000 + step, rank), floats((BATCH, 2), 2100 + step, rank, torch.float32)


@pytest.mark.parametrize("sparse_as_dense", [True, False])
def test_sparse_gradients(hvd, sparse_as_dense):
    torch.manual_seed(5)
    model = Bag(sparse=True)
    reference = Bag(sparse=False)
    reference.load_state_dict(model.state_dict())
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                         named_parameters=model.named_parameters(),
                                         sparse_as_dense=sparse_as_dense)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(STEPS):
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
        indices, target = bag_batch(hvd.rank(), step)
        F.mse_loss(model(indices), target).backward()
        optimizer.step()
        all_indices = hvd.allgather(indices, name=f"bag.indices.{step}").split(BATCH)
        all_targets = hvd.allgather(target, name=f"bag.targets.{step}").split(BATCH)
        losses = [F.mse_loss(reference(i), t) for i, t in zip(all_indices, all_targets)]
        (sum(losses) / hvd.size()).backward()
        reference_optimizer.step()
    assert_same_on_every_rank(hvd, model, f"sparse_as_dense={sparse_as_dense}")
    assert_models_close(model, reference, f"sparse_as_dense={sparse_as_dense}", rtol=1e-5, atol=1e-6)


def test_synchronize_then_step_with_gradient_clipping(hvd):
    model = make_model()
    reference = copy.deepcopy(model)
    optimizer = hvd.DistributedOptimizer(sgd(model.parameters()),
                                         named_parameters=model.named_parameters())
    reference_optimizer = sgd(reference.parameters())
    for step in range(STEPS):
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
        x, y = local_batch(hvd.rank(), step)
        F.mse_loss(model(x), y).backward()
        optimizer.synchronize()
        nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with optimizer.skip_synchronize():
            optimizer.step()
        xs, ys = gathered_batches(hvd, step)
        (sum(F.mse_loss(reference(a), b) for a, b in zip(xs, ys)) / hvd.size()).backward()
        nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
        reference_optimizer.step()
    assert_same_on_every_rank(hvd, model, "synchronize + skip_synchronize")
    assert_models_close(model, reference, "synchronize + skip_synchronize")


def test_lr_scheduler_drives_the_wrapped_optimizer(hvd):
    model = make_model()
    optimizer = hvd.DistributedOptimizer(sgd(model.parameters()),
                                         named_parameters=model.named_parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for step in range(2):
        optimizer.zero_grad()
        x, y = local_batch(hvd.rank(), step)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    assert_same_on_every_rank(hvd, model, "with an lr scheduler")


# ---- broadcast_parameters, broadcast_optimizer_state, objects -------------------------------


def test_broadcast_parameters_state_dict(hvd):
    size, rank = hvd.size(), hvd.rank()
    for root in sorted({0, size - 1}):
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double()
        torch.manual_seed(300 + rank)
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.uniform_(-1, 1)
        expected = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double()
        torch.manual_seed(300 + root)
        for t in expected.state_dict().values():
            if t.is_floating_point():
                t.uniform_(-1, 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
        for name, t in model.state_dict().items():
            assert torch.equal(t, expected.state_dict()[name]), f"{name} from root {root}"


def test_broadcast_parameters_named_parameters(hvd):
    size, rank = hvd.size(), hvd.rank()
    root = size - 1
    model = make_model(seed=400 + rank)
    expected = make_model(seed=400 + root)
    hvd.broadcast_parameters(model.named_parameters(), root_rank=root)
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        assert torch.equal(p.detach(), q.detach()), name


def trained(rank, make_optimizer, steps):
    """A model and optimizer as rank `rank` has them after `steps` local steps on its data."""
    model = make_model(seed=500 + rank)
    optimizer = make_optimizer(model.parameters(), rank)
    for step in range(steps):
        optimizer.zero_grad()
        x, y = local_batch(rank, 50 + step)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model, optimizer


def sgd_for(params, rank):
    return torch.optim.SGD(params, lr=0.01 * (rank + 1), momentum=0.5 + 0.1 * rank)


def adam_for(params, rank):
    return torch.optim.Adam(params, lr=0.001 * (rank + 1), betas=(0.9 - 0.01 * rank, 0.999))


def assert_state_equal(actual, expected, what):
    a, e = actual.state_dict(), expected.state_dict()
    for group_a, group_e in zip(a["param_groups"], e["param_groups"]):
        for key, value in group_e.items():
            if key == "params":
                continue
            got = group_a[key]
            # Horovod ships scalar options (lr, momentum, betas) through float32 tensors.
            if isinstance(value, float):
                assert got == pytest.approx(value, rel=1e-6), f"{what}: {key} {got} != {value}"
            elif isinstance(value, (tuple, list)):
                assert list(got) == pytest.approx(list(value), rel=1e-6), f"{what}: {key} {got} != {value}"
            else:
                assert got == value, f"{what}: param_groups[{key}] {got} != {value}"
    assert sorted(a["state"]) == sorted(e["state"]), f"{what}: state keys"
    for index, state in e["state"].items():
        for key, value in state.items():
            got = a["state"][index][key]
            if isinstance(value, torch.Tensor):
                assert torch.equal(torch.as_tensor(got).to(value.dtype).reshape(value.shape), value), (
                    f"{what}: state[{index}][{key}]")
            else:
                assert got == value, f"{what}: state[{index}][{key}] {got} != {value}"


@pytest.mark.parametrize("make_optimizer", [sgd_for, adam_for], ids=["sgd_momentum", "adam"])
@pytest.mark.parametrize("who_trained", ["every_rank", "root_only"])
def test_broadcast_optimizer_state(hvd, make_optimizer, who_trained):
    rank = hvd.rank()
    steps = 2 if who_trained == "every_rank" or rank == 0 else 0
    model, optimizer = trained(rank, make_optimizer, steps)
    expected_model, expected_optimizer = trained(0, make_optimizer, 2)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for p, q in zip(model.parameters(), expected_model.parameters()):
        assert torch.equal(p.detach(), q.detach())
    assert_state_equal(optimizer, expected_optimizer, f"{who_trained}, after broadcast")

    # The broadcast state is the one the optimizer goes on with.
    for m, o in [(model, optimizer), (expected_model, expected_optimizer)]:
        o.zero_grad()
        x, y = local_batch(0, 99)
        F.mse_loss(m(x), y).backward()
        o.step()
    for p, q in zip(model.parameters(), expected_model.parameters()):
        assert_close(p.detach(), q.detach(), "one step after the broadcast", rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("distributed", [False, True], ids=["torch", "distributed"])
def test_broadcast_optimizer_state_of_a_fresh_optimizer(hvd, distributed):
    """As in Horovod, an optimizer that never stepped gets its state created (zero gradients,
    one step of the torch optimizer) before the broadcast, so scripts find tensors in p.grad and
    state to go on from; unlike Horovod, that step leaves the parameters as they were, weight
    decay included."""
    model = make_model(seed=7)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.5)
    if distributed:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p.detach(), q), "the state's creation moved a parameter"
        assert p.grad is not None and torch.equal(p.grad, torch.zeros_like(p))
    state = optimizer.state_dict()["state"]
    assert len(state) == len(before)
    for entry in state.values():
        assert torch.equal(entry["momentum_buffer"], torch.zeros_like(entry["momentum_buffer"]))
    # Training goes on from it, in step on every rank.
    optimizer.zero_grad()
    x, y = local_batch(hvd.rank(), 7)
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    for p in model.parameters():
        gathered = hvd.allgather(p.detach().reshape(1, -1), name=f"fresh.{distributed}.{p.shape}")
        if distributed:
            assert torch.equal(gathered[0], gathered[-1]), "ranks diverged after one step"


def test_broadcast_optimizer_state_of_a_distributed_optimizer(hvd):
    rank = hvd.rank()
    model, local = trained(rank, sgd_for, 1)
    optimizer = hvd.DistributedOptimizer(local, named_parameters=model.named_parameters())
    _, expected = trained(0, sgd_for, 1)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    assert_state_equal(optimizer, expected, "DistributedOptimizer")


def rank_object(rank):
    return {"rank": rank, "items": list(range(rank + 3)), "name": "r" * (rank + 1),
            "tensor": torch.arange(rank + 2, dtype=torch.float32)}


def assert_object_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for key in expected:
        if isinstance(expected[key], torch.Tensor):
            assert torch.equal(actual[key], expected[key])
        else:
            assert actual[key] == expected[key]


def test_broadcast_object(hvd):
    size, rank = hvd.size(), hvd.rank()
    for root in sorted({0, size - 1}):
        result = hvd.broadcast_object(rank_object(rank), root_rank=root, name=f"object.{root}")
        assert_object_equal(result, rank_object(root))
    assert hvd.broadcast_object(rank_object(rank))["rank"] == 0  # root_rank defaults to 0


def test_allgather_object(hvd):
    size, rank = hvd.size(), hvd.rank()
    result = hvd.allgather_object(rank_object(rank))
    assert isinstance(result, list) and len(result) == size
    for r in range(size):
        assert_object_equal(result[r], rank_object(r))
    assert hvd.allgather_object(rank * 10, name="ints") == [r * 10 for r in range(size)]


# ---- SyncBatchNorm --------------------------------------------------------------------------


def batch_norm_for(x):
    return {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[x.dim()]


@pytest.mark.parametrize("spatial", [(), (5,), (3, 4)], ids=["NC", "NCL", "NCHW"])
@pytest.mark.parametrize("batches", ["equal", "uneven"])
def test_sync_batch_norm(hvd, spatial, batches):
    size, rank = hvd.size(), hvd.rank()
    channels = 3
    counts = [3] * size if batches == "equal" else [2 + r for r in range(size)]
    offset = sum(counts[:rank])

    sync_bn = hvd.SyncBatchNorm(channels, momentum=0.3)
    affine = floats((2, channels), 600, 0, torch.float32)
    with torch.no_grad():
        sync_bn.weight.copy_(affine[0] + 1.5)
        sync_bn.bias.copy_(affine[1])
    for iteration in range(2):
        xs = [floats((counts[r], channels) + spatial, 610 + iteration, r, torch.float32) * 3 + r
              for r in range(size)]
        gs = [floats((counts[r], channels) + spatial, 620 + iteration, r, torch.float32)
              for r in range(size)]
        if iteration == 0:
            bn = batch_norm_for(xs[0])(channels, momentum=0.3)
            bn.load_state_dict(sync_bn.state_dict())
        sync_bn.zero_grad()
        bn.zero_grad()

        x = xs[rank].clone().requires_grad_()
        out = sync_bn(x)
        x_all = torch.cat(xs).requires_grad_()
        out_all = bn(x_all)
        what = f"SyncBatchNorm {spatial} {batches} batches, iteration {iteration}"
        assert_close(out, out_all[offset:offset + counts[rank]].detach(), f"{what}: output",
                     rtol=1e-4, atol=1e-5)
        assert_close(sync_bn.running_mean, bn.running_mean, f"{what}: running_mean", rtol=1e-4, atol=1e-5)
        assert_close(sync_bn.running_var, bn.running_var, f"{what}: running_var", rtol=1e-4, atol=1e-5)

        # Each rank's loss is sum(out * g_r); the reference's is their sum over the ranks.
        (out * gs[rank]).sum().backward()
        (out_all * torch.cat(gs)).sum().backward()
        assert_close(x.grad, x_all.grad[offset:offset + counts[rank]], f"{what}: input grad",
                     rtol=1e-4, atol=1e-5)
        # Parameter gradients stay local (the optimizer reduces them): their sum is the total.
        assert_close(hvd.allreduce(sync_bn.weight.grad, op=hvd.Sum), bn.weight.grad,
                     f"{what}: weight grad", rtol=1e-4, atol=1e-5)
        assert_close(hvd.allreduce(sync_bn.bias.grad, op=hvd.Sum), bn.bias.grad,
                     f"{what}: bias grad", rtol=1e-4, atol=1e-5)

    # Evaluation uses the running statistics, like BatchNorm.
    sync_bn.eval()
    bn.eval()
    x = floats((2, channels) + spatial, 630, rank, torch.float32)
    assert_close(sync_bn(x).detach(), bn(x).detach(), "SyncBatchNorm in eval mode", rtol=1e-5, atol=1e-6)


def test_step_markers_hook_module_calls_only_until_the_forward_marker(hvd):
    """The global forward pre-hook that marks a step's forward sends every module call through
    torch's slow path, so it is registered only while a forward marker is due: from an update
    to the next forward. The runtime still sees one forward marker per step."""
    from torch.nn.modules import module as nn_module

    from overlap.torch import step_markers

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=[("markers." + n, p)
                                                     for n, p in model.named_parameters()])
    markers = step_markers.install()

    def hooked():
        # The hook is the markers' method wrapped for torch.compile (overlap/torch/compiled.py).
        return any(getattr(getattr(h, "__wrapped__", h), "__self__", None) is markers
                   for h in nn_module._global_forward_pre_hooks.values())

    x = torch.randn(8, 4)
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    steps = hvd._core.stats()["steps"]
    noted = hvd._core.stats()["update_times_noted"]
    for i in range(3):
        assert hooked(), "no forward marker hook after step %d" % i
        opt.zero_grad()
        loss = model(x).sum()
        assert not hooked(), "the forward marker hook stayed after the forward of step %d" % i
        with torch.no_grad():
            model(x)  # an extra forward within the step changes nothing
        loss.backward()
        opt.step()
    assert hvd._core.stats()["steps"] == steps + 3
    # Each step() notes its optimizer's time for the planner (NoteUpdateTime).
    assert hvd._core.stats()["update_times_noted"] == noted + 3, hvd._core.stats()
