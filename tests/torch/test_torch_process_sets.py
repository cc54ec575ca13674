"""overlap.torch process sets, with horovod.torch 0.28's names and semantics, on every rank.

Sets: the even ranks and the odd ranks (registered by hvd.init(process_sets=...)), and on 4
ranks {0, 3} added later with hvd.add_process_set. Each rank computes every member's input
itself (hvd_util), so expected values come from torch arithmetic over the set's members. The
sets' collectives run while the global set's are in flight. A rank outside a set, an
unregistered or removed set and bad ranks raise ValueError with the same message everywhere.
SyncBatchNorm on a set normalizes over its members' batches. Last, sets from mpi4py
communicators (COMM_WORLD.Split), through hvd.add_process_set and hvd.init, and the refusals of
communicators that cannot make a set; without mpi4py those tests are skipped, saying so.
"""

import os
import sys

import pytest
import torch

from hvd_util import assert_close, floats, ints

SIZE = int(os.environ["OMPI_COMM_WORLD_SIZE"])
RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
EVENS = list(range(0, SIZE, 2))
ODDS = list(range(1, SIZE, 2))
MINE = EVENS if RANK % 2 == 0 else ODDS

_sets = {}


def _my_set():
    return _sets["evens"] if RANK % 2 == 0 else _sets["odds"]


# The first test initialises overlap itself, with process sets: it must stay first.


def test_init_registers_process_sets():
    import overlap.torch as hvd
    evens, odds = hvd.ProcessSet(EVENS), hvd.ProcessSet(reversed(ODDS))
    assert evens.process_set_id is None and evens.size() is None and evens.rank() is None
    repeat = hvd.ProcessSet(EVENS)
    hvd.init(process_sets=[evens, odds, repeat])
    _sets.update(evens=evens, odds=odds)
    assert (evens.process_set_id, odds.process_set_id) == (1, 2)
    assert repeat.process_set_id is None  # a repeat in the list stays unregistered, as Horovod
    assert odds.ranks == ODDS  # sorted, as Horovod does
    assert evens.size() == len(EVENS) and odds.size() == len(ODDS)
    assert evens.included() == (RANK in EVENS) and odds.included() == (RANK in ODDS)
    mine = _my_set()
    assert mine.rank() == MINE.index(RANK)
    other = _sets["odds"] if mine is _sets["evens"] else _sets["evens"]
    with pytest.raises(ValueError) as info:
        other.rank()
    assert str(info.value) == "rank %d is not a member of process set %d (ranks %s)" % (
        RANK, other.process_set_id, other.ranks)
    assert hvd.global_process_set.ranks == list(range(SIZE))
    assert hvd.global_process_set.rank() == RANK and hvd.global_process_set.size() == SIZE
    assert hvd.global_process_set.included()


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.float64])
def test_allreduce_in_sets_while_the_global_set_reduces(hvd, dtype):
    mine = _my_set()
    inputs = {r: ints((5, 7), -8, 8, dtype, 11, r) for r in range(SIZE)}
    everyone = hvd.allreduce_async(inputs[RANK], name="ps.global", op=hvd.Sum)
    in_set = hvd.allreduce_async(inputs[RANK], name="ps.global", op=hvd.Sum, process_set=mine)
    in_place = inputs[RANK].clone()
    in_place_handle = hvd.allreduce_async_(in_place, name="ps.inplace", op=hvd.Sum,
                                           process_set=mine)
    expected_set = sum(inputs[r].to(torch.float64) for r in MINE).to(dtype)
    assert torch.equal(hvd.synchronize(in_set), expected_set)
    assert torch.equal(hvd.synchronize(in_place_handle), expected_set)
    assert torch.equal(in_place, expected_set)
    assert torch.equal(hvd.synchronize(everyone),
                       sum(inputs[r].to(torch.float64) for r in range(SIZE)).to(dtype))
    if dtype.is_floating_point:
        average = hvd.allreduce(inputs[RANK], name="ps.average", process_set=mine)
        assert torch.allclose(average, expected_set / len(MINE))
        scaled = hvd.allreduce(inputs[RANK], name="ps.scaled", op=hvd.Sum, prescale_factor=2.0,
                               postscale_factor=0.5, process_set=mine)
        assert torch.allclose(scaled, expected_set)


