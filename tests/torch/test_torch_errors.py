"""overlap.torch's errors, as horovod.torch 0.28 raises them, on every rank and without hanging.

- Before hvd.init(), ranks and collectives raise (ValueError in Horovod).
- Tensors that disagree across ranks (shape, rank of the shape, dtype, broadcast root) raise on
  every rank that submitted them: HorovodInternalError (a RuntimeError) from synchronize, or
  ValueError, naming the tensor. After the error the ranks go on working.
- A second operation under a name still in flight raises ValueError.
- Adasum of integer tensors, and a reduce-scatter with Adasum, are refused with an error that
  names it.
Every test is under the conftest watchdog: a hang ends the rank with a traceback.
"""

import pytest
import torch

# The first test runs before init: it must stay first, and must not use the `hvd` fixture.


def test_calls_before_init_raise():
    import overlap.torch as hvd
    assert not hvd.is_initialized()
    for query in [hvd.rank, hvd.size, hvd.local_rank, hvd.local_size]:
        with pytest.raises((ValueError, RuntimeError)) as info:
            query()
        assert "init" in str(info.value).lower(), f"{query.__name__}: {info.value}"
    with pytest.raises((ValueError, RuntimeError)) as info:
        hvd.allreduce(torch.ones(3), name="before.init")
    assert "init" in str(info.value).lower(), str(info.value)
    with pytest.raises((ValueError, RuntimeError)):
        hvd.synchronize(hvd.allgather_async(torch.ones(3), name="before.init.gather"))
    # The whole messages, as docs/bad-inputs.md quotes them.
    with pytest.raises(ValueError) as info:
        hvd.rank()
    assert str(info.value) == "overlap has not been initialized; call hvd.init() before rank()"
    with pytest.raises(TypeError) as info:
        hvd.init(plannr="auto")
    assert str(info.value) == "init() got an unexpected keyword argument 'plannr'"
    assert not hvd.is_initialized()


def test_internal_error_type(hvd):
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


def errors(hvd):
    return (hvd.HorovodInternalError, ValueError)


def check_still_working(hvd, name):
    result = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=f"after.{name}")
    assert torch.equal(result, torch.full((2,), float(hvd.size()))), f"allreduce after {name}"


def expect_error_on_every_rank(hvd, name, call, also=()):
    """`call` must raise on this rank (the test runs on every rank) with a message naming the
    tensor; the ranks then agree on a fresh allreduce, so none is left hanging."""
    with pytest.raises(errors(hvd) + tuple(also)) as info:
        result = call()
        # An async call may raise on submission or when synchronized.
        if isinstance(result, int) or not isinstance(result, (torch.Tensor, list, tuple)):
            hvd.synchronize(result)
    assert name in str(info.value), f"the error does not name '{name}': {info.value}"
    check_still_working(hvd, name)
    return info.value


def odd(hvd):
    return hvd.rank() % 2 == 1


def test_allreduce_shape_mismatch(hvd):
    shape = (4, 6) if odd(hvd) else (4, 5)
    expect_error_on_every_rank(hvd, "mismatch.allreduce.shape",
                               lambda: hvd.allreduce(torch.ones(shape), name="mismatch.allreduce.shape"))


def test_allreduce_shape_rank_mismatch(hvd):
    shape = (2, 3, 4) if odd(hvd) else (6, 4)
    expect_error_on_every_rank(hvd, "mismatch.allreduce.ndim",
                               lambda: hvd.allreduce(torch.ones(shape), name="mismatch.allreduce.ndim"))


def test_allreduce_dtype_mismatch(hvd):
    dtype = torch.float32 if odd(hvd) else torch.int32
    expect_error_on_every_rank(
        hvd, "mismatch.allreduce.dtype",
        lambda: hvd.allreduce(torch.ones(5, dtype=dtype), op=hvd.Sum, name="mismatch.allreduce.dtype"))


def test_allreduce_op_mismatch(hvd):
    op = hvd.Max if odd(hvd) else hvd.Sum
    expect_error_on_every_rank(hvd, "mismatch.allreduce.op",
                               lambda: hvd.allreduce(torch.ones(5), op=op, name="mismatch.allreduce.op"))


