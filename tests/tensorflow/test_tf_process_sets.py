"""overlap.tensorflow process sets, with horovod.tensorflow 0.28's names and semantics, on every
rank, eagerly and inside tf.function (the `run` fixture).

Sets: the even ranks and the odd ranks, and on 4 ranks {0, 3}, which shares a rank with each of
them (registered by hvd.init(process_sets=...)); later {size - 1} alone, added with
hvd.add_process_set. Every rank computes every member's input itself (seeded by rank), so the
expected values come from numpy over the set's members. The sets' collectives run in the same
tf.function as the global set's. A rank outside a set, an unregistered set, a broadcast root
outside the set and a runtime compressor on a set raise ValueError with overlap.torch's text
(the runtime's); a set removed after a tf.function was traced fails the op with
tf.errors.InvalidArgumentError. Last, sets from mpi4py communicators (COMM_WORLD.Split) through
hvd.add_process_set and hvd.init, and an agreed refusal; without mpi4py those tests are skipped,
saying so (the refusals are checked in full by the overlap.torch suite: the code is shared).
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

SIZE = int(os.environ["OMPI_COMM_WORLD_SIZE"])
RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
EVENS = list(range(0, SIZE, 2))
ODDS = list(range(1, SIZE, 2))
MINE = EVENS if RANK % 2 == 0 else ODDS
ENDS = [0, SIZE - 1] if SIZE >= 4 else None  # overlaps both EVENS and ODDS

_sets = {}


def ints(shape, seed, rank, low=-8, high=8):
    return np.random.default_rng(1000003 * seed + 7919 * rank + 17).integers(low, high, shape)


def rank_input(shape, dtype, seed, rank):
    return tf.constant(ints(shape, seed, rank), dtype=dtype)


def assert_equal(actual, expected, what=""):
    actual = tf.convert_to_tensor(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    a = tf.cast(actual, tf.float64).numpy()
    assert np.array_equal(a, expected.astype(np.float64)), f"{what}: {a.ravel()[:8]} != " \
        f"{expected.ravel()[:8]}"


def close(actual, expected, what, tol=1e-6):
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert np.allclose(a, e, rtol=tol, atol=tol), f"{what}: {a.ravel()[:8]} != {e.ravel()[:8]}"


def assert_text(info, expected, mode):
    """The refusal's text: the whole message eagerly; when raised while tracing, tf.function puts
    the user-code frames before it."""
    message = str(info.value)
    if mode == "eager":
        assert message == expected
    else:
        assert message.rstrip().endswith(expected), message


def my_set():
    return _sets["evens"] if RANK % 2 == 0 else _sets["odds"]


def other_set():
    return _sets["odds"] if RANK % 2 == 0 else _sets["evens"]


# The first test initialises overlap itself, with process sets: it must stay first.


def test_init_registers_process_sets():
    import overlap.tensorflow as hvd
    evens, odds = hvd.ProcessSet(EVENS), hvd.ProcessSet(reversed(ODDS))
    sets = [evens, odds] + ([hvd.ProcessSet(ENDS)] if ENDS else [])
    assert evens.process_set_id is None and evens.size() is None and evens.rank() is None
    hvd.init(process_sets=sets)
    _sets.update(evens=evens, odds=odds)
    if ENDS:
        _sets["ends"] = sets[2]
        assert sets[2].process_set_id == 3 and sets[2].size() == 2
    assert (evens.process_set_id, odds.process_set_id) == (1, 2)
    assert odds.ranks == ODDS  # sorted, as Horovod does
    assert evens.size() == len(EVENS) and odds.size() == len(ODDS)
    assert my_set().rank() == MINE.index(RANK) and my_set().included()
    assert not other_set().included()
    with pytest.raises(ValueError) as info:
        other_set().rank()
    assert str(info.value) == "rank %d is not a member of process set %d (ranks %s)" % (
        RANK, other_set().process_set_id, other_set().ranks)
    assert hvd.global_process_set.rank() == RANK and hvd.global_process_set.size() == SIZE
    import overlap.tensorflow.keras as khvd
    assert khvd.add_process_set is hvd.add_process_set


@pytest.mark.parametrize("dtype", [tf.int32, tf.float32, tf.float64], ids=lambda d: d.name)
def test_allreduce_on_overlapping_sets_with_the_global_set(hvd, run, mode, dtype):
    """One call (one tf.function when traced) reduces over the global set, this rank's parity set
    and, on 4 ranks, the ends set that overlaps both, under one name."""
    inputs = {r: rank_input((5, 7), dtype, 11, r) for r in range(SIZE)}
    ends = _sets.get("ends")
    in_ends = ends is not None and ends.included()
    name = "ps.ar.%s.%s" % (dtype.name, mode)

    def step(x):
        out = [hvd.allreduce(x, op=hvd.Sum, name=name),
               hvd.allreduce(x, op=hvd.Sum, name=name, process_set=my_set()),
               hvd.allreduce(x, op=hvd.Max, name=name + ".max", process_set=my_set())]
        if in_ends:
            out.append(hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ends))
        if dtype.is_floating:
            out.append(hvd.allreduce(x, name=name + ".avg", process_set=my_set()))
            out.append(hvd.allreduce(x, op=hvd.Sum, name=name + ".scaled", prescale_factor=2.0,
                                     postscale_factor=0.25, process_set=my_set()))
        return out

    out = run(step, inputs[RANK])
    everyone = {r: inputs[r].numpy().astype(np.float64) for r in range(SIZE)}
    in_set = sum(everyone[r] for r in MINE)
    assert_equal(out.pop(0), sum(everyone.values()), "global sum")
    assert_equal(out.pop(0), in_set, "set sum")
    assert_equal(out.pop(0), np.max([everyone[r] for r in MINE], 0), "set max")
    if in_ends:
        assert_equal(out.pop(0), sum(everyone[r] for r in ENDS), "ends sum")
    if dtype.is_floating:
        close(out.pop(0), in_set / len(MINE), "set average")
        close(out.pop(0), in_set * 0.5, "set prescale 2, postscale 0.25")
    assert not out


def test_grouped_allreduce_in_a_set(hvd, run, mode):
    inputs = {r: [rank_input((3,), tf.float32, 20 + i, r) for i in range(2)] +
              [rank_input((2, 2), tf.int32, 22, r)] for r in range(SIZE)}

    def step(a, b, c):
        return hvd.grouped_allreduce([a, b, c], op=hvd.Sum, name="ps.group." + mode,
                                     process_set=my_set())

    for i, got in enumerate(run(step, *inputs[RANK])):
        assert_equal(got, sum(inputs[r][i].numpy() for r in MINE), "member %d" % i)


def test_allgather_in_set_order(hvd, run, mode):
    rows = {r: rank_input((r + 1, 2), tf.int64, 30, r) for r in range(SIZE)}  # ragged

    def step(x):
        return (hvd.allgather(x, name="ps.gather." + mode, process_set=my_set()),
                hvd.grouped_allgather([x, 2 * x], name="ps.ggather." + mode,
                                      process_set=my_set()))

    gathered, grouped = run(step, rows[RANK])
    expected = np.concatenate([rows[r].numpy() for r in MINE])
    assert_equal(gathered, expected, "allgather")
    assert_equal(grouped[0], expected, "grouped allgather 0")
    assert_equal(grouped[1], 2 * expected, "grouped allgather 1")


def test_broadcast_root_is_a_global_rank(hvd, run, mode):
    root = MINE[-1]  # a global rank, as in Horovod, not the position in the set
    values = {r: rank_input((4,), tf.float32, 40, r) for r in range(SIZE)}
    got = run(lambda x: hvd.broadcast(x, root, name="ps.bcast." + mode, process_set=my_set()),
              values[RANK])
    assert_equal(got, values[root].numpy(), "broadcast from global rank %d" % root)


def test_alltoall_reducescatter_and_barrier_in_a_set(hvd, run, mode):
    n, k = len(MINE), MINE.index(RANK)
    sent = {r: tf.range(2 * n, dtype=tf.int32) + 100 * r for r in range(SIZE)}
    inputs = {r: rank_input((2 * n, 3), tf.float32, 50, r) for r in range(SIZE)}
    # Uneven splits: member j gets j + 1 rows of every member's tensor.
    splits = list(range(1, n + 1))
    uneven = {r: tf.range(sum(splits), dtype=tf.int32) + 1000 * r for r in range(SIZE)}

    def step(a, x, u):
        received = hvd.alltoall(a, name="ps.a2a." + mode, process_set=my_set())
        got_u, got_splits = hvd.alltoall(u, splits=splits, name="ps.a2a.splits." + mode,
                                         process_set=my_set())
        scattered = hvd.reducescatter(x, op=hvd.Sum, name="ps.rs." + mode, process_set=my_set())
        grouped = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum, name="ps.grs." + mode,
                                            process_set=my_set())
        hvd.barrier(process_set=my_set())
        return received, got_u, got_splits, scattered, grouped

    received, got_u, got_splits, scattered, grouped = run(
        step, sent[RANK], inputs[RANK], uneven[RANK])
    assert_equal(received, np.concatenate([sent[r].numpy()[2 * k:2 * k + 2] for r in MINE]),
                 "alltoall")
    start = sum(splits[:k])
    assert_equal(got_u, np.concatenate([uneven[r].numpy()[start:start + k + 1] for r in MINE]),
                 "alltoall with splits")
    assert_equal(got_splits, [k + 1] * n, "alltoall received splits (uneven)")
    total = sum(inputs[r].numpy() for r in MINE)
    assert_equal(scattered, total[2 * k:2 * k + 2], "reducescatter")
    assert_equal(grouped[0], total[2 * k:2 * k + 2], "grouped reducescatter 0")
    assert_equal(grouped[1], 2 * total[2 * k:2 * k + 2], "grouped reducescatter 1")
    hvd.barrier()


def test_gradients_count_the_set(hvd, run, mode):
    n, k = len(MINE), MINE.index(RANK)
    root = MINE[0]

    def step():
        x = tf.ones([2, 3], tf.float64)
        z = tf.ones([2 * n], tf.float64)
        b = tf.fill([3], tf.constant(float(RANK), tf.float64))
        a = tf.constant([1.0, 2.0], tf.float64)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, z, b, a])
            gathered = hvd.allgather(x, name="ps.grad.gather." + mode, process_set=my_set())
            scattered = hvd.reducescatter(z, op=hvd.Sum, name="ps.grad.rs." + mode,
                                          process_set=my_set())
            broadcast = hvd.broadcast(b, root, name="ps.grad.bcast." + mode,
                                      process_set=my_set())
            reduced = hvd.allreduce(a, op=hvd.Sum, name="ps.grad.ar." + mode,
                                    process_set=my_set())
            weight = float(RANK + 1)
            losses = [tf.reduce_sum(gathered * weight), tf.reduce_sum(scattered),
                      tf.reduce_sum(broadcast * weight), tf.reduce_sum(reduced * weight)]
        return [tape.gradient(loss, v) for loss, v in zip(losses, [x, z, b, a])]

    g_gather, g_rs, g_bcast, g_ar = run(step)
    mean = sum(r + 1 for r in MINE) / n
    # allgather: the set's average of the upstream gradients, this rank's rows.
    close(g_gather, np.full((2, 3), mean), "allgather gradient")
    # reducescatter with Sum: the gathered gradient times the set's size.
    close(g_rs, np.full((2 * n,), float(n)), "reducescatter gradient")
    # broadcast: the set's average on the root, zero on the other members.
    close(g_bcast, np.full((3,), mean if RANK == root else 0.0), "broadcast gradient")
    # allreduce with Sum: the set's sum of the upstream gradients.
    close(g_ar, np.full((2,), float(sum(r + 1 for r in MINE))), "allreduce gradient")
    assert k >= 0


def make_variables(seed=3):
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.standard_normal((4, 2)), dtype=tf.float64),
            tf.Variable(rng.standard_normal((2,)), dtype=tf.float64)]


def batch(rank, seed=0):
    rng = np.random.default_rng(100 * seed + rank)
    return (tf.constant(rng.standard_normal((5, 4))), tf.constant(rng.standard_normal((5, 2))))


def local_grads(variables, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
    return [g.numpy() for g in tape.gradient(loss, variables)]


@pytest.mark.parametrize("groups", [None, 1], ids=["per-tensor", "grouped"])
def test_gradient_tape_on_a_set(hvd, mode, groups):
    """Members of the evens set get the evens' average; the odd ranks keep their own gradients,
    as in Horovod. The global tape in the same step averages over everyone."""
    evens = _sets["evens"]
    variables = make_variables()

    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
        on_set = hvd.DistributedGradientTape(tape, groups=groups, process_set=evens)
        everyone = hvd.DistributedGradientTape(tape, groups=groups)
        return on_set.gradient(loss, variables), everyone.gradient(loss, variables)

    fn = step if mode == "eager" else tf.function(step)
    for repeat in range(2):  # a traced step repeats its names
        on_set, everyone = fn(*batch(RANK, repeat))
        local = {r: local_grads(variables, *batch(r, repeat)) for r in range(SIZE)}
        for i in range(2):
            if RANK in EVENS:
                expected = sum(local[r][i] for r in EVENS) / len(EVENS)
            else:
                expected = local[RANK][i]
            close(on_set[i], expected, "gradient %d on the evens set" % i)
            close(everyone[i], sum(local[r][i] for r in range(SIZE)) / SIZE,
                  "gradient %d on the global set" % i)


def test_sparse_gradient_on_a_set(hvd, mode):
    """An embedding's IndexedSlices gradient is allgathered within the set and averaged over its
    size."""
    table = tf.Variable(tf.ones([6, 2]))
    ids = tf.constant([RANK % 6, (RANK + 1) % 6])

    def step():
        with hvd.DistributedGradientTape(tf.GradientTape(), process_set=my_set()) as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids))
        return tape.gradient(loss, [table])[0]

    grad = (step if mode == "eager" else tf.function(step))()
    assert isinstance(grad, tf.IndexedSlices)
    grad = tf.math.unsorted_segment_sum(grad.values, grad.indices, 6)
    expected = np.zeros([6, 2])
    for r in MINE:
        for row in (r % 6, (r + 1) % 6):
            expected[row] += 1.0 / len(MINE)
    close(grad, expected, "embedding gradient on the set")


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["function", "eager"])
def test_keras_distributed_optimizer_on_a_set(khvd, run_eagerly):
    """One SGD step of a linear model: the odd ranks average over the odd set (rank 1 alone on 2
    ranks), the even ranks over theirs; each set's result is the step on its members' data."""
    lr = 0.5
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])
    w0 = model.get_weights()[0].astype(np.float64)
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(lr), process_set=my_set())
    model.compile(optimizer=opt, loss="mse", run_eagerly=run_eagerly)
    data = {r: ints((1, 4), 61, r).astype(np.float32) for r in range(SIZE)}
    target = np.zeros((1, 1), np.float32)
    model.fit(data[RANK], target, batch_size=1, epochs=1, verbose=0, shuffle=False)

    def grad(r):  # d/dw of (x.w)^2 for one sample
        x = data[r].astype(np.float64)
        return 2.0 * x.T * float((x @ w0)[0, 0])

    expected = w0 - lr * sum(grad(r) for r in MINE) / len(MINE)
    close(model.get_weights()[0], expected, "weights after one step on the set", tol=1e-4)


def test_variable_and_object_helpers_on_a_set(hvd, mode):
    root = MINE[-1]
    v = tf.Variable(tf.fill([3], float(RANK)))
    w = tf.Variable(tf.fill([2, 2], float(10 * RANK)))
    if mode == "eager":
        hvd.broadcast_variables([v, w], root_rank=root, process_set=my_set())
    else:
        tf.function(lambda: hvd.broadcast_variables([v, w], root_rank=root,
                                                    process_set=my_set()))()
    assert_equal(v, np.full([3], float(root)), "broadcast_variables")
    assert_equal(w, np.full([2, 2], float(10 * root)), "broadcast_variables")
    if mode == "eager":  # the object helpers are eager, as in Horovod
        assert hvd.broadcast_object({"rank": RANK}, root_rank=MINE[0], name="ps.obj",
                                    process_set=my_set()) == {"rank": MINE[0]}
        assert hvd.allgather_object(("r", RANK), name="ps.objs", process_set=my_set()) == [
            ("r", r) for r in MINE]


def test_refusals_name_the_rank_the_tensor_and_the_set(hvd, run, mode):
    """The same text as overlap.torch's (docs/bad-inputs.md), on the rank that makes the call,
    eagerly and when a tf.function is traced; the sets still work afterwards."""
    mine, other = my_set(), other_set()
    t = tf.ones([4])
    foreign = "ps.foreign." + mode
    refusals = [
        (lambda x: hvd.allreduce(x, name=foreign, process_set=other),
         "allreduce '%s'" % foreign),
        (lambda x: hvd.allgather(x, name=foreign, process_set=other),
         "allgather '%s'" % foreign),
        (lambda x: hvd.broadcast(x, other.ranks[0], name=foreign, process_set=other),
         "broadcast '%s'" % foreign),
        (lambda x: hvd.reducescatter(x, name=foreign, process_set=other),
         "reducescatter '%s'" % foreign),
        (lambda x: hvd.alltoall(x, name=foreign, process_set=other),
         "alltoall '%s'" % foreign),
        (lambda x: hvd.grouped_allreduce([x, x], name=foreign, process_set=other)[0],
         "allreduce 'group[%s.0,%s.1]'" % (foreign, foreign)),
        (lambda x: hvd.barrier(process_set=other), "barrier '__barrier'"),
    ]
    for call, what in refusals:
        with pytest.raises(ValueError) as info:
            run(call, t)
        assert_text(info, "rank %d: %s: rank %d is not a member of process set %d (ranks %s)" % (
            RANK, what, RANK, other.process_set_id, other.ranks), mode)
    outsider = other.ranks[0]
    with pytest.raises(ValueError) as info:
        run(lambda x: hvd.broadcast(x, outsider, name="ps.bcast.outsider", process_set=mine), t)
    assert_text(info, "rank %d: broadcast 'ps.bcast.outsider': root rank %d is not a member of "
                "process set %d (ranks %s)" % (RANK, outsider, mine.process_set_id, mine.ranks),
                mode)
    unregistered = hvd.ProcessSet([0])
    unregistered_text = (
        "rank %d: ProcessSet(process_set_id=None, ranks=[0], mpi_comm=None) is not registered: "
        "pass it to hvd.init(process_sets=...) or hvd.add_process_set() first (a removed set is "
        "no longer registered)" % RANK)
    for call in [lambda x: hvd.allgather(x, name="ps.unregistered", process_set=unregistered),
                 lambda x: hvd.allreduce(x, name="ps.unregistered", process_set=unregistered)]:
        with pytest.raises(ValueError) as info:
            run(call, t)
        assert_text(info, unregistered_text, mode)
    with pytest.raises(ValueError) as info:
        hvd.DistributedGradientTape(tf.GradientTape(), process_set=unregistered)
    assert str(info.value) == unregistered_text
    with pytest.raises(ValueError) as info:
        hvd.broadcast_object(1, root_rank=0, process_set=unregistered)
    assert str(info.value) == unregistered_text
    compressed = "ps.compressed." + mode
    with pytest.raises(ValueError) as info:
        run(lambda x: hvd.allreduce(x, name=compressed, compression=hvd.Compression.topk(0.5),
                                    process_set=mine), t)
    assert_text(info, "rank %d: allreduce '%s': process set %d: compression and delayed updates "
                "(delay, period, phase) run on the global process set 0 only" %
                (RANK, compressed, mine.process_set_id), mode)
    # The sets and the global set still work.
    got = run(lambda x: (hvd.allreduce(x, op=hvd.Sum, name="ps.after." + mode, process_set=mine),
                         hvd.allreduce(x, op=hvd.Sum, name="ps.after." + mode)), t)
    assert_equal(got[0], np.full([4], float(len(MINE))), "set allreduce after the refusals")
    assert_equal(got[1], np.full([4], float(SIZE)), "global allreduce after the refusals")


def test_mismatch_inside_a_set_fails_its_members(hvd, mode):
    """Shapes that differ between a set's members fail the op on each of them (not a hang), with
    the set's prefix, since the ranks the runtime names count within the set; the set works
    afterwards. Needs two members in a set: 4 ranks."""
    if len(MINE) < 2:
        pytest.skip("each set has one member on %d ranks" % SIZE)
    name = "ps.mismatch." + mode
    shape = [2, 3] if MINE.index(RANK) == 0 else [2, 4]
    call = (lambda x: hvd.allreduce(x, name=name, process_set=my_set()))
    with pytest.raises(tf.errors.OpError) as info:
        (call if mode == "eager" else tf.function(call))(tf.ones(shape)).numpy()
    prefix = "process set %d (ranks %s, numbered 0..%d below): " % (
        my_set().process_set_id, MINE, len(MINE) - 1)
    assert prefix in info.value.message, info.value.message
    assert "rank %d: allreduce '%s': shape mismatch" % (MINE.index(RANK), name) in \
        info.value.message, info.value.message
    got = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name=name + ".after", process_set=my_set())
    assert_equal(got, np.full([2], float(len(MINE))), "set allreduce after the mismatch")


def test_add_and_remove_at_runtime(hvd):
    """The odd ranks' set goes; a set of the last rank alone (on 2 ranks, the removed set's ranks
    again) comes, with a new id, and works eagerly and in a traced function. Once it is removed
    too, the object is refused in Python, and the traced function's op fails at once with the
    runtime's message on the member (InvalidArgumentError, not a hang)."""
    odds = _sets.pop("odds")
    assert hvd.remove_process_set(odds) is True and odds.process_set_id is None
    assert hvd.remove_process_set(odds) is False  # no longer registered, as Horovod
    assert hvd.remove_process_set(hvd.global_process_set) is False
    x = tf.range(4, dtype=tf.float32)
    if RANK in ODDS:
        with pytest.raises(ValueError, match="rank %d: .* is not registered" % RANK):
            hvd.allreduce(x, name="ps.removed", process_set=odds)
    solo = hvd.add_process_set([SIZE - 1])
    assert solo.process_set_id == (4 if ENDS else 3) and solo.size() == 1
    assert solo.included() == (RANK == SIZE - 1)
    traced = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="ps.solo.traced",
                                                 process_set=solo))
    if RANK == SIZE - 1:
        assert_equal(hvd.allreduce(x, name="ps.solo", process_set=solo), x.numpy(), "solo")
        assert_equal(traced(x), x.numpy(), "solo, traced")
    set_id = solo.process_set_id
    assert hvd.remove_process_set(solo) is True
    if RANK == SIZE - 1:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            traced(x)  # the concrete function still holds the removed set's id
        assert ("rank %d: allreduce 'ps.solo.traced': process set %d was removed "
                "(RemoveProcessSet)" % (RANK, set_id)) in info.value.message, info.value.message
    # The evens' set stays registered: shutdown stops it before the global set.
    if RANK in EVENS:
        assert_equal(hvd.allreduce(x, op=hvd.Sum, name="ps.end", process_set=_sets["evens"]),
                     len(EVENS) * x.numpy(), "evens allreduce at the end")
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


