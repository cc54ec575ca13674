"""Gradients through overlap.torch's collectives, as horovod.torch 0.28 defines them.

Each rank backpropagates its own upstream gradient g_r (loss_r = sum(y * g_r)); every rank
knows every g_r (hvd_util seeds), so the expected input gradient is computed locally from
Horovod's definitions:
- allreduce(op):            grad = allreduce(g, op, same prescale/postscale)
- allgather:                grad = this rank's rows of the average over ranks of g_r
- broadcast(root):          grad = average over ranks of g_r on root, zeros elsewhere
- alltoall(splits):         grad = alltoall(g, splits = the received splits)
- reducescatter(Sum):       grad = allgather(g) * size;  reducescatter(Average): allgather(g)
- grouped_* :               the same, tensor by tensor
"""

import pytest
import torch

from hvd_util import (GRAD_DTYPES, alltoall_splits, assert_close, floats, row_counts,
                      scatter_rows, slice_of)


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def leaf(shape, seed, rank, dtype):
    return floats(shape, seed, rank, dtype).requires_grad_()


def upstream(shape, seed, size, dtype):
    """Every rank's upstream gradient for an output of `shape`."""
    return [floats(shape, seed, r, dtype) for r in range(size)]


def backprop(output, grad):
    (output * grad).sum().backward()


def tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_allreduce_grad(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    for dims, shape in enumerate([(7,), (3, 4), (2, 3, 4)]):
        x = leaf(shape, 1 + dims, rank, dtype)
        y = hvd.allreduce(x, op=getattr(hvd, op), name=f"grad.allreduce.{op}.{dims}")
        assert y.requires_grad
        g = upstream(shape, 11 + dims, size, dtype)
        backprop(y, g[rank])
        expected = sum(g) / (size if op == "Average" else 1)
        assert_close(x.grad, expected, f"allreduce {op} grad {shape}", **tolerance(dtype))


@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_allreduce_grad_scaled(hvd, op):
    size, rank = hvd.size(), hvd.rank()
    x = leaf((5, 2), 21, rank, torch.float64)
    y = hvd.allreduce(x, op=getattr(hvd, op), prescale_factor=0.5, postscale_factor=3.0)
    g = upstream((5, 2), 22, size, torch.float64)
    backprop(y, g[rank])
    expected = sum(g) * 1.5 / (size if op == "Average" else 1)
    assert_close(x.grad, expected, f"allreduce {op} grad with pre/post scale")


def test_allreduce_grad_default_op_and_compression(hvd):
    size, rank = hvd.size(), hvd.rank()
    x = leaf((6,), 31, rank, torch.float32)
    g = upstream((6,), 32, size, torch.float32)
    backprop(hvd.allreduce(x), g[rank])
    assert_close(x.grad, sum(g) / size, "allreduce grad, default op")

    x = leaf((6,), 33, rank, torch.float32)
    y = hvd.allreduce(x, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    backprop(y, g[rank])
    assert x.grad.dtype == torch.float32
    assert_close(x.grad, sum(g) / size, "allreduce grad through fp16 compression",
                 rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
def test_allgather_grad(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    rows = row_counts(size)
    for dims, trailing in enumerate([(), (3,), (2, 3)]):
        x = leaf((rows[rank],) + trailing, 41 + dims, rank, dtype)
        y = hvd.allgather(x, name=f"grad.allgather.{dims}")
        assert tuple(y.shape) == (sum(rows),) + trailing
        g = upstream(y.shape, 51 + dims, size, dtype)
        backprop(y, g[rank])
        offset, count = slice_of(rows, rank)
        expected = (sum(g) / size)[offset:offset + count]
        assert_close(x.grad, expected, f"allgather grad {trailing}", **tolerance(dtype))


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
def test_broadcast_grad(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        x = leaf((4, 3), 61 + root, rank, dtype)
        y = hvd.broadcast(x, root_rank=root, name=f"grad.broadcast.{root}")
        g = upstream((4, 3), 71 + root, size, dtype)
        backprop(y, g[rank])
        expected = sum(g) / size if rank == root else torch.zeros(4, 3, dtype=dtype)
        assert_close(x.grad, expected, f"broadcast grad from {root}", **tolerance(dtype))


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
def test_alltoall_grad_equal_splits(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    x = leaf((2 * size, 3), 81, rank, dtype)
    y = hvd.alltoall(x)
    g = upstream(y.shape, 82, size, dtype)
    backprop(y, g[rank])
    # Rows 2j..2j+1 of x went to rank j, which holds them at rows 2*rank..2*rank+1 of its y.
    expected = torch.cat([g[j][2 * rank:2 * rank + 2] for j in range(size)])
    assert_close(x.grad, expected, "alltoall grad without splits", **tolerance(dtype))


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
def test_alltoall_grad_splits(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    splits = [alltoall_splits(r, size) for r in range(size)]  # splits[sender][receiver]
    x = leaf((sum(splits[rank]), 2), 91, rank, dtype)
    y, received = hvd.alltoall(x, splits=splits[rank])
    assert received.tolist() == [splits[s][rank] for s in range(size)]
    received_rows = [sum(splits[s][r] for s in range(size)) for r in range(size)]
    g = [floats((received_rows[r], 2), 92, r, dtype) for r in range(size)]
    backprop(y, g[rank])
    blocks = []
    for receiver in range(size):
        offset = sum(splits[s][receiver] for s in range(rank))
        blocks.append(g[receiver][offset:offset + splits[rank][receiver]])
    assert_close(x.grad, torch.cat(blocks), "alltoall grad with splits", **tolerance(dtype))


@pytest.mark.parametrize("dtype", GRAD_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_grad(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    for i, dim0 in enumerate([2 * size, 2 * size + 1]):
        x = leaf((dim0, 3), 101 + i, rank, dtype)
        y = hvd.reducescatter(x, op=getattr(hvd, op), name=f"grad.rs.{op}.{i}")
        rows = scatter_rows(dim0, size)
        assert tuple(y.shape) == (rows[rank], 3)
        g = [floats((rows[r], 3), 111 + i, r, dtype) for r in range(size)]
        backprop(y, g[rank])
        expected = torch.cat(g) * (size if op == "Sum" else 1)
        assert_close(x.grad, expected, f"reducescatter {op} grad, {dim0} rows", **tolerance(dtype))


@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_grouped_allreduce_grad(hvd, op):
    size, rank = hvd.size(), hvd.rank()
    shapes = [(3,), (2, 5), (4, 1, 2)]
    xs = [leaf(s, 121 + i, rank, torch.float64) for i, s in enumerate(shapes)]
    ys = hvd.grouped_allreduce(xs, op=getattr(hvd, op))
    gs = [upstream(s, 131 + i, size, torch.float64) for i, s in enumerate(shapes)]
    sum(((y * g[rank]).sum() for y, g in zip(ys, gs))).backward()
    for i, (x, g) in enumerate(zip(xs, gs)):
        expected = sum(g) / (size if op == "Average" else 1)
        assert_close(x.grad, expected, f"grouped_allreduce {op} grad [{i}]")


def test_grouped_allgather_grad(hvd):
    size, rank = hvd.size(), hvd.rank()
    rows = row_counts(size)
    trailings = [(), (2,), (2, 2)]
    xs = [leaf((rows[rank],) + t, 141 + i, rank, torch.float64) for i, t in enumerate(trailings)]
    ys = hvd.grouped_allgather(xs)
    gs = [upstream(y.shape, 151 + i, size, torch.float64) for i, y in enumerate(ys)]
    sum(((y * g[rank]).sum() for y, g in zip(ys, gs))).backward()
    offset, count = slice_of(rows, rank)
    for i, (x, g) in enumerate(zip(xs, gs)):
        assert_close(x.grad, (sum(g) / size)[offset:offset + count], f"grouped_allgather grad [{i}]")


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_reducescatter_grad(hvd, op):
    size, rank = hvd.size(), hvd.rank()
    dims = [size, 2 * size + 1, 3 * size]
    xs = [leaf((d, 2), 161 + i, rank, torch.float64) for i, d in enumerate(dims)]
    ys = hvd.grouped_reducescatter(xs, op=getattr(hvd, op))
    gs = [[floats((scatter_rows(d, size)[r], 2), 171 + i, r, torch.float64) for r in range(size)]
          for i, d in enumerate(dims)]
    sum(((y * g[rank]).sum() for y, g in zip(ys, gs))).backward()
    for i, (x, g) in enumerate(zip(xs, gs)):
        expected = torch.cat(g) * (size if op == "Sum" else 1)
        assert_close(x.grad, expected, f"grouped_reducescatter {op} grad [{i}]")


def test_grad_through_a_composed_graph(hvd):
    """A collective in the middle of a computation: the chain rule runs through it."""
    size, rank = hvd.size(), hvd.rank()
    w = leaf((4,), 181, 0, torch.float64)  # the same parameter on every rank
    x = floats((3, 4), 182, rank, torch.float64)
    local = torch.tanh(x * w)                      # (3, 4)
    gathered = hvd.allgather(local, name="composed.gather")  # (3 * size, 4)
    loss = (gathered ** 2).sum()
    loss.backward()
    # Reference: d/dw of sum over the gathered rows, with Horovod's allgather gradient (the
    # average over ranks of the upstream gradient, which here is 2 * gathered on every rank).
    w_ref = w.detach().clone().requires_grad_()
    all_x = [floats((3, 4), 182, r, torch.float64) for r in range(size)]
    local_ref = torch.tanh(all_x[rank] * w_ref)
    gathered_ref = torch.cat([torch.tanh(t * w.detach()) for t in all_x])
    upstream_rows = (2 * gathered_ref)[3 * rank:3 * rank + 3]
    (local_ref * upstream_rows).sum().backward()
    assert_close(w.grad, w_ref.grad, "gradient through allgather inside a graph")