def test_grouped_allreduce_in_a_set(hvd):
    mine = _my_set()
    inputs = {r: [ints((3,), -8, 8, torch.float32, 20 + i, r) for i in range(3)]
              for r in range(SIZE)}
    result = hvd.grouped_allreduce(inputs[RANK], name="ps.group", op=hvd.Sum, process_set=mine)
    for i, got in enumerate(result):
        assert torch.equal(got, sum(inputs[r][i] for r in MINE))
    tensors = [t.clone() for t in inputs[RANK]]
    hvd.grouped_allreduce_(tensors, name="ps.group_", op=hvd.Max, process_set=mine)
    for i, got in enumerate(tensors):
        assert torch.equal(got, torch.stack([inputs[r][i] for r in MINE]).max(0).values)


def test_allgather_in_set_order(hvd):
    mine = _my_set()
    # Ragged: global rank r sends r + 1 rows.
    rows = {r: ints((r + 1, 2), 0, 100, torch.int64, 30, r) for r in range(SIZE)}
    gathered = hvd.allgather(rows[RANK], name="ps.gather", process_set=mine)
    assert torch.equal(gathered, torch.cat([rows[r] for r in MINE]))
    handle = hvd.allgather_async(rows[RANK], name="ps.gather_async", process_set=mine)
    assert torch.equal(hvd.synchronize(handle), torch.cat([rows[r] for r in MINE]))


def test_broadcast_root_is_a_global_rank(hvd):
    mine = _my_set()
    root = MINE[-1]  # a global rank, as in Horovod, not the position in the set
    values = {r: ints((4,), -50, 50, torch.float32, 40, r) for r in range(SIZE)}
    assert torch.equal(hvd.broadcast(values[RANK], root, name="ps.bcast", process_set=mine),
                       values[root])
    t = values[RANK].clone()
    hvd.broadcast_(t, root, name="ps.bcast_", process_set=mine)
    assert torch.equal(t, values[root])
    outsider = (_sets["odds"] if mine is _sets["evens"] else _sets["evens"]).ranks[0]
    with pytest.raises(ValueError) as info:
        hvd.broadcast(values[RANK], outsider, name="ps.bcast.outsider", process_set=mine)
    assert str(info.value) == ("rank %d: broadcast 'ps.bcast.outsider': root rank %d is not a "
                               "member of process set %d (ranks %s)" %
                               (RANK, outsider, mine.process_set_id, mine.ranks))


def test_alltoall_reducescatter_and_barrier_in_a_set(hvd):
    mine, n, k = _my_set(), len(MINE), MINE.index(RANK)
    # Alltoall in equal parts: the member at position k gets part k of every member's rows.
    sent = {r: torch.arange(2 * n, dtype=torch.int32) + 100 * r for r in range(SIZE)}
    received = hvd.alltoall(sent[RANK], name="ps.alltoall", process_set=mine)
    assert torch.equal(received, torch.cat([sent[r][2 * k:2 * k + 2] for r in MINE]))
    # Reduce-scatter: rows split over the set's members.
    inputs = {r: ints((2 * n, 3), -8, 8, torch.float32, 50, r) for r in range(SIZE)}
    total = sum(inputs[r] for r in MINE)
    got = hvd.reducescatter(inputs[RANK], name="ps.rs", op=hvd.Sum, process_set=mine)
    assert torch.equal(got, total[2 * k:2 * k + 2])
    grouped = hvd.grouped_reducescatter([inputs[RANK], 2 * inputs[RANK]], name="ps.grs",
                                        op=hvd.Sum, process_set=mine)
    assert torch.equal(grouped[0], total[2 * k:2 * k + 2])
    assert torch.equal(grouped[1], 2 * total[2 * k:2 * k + 2])
    hvd.barrier(process_set=mine)
    hvd.barrier()