def _check_collectives(hvd, ps, tag):
    """allreduce, allgather (ragged, in set order) and broadcast (from a global rank) on `ps`,
    the set of this rank's half, eagerly and in a tf.function: values against every member's
    input."""
    inputs = {r: rank_input((3, 4), tf.float32, 80, r) for r in range(SIZE)}
    rows = {r: rank_input((r + 1, 2), tf.int64, 81, r) for r in range(SIZE)}
    root = MINE[-1]
    for mode in ("eager", "function"):
        def step(x, y):
            return (hvd.allreduce(x, op=hvd.Sum, name="%s.sum.%s" % (tag, mode), process_set=ps),
                    hvd.allreduce(x, name="%s.avg.%s" % (tag, mode), process_set=ps),
                    hvd.allgather(y, name="%s.gather.%s" % (tag, mode), process_set=ps),
                    hvd.broadcast(x, root, name="%s.bcast.%s" % (tag, mode), process_set=ps))

        run = step if mode == "eager" else tf.function(step)
        total, average, gathered, broadcast = run(inputs[RANK], rows[RANK])
        expected = sum(inputs[r].numpy() for r in MINE)
        assert_equal(total, expected, "%s: allreduce sum" % mode)
        close(average, expected / len(MINE), "%s: allreduce average" % mode)
        assert_equal(gathered, np.concatenate([rows[r].numpy() for r in MINE]),
                     "%s: allgather" % mode)
        assert_equal(broadcast, inputs[root].numpy(), "%s: broadcast" % mode)


