"""overlap.torch process sets, with horovod.torch 0.28's names and semantics, on every rank.

Sets: the even ranks and the odd ranks (registered by hvd.init(process_sets=...)), and on 4
ranks {0, 3} added later with hvd.add_process_set. Each rank computes every member's input
itself (hvd_util), so expected values come from torch arithmetic over the set's members. The
sets' collectives run while the global set's are in flight. A rank outside a set, an
unregistered or removed set and bad ranks raise ValueError with the same message everywhere.
"""

import os

import pytest
import torch

from hvd_util import floats, ints

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