def test_allreduce_async_mismatch_raises_at_synchronize_or_submit(hvd):
    shape = (3,) if odd(hvd) else (4,)
    expect_error_on_every_rank(
        hvd, "mismatch.allreduce.async",
        lambda: hvd.allreduce_async(torch.ones(shape), name="mismatch.allreduce.async"))


def test_grouped_allreduce_mismatch(hvd):
    shape = (3, 2) if odd(hvd) else (3, 3)
    tensors = [torch.ones(4), torch.ones(shape)]
    expect_error_on_every_rank(hvd, "mismatch.grouped",
                               lambda: hvd.grouped_allreduce(tensors, name="mismatch.grouped"))


def test_allgather_trailing_shape_mismatch(hvd):
    shape = (2, 4) if odd(hvd) else (2, 3)
    expect_error_on_every_rank(hvd, "mismatch.allgather.shape",
                               lambda: hvd.allgather(torch.ones(shape), name="mismatch.allgather.shape"))


def test_allgather_dtype_mismatch(hvd):
    dtype = torch.float64 if odd(hvd) else torch.float32
    expect_error_on_every_rank(
        hvd, "mismatch.allgather.dtype",
        lambda: hvd.allgather(torch.ones(2, dtype=dtype), name="mismatch.allgather.dtype"))


def test_broadcast_shape_mismatch(hvd):
    shape = (5,) if odd(hvd) else (6,)
    expect_error_on_every_rank(hvd, "mismatch.broadcast.shape",
                               lambda: hvd.broadcast(torch.ones(shape), 0, name="mismatch.broadcast.shape"))


def test_broadcast_root_mismatch(hvd):
    root = 1 if hvd.rank() != 0 else 0
    expect_error_on_every_rank(hvd, "mismatch.broadcast.root",
                               lambda: hvd.broadcast(torch.ones(3), root, name="mismatch.broadcast.root"))


def test_reducescatter_shape_mismatch(hvd):
    shape = (4 * hvd.size(), 3) if odd(hvd) else (4 * hvd.size(), 2)
    expect_error_on_every_rank(
        hvd, "mismatch.reducescatter",
        lambda: hvd.reducescatter(torch.ones(shape), op=hvd.Sum, name="mismatch.reducescatter"))


def test_alltoall_trailing_shape_mismatch(hvd):
    shape = (hvd.size(), 3) if odd(hvd) else (hvd.size(), 2)
    expect_error_on_every_rank(hvd, "mismatch.alltoall",
                               lambda: hvd.alltoall(torch.ones(shape), name="mismatch.alltoall"))


# ---- the whole messages, as docs/bad-inputs.md quotes them ----------------------------------


def raised(exception_types, call):
    with pytest.raises(exception_types) as info:
        call()
    return str(info.value)


def test_mismatch_messages_name_rank_tensor_and_both_sides(hvd):
    me = "rank %d: " % hvd.rank()
    shape = (4, 6) if odd(hvd) else (4, 5)
    assert raised(hvd.HorovodInternalError,
                  lambda: hvd.allreduce(torch.ones(shape), name="catalogue.fc1.weight")) == (
        me + "allreduce 'catalogue.fc1.weight': shape mismatch: rank 0 submitted [4,5], "
        "rank 1 submitted [4,6]")
    dtype = torch.float32 if odd(hvd) else torch.int32
    assert raised(hvd.HorovodInternalError,
                  lambda: hvd.allreduce(torch.ones(5, dtype=dtype), op=hvd.Sum,
                                        name="catalogue.fc2.weight")) == (
        me + "allreduce 'catalogue.fc2.weight': dtype mismatch: rank 0 submitted int32, "
        "rank 1 submitted float32")
    check_still_working(hvd, "catalogue.mismatch")