def test_gradients_count_the_set(hvd):
    mine = _my_set()
    # allgather: the gradient is the set's average of the upstream gradients, this rank's rows.
    x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, name="ps.grad.gather", process_set=mine)
    (y * (RANK + 1)).sum().backward()
    mean = sum(r + 1 for r in MINE) / len(MINE)
    assert torch.allclose(x.grad, torch.full((2, 3), mean, dtype=torch.float64))
    # reducescatter with Sum: the gathered gradient times the set's size.
    z = torch.ones(2 * len(MINE), dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(z, name="ps.grad.rs", op=hvd.Sum, process_set=mine).sum().backward()
    assert torch.allclose(z.grad, torch.full_like(z, float(len(MINE))))


def test_distributed_optimizer_on_a_set(hvd):
    evens = _sets["evens"]
    lr = 0.5
    w0 = floats((4,), 60, 0, torch.float64)
    data = {r: floats((4,), 61, r, torch.float64) for r in range(SIZE)}
    model = torch.nn.Linear(4, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(w0.view(1, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), process_set=evens)
    opt.zero_grad()
    model(data[RANK].view(1, 4)).sum().backward()  # the gradient is the rank's data
    opt.step()
    if RANK in EVENS:  # averaged over the even ranks only
        expected = w0 - lr * sum(data[r] for r in EVENS) / len(EVENS)
    else:  # as Horovod: outside the set, the local gradient
        expected = w0 - lr * data[RANK]
    assert torch.allclose(model.weight.detach().view(4), expected)
    if RANK in EVENS:
        params = {"w": torch.full((3,), float(RANK))}
        hvd.broadcast_parameters(params, root_rank=EVENS[-1], process_set=evens)
        assert torch.equal(params["w"], torch.full((3,), float(EVENS[-1])))
    assert hvd.broadcast_object({"rank": RANK}, root_rank=MINE[0], name="ps.obj",
                                process_set=_my_set()) == {"rank": MINE[0]}
    assert hvd.allgather_object(RANK, name="ps.objs", process_set=_my_set()) == MINE


def test_refusals_name_the_rank_and_the_set(hvd):
    mine = _my_set()
    other = _sets["odds"] if mine is _sets["evens"] else _sets["evens"]
    t = torch.ones(3)
    with pytest.raises(ValueError) as info:
        hvd.allreduce(t, name="ps.foreign", process_set=other)
    assert str(info.value) == ("rank %d: allreduce 'ps.foreign': rank %d is not a member of "
                               "process set %d (ranks %s)" %
                               (RANK, RANK, other.process_set_id, other.ranks))
    unregistered = hvd.ProcessSet([0])
    with pytest.raises(ValueError) as info:
        hvd.allgather(t, name="ps.unregistered", process_set=unregistered)
    assert str(info.value) == (
        "rank %d: ProcessSet(process_set_id=None, ranks=[0], mpi_comm=None) is not registered: "
        "pass it to hvd.init(process_sets=...) or hvd.add_process_set() first (a removed set is "
        "no longer registered)" % RANK)
    for ranks, why in [([0, 0], "rank 0 is listed twice"),
                       ([0, SIZE], "rank %d is out of range (the job has ranks 0..%d)" %
                        (SIZE, SIZE - 1)),
                       ([], "a process set needs at least one rank"),
                       (EVENS, "process set 1 already has these ranks"),
                       (list(range(SIZE)),
                        "these are all the ranks, which the global process set 0 already has")]:
        with pytest.raises(ValueError) as info:
            hvd.add_process_set(ranks)
        assert str(info.value) == "AddProcessSet(%s): %s" % (sorted(ranks), why)
    with pytest.raises(ValueError):
        hvd.add_process_set(hvd.global_process_set)
    # The sets still work.
    assert torch.equal(hvd.allreduce(t, name="ps.after", op=hvd.Sum, process_set=mine),
                       torch.full((3,), float(len(MINE))))


@pytest.mark.parametrize("spatial", [(), (3, 4)], ids=["NC", "NCHW"])
def test_sync_batch_norm_on_a_set(hvd, spatial):
    """Each rank normalizes over its own set (the evens or the odds), with a different batch
    size on every rank: outputs, running statistics and input gradients equal torch's BatchNorm
    on the concatenated batch of the set's members, and the parameter gradients summed over the
    set equal the reference's. A SyncBatchNorm on the other set, which this rank is not in,
    is BatchNorm of this rank's batch alone."""
    mine, other = _my_set(), (_sets["odds"] if RANK % 2 == 0 else _sets["evens"])
    channels, counts = 3, [4 + r for r in range(SIZE)]
    offset = sum(counts[r] for r in MINE[:MINE.index(RANK)])
    norm = torch.nn.BatchNorm1d if not spatial else torch.nn.BatchNorm2d
    sync_bn = hvd.SyncBatchNorm(channels, momentum=0.3, process_set=mine)
    outside = hvd.SyncBatchNorm(channels, momentum=0.3, process_set=other)
    affine = floats((2, channels), 700, 0, torch.float32)
    with torch.no_grad():
        for module in (sync_bn, outside):
            module.weight.copy_(affine[0] + 1.5)
            module.bias.copy_(affine[1])
    bn, own = norm(channels, momentum=0.3), norm(channels, momentum=0.3)
    bn.load_state_dict(sync_bn.state_dict())
    own.load_state_dict(outside.state_dict())
    for iteration in range(2):
        what = f"SyncBatchNorm on {mine.ranks}, {spatial}, iteration {iteration}"
        xs = {r: floats((counts[r], channels) + spatial, 710 + iteration, r, torch.float32) * 3 + r
              for r in range(SIZE)}
        gs = {r: floats((counts[r], channels) + spatial, 720 + iteration, r, torch.float32)
              for r in range(SIZE)}
        for module in (sync_bn, outside, bn, own):
            module.zero_grad()
        x = xs[RANK].clone().requires_grad_()
        out = sync_bn(x)
        x_set = torch.cat([xs[r] for r in MINE]).requires_grad_()
        out_set = bn(x_set)
        rows = slice(offset, offset + counts[RANK])
        assert_close(out, out_set[rows].detach(), f"{what}: output", rtol=1e-4, atol=1e-5)
        assert_close(sync_bn.running_mean, bn.running_mean, f"{what}: running_mean",
                     rtol=1e-4, atol=1e-5)
        assert_close(sync_bn.running_var, bn.running_var, f"{what}: running_var",
                     rtol=1e-4, atol=1e-5)
        (out * gs[RANK]).sum().backward()
        (out_set * torch.cat([gs[r] for r in MINE])).sum().backward()
        assert_close(x.grad, x_set.grad[rows], f"{what}: input grad", rtol=1e-4, atol=1e-5)
        for param, reference in [("weight", bn.weight.grad), ("bias", bn.bias.grad)]:
            total = hvd.allreduce(getattr(sync_bn, param).grad, op=hvd.Sum, process_set=mine,
                                  name=f"ps.bn.{param}.{len(spatial)}.{iteration}")
            assert_close(total, reference, f"{what}: {param} grad", rtol=1e-4, atol=1e-5)
        # Outside its set: this rank's batch alone, as plain BatchNorm.
        y, y_own = xs[RANK].clone().requires_grad_(), xs[RANK].clone().requires_grad_()
        out_outside, out_own = outside(y), own(y_own)
        assert_close(out_outside, out_own.detach(), f"{what}: outside the set", rtol=1e-4,
                     atol=1e-5)
        assert_close(outside.running_var, own.running_var, f"{what}: outside, running_var",
                     rtol=1e-4, atol=1e-5)
        (out_outside * gs[RANK]).sum().backward()
        (out_own * gs[RANK]).sum().backward()
        assert_close(y.grad, y_own.grad, f"{what}: outside, input grad", rtol=1e-4, atol=1e-5)
    sync_bn.eval()
    bn.eval()
    x = floats((2, channels) + spatial, 730, RANK, torch.float32)
    assert_close(sync_bn(x).detach(), bn(x).detach(), "SyncBatchNorm on a set, eval mode",
                 rtol=1e-5, atol=1e-6)
    unregistered = hvd.SyncBatchNorm(channels, process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="rank %d: .* is not registered" % RANK):
        unregistered(xs[RANK])


def test_add_and_remove_at_runtime(hvd):
    # The odd ranks' set goes; a set of the last rank alone (on 2 ranks, the removed set's ranks
    # again) comes, with a new id; on 4 ranks also {0, 3}.
    odds = _sets.pop("odds")
    assert hvd.remove_process_set(odds) is True
    assert odds.process_set_id is None
    assert hvd.remove_process_set(odds) is False  # no longer registered, as Horovod
    assert hvd.remove_process_set(hvd.global_process_set) is False
    if RANK in ODDS:
        with pytest.raises(ValueError) as info:
            hvd.allreduce(torch.ones(1), name="ps.removed", process_set=odds)
        assert "is not registered" in str(info.value)
    solo = hvd.add_process_set([SIZE - 1])
    assert solo.process_set_id == 3 and solo.size() == 1
    assert solo.included() == (RANK == SIZE - 1)
    if RANK == SIZE - 1:
        t = torch.arange(4.0)
        assert torch.equal(hvd.allreduce(t, name="ps.solo", process_set=solo), t)
    if SIZE >= 4:
        ends = hvd.add_process_set(hvd.ProcessSet([SIZE - 1, 0]))
        assert ends.ranks == [0, SIZE - 1] and ends.process_set_id == 4
        if ends.included():
            got = hvd.allreduce(torch.full((2,), float(RANK)), name="ps.ends", op=hvd.Sum,
                                process_set=ends)
            assert torch.equal(got, torch.full((2,), float(SIZE - 1)))
        assert hvd.remove_process_set(ends)
    # The evens' set and `solo` stay registered: shutdown stops them before the global set.
    hvd.barrier()


# ---- Sets from mpi4py communicators ---------------------------------------------------------


def _mpi4py():
    """mpi4py's MPI (imported after hvd.init, so MPI stays the runtime's to finalize), or a skip
    that says why: tools/setup.sh installs mpi4py."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        pytest.skip("mpi4py is not importable by %s (%s); tools/setup.sh installs it" %
                    (sys.executable, error))
    return MPI


def _remove_sets_with_ranks(hvd, rank_lists):
    """Removes the registered sets with these ranks (collective), so that a communicator's sets
    may take them."""
    from overlap.common import process_sets
    for ps in process_sets()[1:]:
        if ps.ranks in rank_lists:
            assert hvd.remove_process_set(ps)


def _check_collectives(hvd, ps, tag):
    """allreduce, allgather (ragged, in set order) and broadcast (from a global rank) on `ps`,
    the set of this rank's half: values against every member's input."""
    inputs = {r: ints((3, 4), -8, 8, torch.float32, 80, r) for r in range(SIZE)}
    assert torch.equal(hvd.allreduce(inputs[RANK], op=hvd.Sum, name=tag + ".sum", process_set=ps),
                       sum(inputs[r] for r in MINE))
    assert torch.equal(hvd.allreduce(inputs[RANK], name=tag + ".avg", process_set=ps),
                       sum(inputs[r] for r in MINE) / len(MINE))
    rows = {r: ints((r + 1, 2), 0, 100, torch.int64, 81, r) for r in range(SIZE)}
    assert torch.equal(hvd.allgather(rows[RANK], name=tag + ".gather", process_set=ps),
                       torch.cat([rows[r] for r in MINE]))
    root = MINE[-1]
    assert torch.equal(hvd.broadcast(inputs[RANK], root, name=tag + ".bcast", process_set=ps),
                       inputs[root])


@pytest.mark.parametrize("n", [300_000, 2_200_000], ids=["1.2MB", "8.8MB_segmented"])
def test_global_allreduce_in_place_on_some_ranks_only(hvd, n):
    """With process sets the MPI executor runs Open MPI's own choice of allreduce algorithm, and
    Open MPI chooses by whether the call is in place. Rank 0 reduces in place, the others out of
    place: before the executor made every allreduce in place, the ranks ran different algorithms
    and 4 ranks failed with MPI_ERR_TRUNCATE."""
    expected = torch.full((n,), float(sum(range(SIZE))))
    if RANK == 0:
        t = torch.full((n,), float(RANK))
        hvd.synchronize(hvd.allreduce_async_(t, name=f"mixed.{n}", op=hvd.Sum))
        assert torch.equal(t, expected)
    else:
        x = torch.full((n,), float(RANK))
        out = hvd.allreduce(x, name=f"mixed.{n}", op=hvd.Sum)
        assert torch.equal(out, expected)
        assert torch.equal(x, torch.full((n,), float(RANK))), "the input changed"


def test_process_sets_from_an_mpi4py_communicator(hvd):
    """COMM_WORLD.Split by parity gives each rank the communicator of its half; registered
    with add_process_set, and then again with init(comm=MPI.COMM_WORLD, process_sets=[...])
    (Horovod's form; the runtime is running, so init registers the sets only), every rank gets
    the set of its own communicator, its members' MPI_COMM_WORLD ranks, and both halves' sets
    are registered everywhere. Collectives on it give the members' values; removing it removes
    both halves' sets."""
    MPI = _mpi4py()
    from overlap.common import process_sets
    _remove_sets_with_ranks(hvd, [EVENS, ODDS])
    comm = MPI.COMM_WORLD.Split(color=RANK % 2, key=RANK)
    ps = hvd.ProcessSet(comm)
    assert ps.mpi_comm is comm and ps.ranks is None and ps.process_set_id is None
    assert ps.included() is None and ps.size() is None
    assert hvd.add_process_set(ps) is ps
    assert ps.ranks == MINE and ps.mpi_comm is comm
    assert ps.size() == comm.Get_size() == len(MINE)
    assert ps.rank() == comm.Get_rank() == MINE.index(RANK) and ps.included()
    registered = {tuple(s.ranks): s.process_set_id for s in process_sets()[1:]}
    assert tuple(EVENS) in registered and tuple(ODDS) in registered
    assert ps.process_set_id == registered[tuple(MINE)]
    _check_collectives(hvd, ps, "ps.comm.added")
    assert hvd.remove_process_set(ps) is True and ps.process_set_id is None
    left = [s.ranks for s in process_sets()]
    assert EVENS not in left and ODDS not in left, left
    assert hvd.remove_process_set(ps) is False

    again = hvd.ProcessSet(comm)
    hvd.init(comm=MPI.COMM_WORLD, process_sets=[again])
    assert again.ranks == MINE and again.rank() == MINE.index(RANK)
    assert again.process_set_id > registered[tuple(ODDS)]  # ids are never reused
    assert hvd.global_process_set.mpi_comm is MPI.COMM_WORLD
    _check_collectives(hvd, again, "ps.comm.init")
    # `again` stays registered (with the other half's set): shutdown stops both.
    hvd.barrier()


def test_communicators_that_cannot_make_a_set_are_refused_on_every_rank(hvd):
    """An object that is not a communicator is refused when the ProcessSet is made. A rank
    whose communicator is MPI.COMM_NULL, an intercommunicator, or holds processes outside
    MPI_COMM_WORLD (spawned) makes every rank's add_process_set raise ValueError naming that
    rank and why; nothing is registered and the sets still work."""
    MPI = _mpi4py()
    from overlap.common import process_sets
    before = [s.ranks for s in process_sets()]
    group = MPI.COMM_WORLD.Get_group()
    with pytest.raises(ValueError) as info:
        hvd.ProcessSet(group)
    group.Free()
    assert str(info.value) == (
        "rank %d: ProcessSet needs a list of global ranks (ints) or an mpi4py communicator "
        "(mpi4py.MPI.Comm), got an object of type mpi4py.MPI.Group (pass the communicator "
        "itself, not its group)" % RANK)
    with pytest.raises(ValueError) as info:
        hvd.ProcessSet("evens")
    assert str(info.value).startswith("rank %d: ProcessSet needs a list of global ranks" % RANK)

    refused = "rank %d: process set from an mpi4py communicator refused: " % RANK
    last = SIZE - 1
    comm = MPI.COMM_WORLD.Split(0 if RANK != last else MPI.UNDEFINED, RANK)
    with pytest.raises(ValueError) as info:
        hvd.add_process_set(hvd.ProcessSet(comm))
    assert str(info.value) == refused + (
        "rank %d: its communicator is MPI.COMM_NULL, so this rank is in none (Split with color "
        "MPI.UNDEFINED gives that); every rank must pass a communicator it is a member of" % last)
    if comm != MPI.COMM_NULL:
        comm.Free()

    half = MPI.COMM_WORLD.Split(RANK % 2, RANK)
    inter = half.Create_intercomm(0, MPI.COMM_WORLD, 1 - RANK % 2, tag=7)
    with pytest.raises(ValueError) as info:
        hvd.add_process_set(hvd.ProcessSet(inter))
    assert str(info.value) == refused + "; ".join(
        "rank %d: its communicator is an intercommunicator; a process set needs an "
        "intracommunicator (Intercomm.Merge() makes one)" % r for r in range(SIZE))
    inter.Free()
    half.Free()

    # Every rank spawns one process and merges with it: a communicator of two processes, one
    # of them outside this job's MPI_COMM_WORLD.
    child = ("from mpi4py import MPI; parent = MPI.Comm.Get_parent(); "
             "merged = parent.Merge(high=True); merged.Barrier(); merged.Free(); "
             "parent.Disconnect()")
    spawned = MPI.COMM_SELF.Spawn(sys.executable, args=["-c", child], maxprocs=1)
    merged = spawned.Merge(high=False)
    try:
        with pytest.raises(ValueError) as info:
            hvd.add_process_set(hvd.ProcessSet(merged))
    finally:
        merged.Barrier()
        merged.Free()
        spawned.Disconnect()
    assert str(info.value) == refused + "; ".join(
        "rank %d: its communicator is not a sub-communicator of MPI_COMM_WORLD: its ranks [1] "
        "are not processes of this job (processes from MPI_Comm_spawn or MPI_Comm_connect "
        "cannot be in a process set)" % r for r in range(SIZE))

    assert [s.ranks for s in process_sets()] == before
    with pytest.raises(ValueError) as info:  # the runtime's own refusal, agreed the same way
        hvd.add_process_set(hvd.ProcessSet(MPI.COMM_WORLD))
    assert str(info.value) == refused + (
        "AddProcessSet(%s): these are all the ranks, which the global process set 0 already "
        "has" % list(range(SIZE)))
    hvd.barrier()