def test_process_sets_from_an_mpi4py_communicator(hvd):
    """COMM_WORLD.Split by parity gives each rank the communicator of its half; registered
    with add_process_set, and then again with init(comm=MPI.COMM_WORLD, process_sets=[...])
    (Horovod's form; the runtime is running, so init registers the sets only), every rank gets
    the set of its own communicator, its members' MPI_COMM_WORLD ranks; collectives on it give
    the members' values; removing it removes both halves' sets."""
    MPI = _mpi4py()
    from overlap.common import process_sets
    for ps in process_sets()[1:]:  # the split below makes these sets again
        if ps.ranks in (EVENS, ODDS):
            assert hvd.remove_process_set(ps)
    comm = MPI.COMM_WORLD.Split(color=RANK % 2, key=RANK)
    ps = hvd.add_process_set(hvd.ProcessSet(comm))
    assert ps.mpi_comm is comm and ps.ranks == MINE and ps.size() == comm.Get_size()
    assert ps.rank() == comm.Get_rank() == MINE.index(RANK) and ps.included()
    assert sorted(s.ranks for s in process_sets()[1:] if s.ranks in (EVENS, ODDS)) == \
        sorted([EVENS, ODDS])
    _check_collectives(hvd, ps, "ps.comm.added")
    assert hvd.remove_process_set(ps) is True and ps.process_set_id is None
    assert not [s for s in process_sets() if s.ranks in (EVENS, ODDS)]

    again = hvd.ProcessSet(comm)
    hvd.init(comm=MPI.COMM_WORLD, process_sets=[again])
    assert again.ranks == MINE and again.rank() == MINE.index(RANK)
    _check_collectives(hvd, again, "ps.comm.init")
    # A rank whose communicator is MPI.COMM_NULL: every rank refuses, naming it.
    last = SIZE - 1
    null_on_last = MPI.COMM_WORLD.Split(0 if RANK != last else MPI.UNDEFINED, RANK)
    with pytest.raises(ValueError) as info:
        hvd.add_process_set(hvd.ProcessSet(null_on_last))
    assert str(info.value) == (
        "rank %d: process set from an mpi4py communicator refused: rank %d: its communicator "
        "is MPI.COMM_NULL, so this rank is in none (Split with color MPI.UNDEFINED gives "
        "that); every rank must pass a communicator it is a member of" % (RANK, last))
    if null_on_last != MPI.COMM_NULL:
        null_on_last.Free()
    # `again` stays registered (with the other half's set): shutdown stops both.
    hvd.barrier()