def test_local_refusal_messages(hvd):
    me = "rank %d: " % hvd.rank()
    assert raised(ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64),
                                                    name="catalogue.cplx")) == (
        me + "allreduce 'catalogue.cplx': tensor type torch.complex64 is not supported")
    assert raised(ValueError, lambda: hvd.allreduce([1.0, 2.0], name="catalogue.list")) == (
        me + "allreduce 'catalogue.list': expected a torch.Tensor, got list")
    assert raised(ValueError, lambda: hvd.allreduce(torch.eye(2).to_sparse(),
                                                    name="catalogue.sparse")) == (
        me + "allreduce 'catalogue.sparse': sparse tensors need sparse_allreduce_async or "
        "DistributedOptimizer(sparse_as_dense=True)")
    assert raised(ValueError, lambda: hvd.reducescatter(torch.tensor(1.0),
                                                        name="catalogue.rs")) == (
        me + "reducescatter 'catalogue.rs': needs at least one dimension")
    assert raised(ValueError, lambda: hvd.broadcast(torch.ones(3), hvd.size() + 5,
                                                    name="catalogue.root")) == (
        me + "broadcast 'catalogue.root': root rank %d is outside [0, %d)"
        % (hvd.size() + 5, hvd.size()))
    assert raised(ValueError, lambda: hvd.allreduce(torch.ones(4, dtype=torch.int32),
                                                    op=hvd.Adasum, name="catalogue.adasum")) == (
        me + "allreduce 'catalogue.adasum': Adasum is defined for floating-point tensors "
        "(float16, bfloat16, float32, float64), not int32")
    assert raised(ValueError, lambda: hvd.synchronize(987654)) == (
        me + "synchronize: unknown handle 987654 (already synchronized?)")
    assert raised(ValueError, lambda: hvd.poll(987654)) == (
        me + "poll: unknown handle 987654 (already synchronized?)")
    assert raised(ValueError, lambda: hvd.broadcast_parameters(42, 0)) == (
        me + "broadcast_parameters: invalid params of type: <class 'int'>")
    lbfgs = torch.optim.LBFGS(torch.nn.Linear(2, 2).parameters())
    assert raised(ValueError, lambda: hvd.broadcast_optimizer_state(lbfgs, 0)) == (
        me + "broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state")
    model = torch.nn.Linear(2, 2)
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
        backward_passes_per_step=0)) == (
        me + "DistributedOptimizer: backward_passes_per_step must be >= 1, got 0")
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=[("w", p) for p in model.parameters()])) == (
        me + "DistributedOptimizer: parameter names in named_parameters must be unique; "
        "duplicates: w")
    # A refused wrap leaves the optimizer as it was: wrapping it again with good arguments works.
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(
        plain, named_parameters=model.named_parameters(), backward_passes_per_step=0))
    assert type(plain) is torch.optim.SGD
    wrapped = hvd.DistributedOptimizer(plain, named_parameters=model.named_parameters())
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(wrapped)) == (
        me + "DistributedOptimizer: the optimizer is already a DistributedOptimizer")
    assert raised(ValueError, lambda: hvd.allgather(torch.tensor(1.0), name="catalogue.ag")) == (
        me + "allgather 'catalogue.ag': needs at least one dimension (got a scalar)")
    check_still_working(hvd, "catalogue.local")


# ---- duplicate names ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast"])
def test_duplicate_name_in_flight(hvd, kind):
    """A name may be reused once its operation is done, not while it is in flight. The first
    operation stays in flight because one rank (the late one) submits it only after the others
    have tried the duplicate (they tell it so through another allreduce); with two phases every
    rank tries the duplicate once."""
    size, rank = hvd.size(), hvd.rank()
    submit = {
        "allreduce": lambda t, name: hvd.allreduce_async(t, op=hvd.Sum, name=name),
        "allgather": lambda t, name: hvd.allgather_async(t, name=name),
        "broadcast": lambda t, name: hvd.broadcast_async(t, 0, name=name),
    }[kind]
    for late in sorted({0, size - 1}):
        name = f"duplicate.{kind}.{late}"
        if rank != late:
            handle = submit(torch.ones(3), name)
            with pytest.raises(errors(hvd)) as info:
                hvd.synchronize(submit(torch.ones(3), name))
            assert name in str(info.value), str(info.value)
            hvd.allreduce(torch.ones(1), name=f"{name}.tried")
        else:
            hvd.allreduce(torch.ones(1), name=f"{name}.tried")
            handle = submit(torch.ones(3), name)
        result = hvd.synchronize(handle)
        assert result.shape[0] == (3 * size if kind == "allgather" else 3)
    # Done: the name is free again.
    hvd.synchronize(submit(torch.ones(3), f"duplicate.{kind}.0"))


# ---- Adasum ---------------------------------------------------------------------------------


def test_adasum_of_integers_is_refused_clearly(hvd):
    ints = torch.ones(4, dtype=torch.int64)
    for what, call in [
        ("allreduce", lambda: hvd.allreduce(ints, op=hvd.Adasum, name="adasum.1")),
        ("allreduce_async", lambda: hvd.synchronize(
            hvd.allreduce_async(ints, op=hvd.Adasum, name="adasum.2"))),
        ("grouped_allreduce", lambda: hvd.grouped_allreduce([ints], op=hvd.Adasum)),
    ]:
        with pytest.raises((NotImplementedError, ValueError, RuntimeError)) as info:
            call()
        assert "adasum" in str(info.value).lower(), f"{what}: {info.value}"
        check_still_working(hvd, f"adasum.{what}")


def test_reducescatter_adasum_is_refused(hvd):
    with pytest.raises((NotImplementedError, ValueError, RuntimeError)) as info:
        hvd.reducescatter(torch.ones(2 * hvd.size()), op=hvd.Adasum)
    assert "adasum" in str(info.value).lower(), str(info.value)
    check_still_working(hvd, "reducescatter.adasum")


# ---- process sets ---------------------------------------------------------------------------


def test_process_set_api_exists(hvd):
    assert callable(hvd.add_process_set)
    assert callable(hvd.remove_process_set)
    process_set = hvd.ProcessSet([0])
    assert list(process_set.ranks) == [0]
    assert isinstance(hvd.global_process_set, hvd.ProcessSet)
    assert hvd.global_process_set.size() == hvd.size()


def test_add_process_set_works_or_refuses_clearly(hvd):
    """Horovod adds process sets at runtime only with dynamic process sets enabled; otherwise it
    raises. Either is fine here; what must not happen is a hang or a wrong result."""
    size, rank = hvd.size(), hvd.rank()
    evens = list(range(0, size, 2))
    try:
        process_set = hvd.add_process_set(evens)
    except (ValueError, RuntimeError, NotImplementedError) as error:
        assert str(error), "add_process_set refused without saying why"
        check_still_working(hvd, "add_process_set.refused")
        return
    if rank in evens:
        assert process_set.size() == len(evens)
        assert process_set.included()
        result = hvd.allreduce(torch.full((3,), float(rank)), op=hvd.Sum, process_set=process_set,
                               name="process_set.evens")
        assert torch.equal(result, torch.full((3,), float(sum(evens))))
    hvd.remove_process_set(process_set)
    check_still_working(hvd, "remove_process_set")


def test_interrupted_synchronize_keeps_the_tensors_and_resumes(hvd):
    """An exception raised inside synchronize() while the collective is still pending (Ctrl-C, a
    signal handler's exception, a test timeout) must not drop the references that keep the
    tensor alive: the runtime still writes into it. Rank 0 is interrupted while the others are
    late, drops its own name for the tensor, and synchronizes the same handle again."""
    import gc
    import signal
    import time

    class Interrupted(Exception):
        pass

    def on_alarm(*_):
        raise Interrupted()

    n = 4 * 1024 * 1024
    if hvd.rank() == 0:
        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            t = torch.ones(n)
            handle = hvd.allreduce_async_(t, name="interrupted.sync", op=hvd.Sum)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Interrupted):
                hvd.synchronize(handle)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        del t
        gc.collect()
        result = hvd.synchronize(handle)  # the same handle, resumed
        assert torch.equal(result, torch.full((n,), float(hvd.size())))
    else:
        time.sleep(3.0)  # well after rank 0's 0.3 s timer, even on a loaded machine
        result = hvd.allreduce(torch.ones(n), name="interrupted.sync", op=hvd.Sum)
        assert torch.equal(result, torch.full((n,), float(hvd.size())))
    check_still_working(hvd, "interrupted.sync")
