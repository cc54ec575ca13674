"""overlap.torch collectives, with horovod.torch 0.28's names and semantics, on every rank.

Each rank computes every rank's input itself (hvd_util), so the expected results come from
torch arithmetic, not from the collective under test.
"""

import json
import os
import tempfile
import time

import pytest
import torch

from hvd_util import (ALL_DTYPES, INT_DTYPES, alltoall_expected, alltoall_input,
                      alltoall_splits, assert_close, assert_equal, average_input, ints,
                      product_input, rank_input, scatter_rows, slice_of, wide)

OPS = ["Average", "Sum", "Min", "Max", "Product"]


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def reduce_inputs(op, shape, dtype, seed, size):
    """Every rank's input for `op` and the expected reduction."""
    if op == "Average":
        inputs = [average_input(shape, dtype, seed, r, size)[0] for r in range(size)]
        return inputs, average_input(shape, dtype, seed, 0, size)[1]
    if op == "Product":
        inputs = [product_input(shape, dtype, seed, r) for r in range(size)]
        expected = wide(inputs[0])
        for t in inputs[1:]:
            expected = expected * wide(t)
        return inputs, expected.to(dtype)
    inputs = [rank_input(shape, dtype, seed, r) for r in range(size)]
    stacked = torch.stack([wide(t) for t in inputs])
    if op == "Sum":
        expected = stacked.sum(0)
    elif op == "Min":
        expected = stacked.min(0).values
    else:
        expected = stacked.max(0).values
    return inputs, expected.to(dtype)


# ---- basics ---------------------------------------------------------------------------------


def test_rank_and_size(hvd):
    assert hvd.is_initialized()
    assert hvd.size() == int(os.environ["OMPI_COMM_WORLD_SIZE"])
    assert hvd.rank() == int(os.environ["OMPI_COMM_WORLD_RANK"])
    assert hvd.local_size() == int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"])
    assert hvd.local_rank() == int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    # Every rank of these tests runs on this one host.
    assert hvd.local_size() == hvd.size()
    assert hvd.cross_size() == 1
    assert hvd.cross_rank() == 0
    ranks = hvd.allgather(torch.tensor([hvd.rank()], dtype=torch.int64), name="basics.ranks")
    assert ranks.tolist() == list(range(hvd.size()))


def test_build_queries(hvd):
    # horovod.torch: booleans, except nccl_built, which is NCCL's version code (0 without NCCL).
    assert hvd.mpi_built() is True
    assert hvd.mpi_enabled() is True
    assert hvd.gloo_built() is False
    assert hvd.gloo_enabled() is False
    assert hvd.ccl_built() is False
    assert hvd.rocm_built() is False
    assert hvd.sycl_built() is False
    # The core library's CUDA path: built with the toolkit (CI has it) or without (the stubs).
    built = hvd.cuda_built()
    assert isinstance(built, bool)
    assert isinstance(hvd.nccl_built(), int)
    assert (hvd.nccl_built() >= 20000) == built, (built, hvd.nccl_built())
    expect = os.environ.get("OVERLAP_TEST_CUDA_BUILT")
    if expect is not None:
        assert built == (expect == "1"), f"cuda_built() {built}, the build says {expect}"
    assert isinstance(hvd.mpi_threads_supported(), bool)


def test_reduce_op_constants(hvd):
    ops = [getattr(hvd, name) for name in OPS + ["Adasum"]]
    assert len(set(ops)) == len(ops), f"reduce ops must be distinct: {ops}"


# ---- allreduce ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", OPS)
def test_allreduce(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    for dims, shape in enumerate([(17,), (5, 7), (3, 4, 5)]):
        inputs, expected = reduce_inputs(op, shape, dtype, seed=11 + dims, size=size)
        tensor = inputs[rank].clone()
        result = hvd.allreduce(tensor, op=getattr(hvd, op), name=f"allreduce.{op}.{dims}")
        assert_equal(result, expected, f"allreduce {op} {dtype} {shape}")
        assert_equal(tensor, inputs[rank], "allreduce must not modify its input")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_allreduce_inplace(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    inputs, expected = reduce_inputs("Sum", (4, 6), dtype, seed=21, size=size)
    tensor = inputs[rank].clone()
    result = hvd.allreduce_(tensor, op=hvd.Sum)
    assert_equal(tensor, expected, f"allreduce_ {dtype}")
    assert result.data_ptr() == tensor.data_ptr(), "allreduce_ returns the tensor it reduced"


def test_allreduce_default_op_is_average(hvd):
    size, rank = hvd.size(), hvd.rank()
    inputs, expected = reduce_inputs("Average", (9,), torch.float32, seed=31, size=size)
    assert_equal(hvd.allreduce(inputs[rank]), expected, "allreduce without op")
    # The deprecated `average` flag of horovod.torch still selects the op.
    sums, sum_expected = reduce_inputs("Sum", (9,), torch.float32, seed=32, size=size)
    assert_equal(hvd.allreduce(sums[rank], average=False), sum_expected, "average=False")
    assert_equal(hvd.allreduce(inputs[rank], average=True), expected, "average=True")


def test_allreduce_async_poll_synchronize(hvd):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for i, dtype in enumerate(ALL_DTYPES):
        inputs, expected = reduce_inputs("Sum", (3, 5), dtype, seed=41 + i, size=size)
        tensor = inputs[rank].clone()
        handle = hvd.allreduce_async(tensor, op=hvd.Sum, name=f"async.{i}")
        pending.append((dtype, tensor, inputs[rank], expected, handle))
    deadline = time.monotonic() + 60
    for dtype, tensor, original, expected, handle in pending:
        while not hvd.poll(handle):
            assert time.monotonic() < deadline, f"poll never returned True for {dtype}"
            time.sleep(0.001)
        assert hvd.poll(handle) is True
        result = hvd.synchronize(handle)
        assert_equal(result, expected, f"allreduce_async {dtype}")
        assert_equal(tensor, original, "allreduce_async must not modify its input")


def test_allreduce_async_inplace(hvd):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for i, dtype in enumerate([torch.float32, torch.int64, torch.bfloat16]):
        inputs, expected = reduce_inputs("Max", (2, 8), dtype, seed=51 + i, size=size)
        tensor = inputs[rank].clone()
        pending.append((tensor, expected, hvd.allreduce_async_(tensor, op=hvd.Max)))
    for tensor, expected, handle in pending:
        result = hvd.synchronize(handle)
        assert_equal(tensor, expected, "allreduce_async_")
        assert result.data_ptr() == tensor.data_ptr()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_prescale_postscale(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    inputs, expected = reduce_inputs(op, (6, 5), dtype, seed=61, size=size)
    # Factors whose products with the test values are exact in every dtype (for integer
    # dtypes Horovod scales in float64 and casts back: exact for integral factors), and keep
    # 8-bit sums (reduced in the tensor's dtype) from overflowing.
    if dtype in (torch.uint8, torch.int8):
        pre, post = 1.0, 2.0
    elif dtype in INT_DTYPES:
        pre, post = 2.0, 3.0
    else:
        pre, post = 0.5, 0.25
    result = hvd.allreduce(inputs[rank], op=getattr(hvd, op), prescale_factor=pre,
                           postscale_factor=post, name=f"scaled.{op}")
    assert_equal(result, (wide(expected) * pre * post).to(dtype), f"{op} {dtype} pre/post")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_id)
def test_allreduce_inexact_scale_factors(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    inputs = [torch.linspace(-1, 1, 50, dtype=dtype) * (r + 1) for r in range(size)]
    expected = sum(t.to(torch.float64) * 0.3 for t in inputs) / size * 1.7
    result = hvd.allreduce(inputs[rank], op=hvd.Average, prescale_factor=0.3,
                           postscale_factor=1.7)
    assert_close(result, expected.to(dtype), "average with inexact factors")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64],
                         ids=dtype_id)
@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_allreduce_compression(hvd, compression, dtype):
    size, rank = hvd.size(), hvd.rank()
    inputs = [torch.linspace(-2, 2, 101, dtype=torch.float64) * (r + 1) / 3 for r in range(size)]
    expected = sum(inputs) / size
    comp = getattr(hvd.Compression, compression)
    result = hvd.allreduce(inputs[rank].to(dtype), compression=comp, name=f"compressed.{compression}")
    exact = compression == "none" and dtype == torch.float64
    tolerance = 1e-12 if exact else 2e-3
    assert_close(result, expected.to(dtype), f"Compression.{compression} {dtype}",
                 rtol=tolerance, atol=tolerance)
    # The compressor itself: fp16 ships float16, decompresses to the original dtype.
    compressed, ctx = comp.compress(inputs[rank].to(dtype))
    if compression == "fp16":
        assert compressed.dtype == torch.float16
    else:
        assert compressed.dtype == dtype
    assert comp.decompress(compressed, ctx).dtype == dtype


def test_compression_fp16_leaves_integers_alone(hvd):
    tensor = torch.arange(5, dtype=torch.int32)
    compressed, ctx = hvd.Compression.fp16.compress(tensor)
    assert compressed.dtype == torch.int32
    result = hvd.allreduce(tensor, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert_equal(result, tensor * hvd.size(), "fp16 compression of int32")


@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_sparse_allreduce_async(hvd, op):
    size, rank = hvd.size(), hvd.rank()

    def sparse_input(r):
        indices = ints((2, 3 + r), 0, 6, torch.int64, 231, r)  # duplicates included
        values = rank_input((3 + r,), torch.float32, 232, r)
        return torch.sparse_coo_tensor(indices, values, (6, 6), check_invariants=True)

    expected = sum(sparse_input(r).to_dense() for r in range(size))
    if op == "Average":
        expected = expected / size
    handle = hvd.sparse_allreduce_async(sparse_input(rank), name=f"sparse.{op}", op=getattr(hvd, op))
    # horovod.torch returns a callable that waits and returns the sparse result.
    result = handle() if callable(handle) else hvd.synchronize(handle)
    assert result.is_sparse
    assert_equal(result.to_dense(), expected, f"sparse_allreduce_async {op}")
    assert callable(handle), "horovod.torch's sparse_allreduce_async returns a callable"


# ---- grouped allreduce ----------------------------------------------------------------------


def grouped_inputs(op, dtype, seed, size, rank):
    shapes = [(3,), (4, 5), (2, 3, 4), (1,)]
    cases = [reduce_inputs(op, s, dtype, seed + i, size) for i, s in enumerate(shapes)]
    return [c[0][rank].clone() for c in cases], [c[1] for c in cases]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average", "Max"])
def test_grouped_allreduce(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    tensors, expected = grouped_inputs(op, dtype, 71, size, rank)
    originals = [t.clone() for t in tensors]
    results = hvd.grouped_allreduce(tensors, op=getattr(hvd, op), name=f"grouped.{op}")
    assert len(results) == len(expected)
    for i, (result, want) in enumerate(zip(results, expected)):
        assert_equal(result, want, f"grouped_allreduce {op} {dtype} [{i}]")
        assert_equal(tensors[i], originals[i], "grouped_allreduce must not modify its inputs")


def test_grouped_allreduce_inplace_and_async(hvd):
    size, rank = hvd.size(), hvd.rank()
    tensors, expected = grouped_inputs("Sum", torch.float32, 81, size, rank)
    results = hvd.grouped_allreduce_(tensors, op=hvd.Sum)
    for i, (tensor, result, want) in enumerate(zip(tensors, results, expected)):
        assert_equal(tensor, want, f"grouped_allreduce_ [{i}]")
        assert result.data_ptr() == tensor.data_ptr()

    tensors, expected = grouped_inputs("Average", torch.float64, 91, size, rank)
    originals = [t.clone() for t in tensors]
    handle = hvd.grouped_allreduce_async(tensors, op=hvd.Average, name="grouped.async")
    results = hvd.synchronize(handle)
    for i, (result, want) in enumerate(zip(results, expected)):
        assert_equal(result, want, f"grouped_allreduce_async [{i}]")
        assert_equal(tensors[i], originals[i], "grouped_allreduce_async must not modify inputs")

    tensors, expected = grouped_inputs("Min", torch.int32, 101, size, rank)
    handle = hvd.grouped_allreduce_async_(tensors, op=hvd.Min)
    hvd.synchronize(handle)
    for i, (tensor, want) in enumerate(zip(tensors, expected)):
        assert_equal(tensor, want, f"grouped_allreduce_async_ [{i}]")


def test_grouped_allreduce_prescale_postscale(hvd):
    size, rank = hvd.size(), hvd.rank()
    tensors, expected = grouped_inputs("Sum", torch.float32, 111, size, rank)
    results = hvd.grouped_allreduce(tensors, op=hvd.Sum, prescale_factor=0.5,
                                    postscale_factor=4.0)
    for result, want in zip(results, expected):
        assert_equal(result, want * 2, "grouped_allreduce pre/post")


# ---- allgather ------------------------------------------------------------------------------


def gather_input(dtype, seed, rank, trailing):
    return rank_input((rank + 1,) + trailing, dtype, seed, rank)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_allgather(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    for i, trailing in enumerate([(), (3,), (2, 3)]):
        inputs = [gather_input(dtype, 121 + i, r, trailing) for r in range(size)]
        tensor = inputs[rank].clone()
        result = hvd.allgather(tensor, name=f"allgather.{i}")
        assert_equal(result, torch.cat(inputs), f"allgather {dtype} {trailing}")
        assert_equal(tensor, inputs[rank], "allgather must not modify its input")


def test_allgather_async(hvd):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for i, dtype in enumerate(ALL_DTYPES):
        inputs = [gather_input(dtype, 131 + i, r, (4,)) for r in range(size)]
        pending.append((torch.cat(inputs), hvd.allgather_async(inputs[rank], name=f"ag.{i}")))
    for expected, handle in pending:
        assert_equal(hvd.synchronize(handle), expected, "allgather_async")


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float16, torch.float32],
                         ids=dtype_id)
def test_grouped_allgather(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    trailings = [(), (3,), (2, 2)]
    inputs = [[gather_input(dtype, 141 + i, r, t) for r in range(size)]
              for i, t in enumerate(trailings)]
    results = hvd.grouped_allgather([per_rank[rank] for per_rank in inputs], name="gag")
    assert len(results) == len(trailings)
    for i, (result, per_rank) in enumerate(zip(results, inputs)):
        assert_equal(result, torch.cat(per_rank), f"grouped_allgather [{i}]")


# ---- broadcast ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_broadcast(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        inputs = [rank_input((3, 4), dtype, 151 + root, r) for r in range(size)]
        tensor = inputs[rank].clone()
        result = hvd.broadcast(tensor, root_rank=root, name=f"bcast.{root}")
        assert_equal(result, inputs[root], f"broadcast {dtype} from {root}")
        assert_equal(tensor, inputs[rank], "broadcast must not modify its input")

        tensor = inputs[rank].clone()
        result = hvd.broadcast_(tensor, root)
        assert_equal(tensor, inputs[root], f"broadcast_ {dtype} from {root}")
        assert result.data_ptr() == tensor.data_ptr()


def test_broadcast_async(hvd):
    size, rank = hvd.size(), hvd.rank()
    pending = []
    for i, dtype in enumerate(ALL_DTYPES):
        root = i % size
        inputs = [rank_input((5,), dtype, 161 + i, r) for r in range(size)]
        out_of_place = hvd.broadcast_async(inputs[rank], root, name=f"bcast.async.{i}")
        tensor = inputs[rank].clone()
        in_place = hvd.broadcast_async_(tensor, root, name=f"bcast.async_.{i}")
        pending.append((inputs[root], out_of_place, tensor, in_place))
    for expected, out_of_place, tensor, in_place in pending:
        assert_equal(hvd.synchronize(out_of_place), expected, "broadcast_async")
        hvd.synchronize(in_place)
        assert_equal(tensor, expected, "broadcast_async_")


# ---- alltoall -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_alltoall_equal_splits(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    inputs = [rank_input((2 * size, 3), dtype, 171, r) for r in range(size)]
    result = hvd.alltoall(inputs[rank], name="a2a.equal")
    # Without splits horovod.torch returns the tensor alone.
    assert isinstance(result, torch.Tensor)
    expected = torch.cat([inputs[r][2 * rank:2 * rank + 2] for r in range(size)])
    assert_equal(result, expected, f"alltoall {dtype}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_alltoall_splits(hvd, dtype):
    size, rank = hvd.size(), hvd.rank()
    tensor = alltoall_input(rank, size, dtype)
    expected, expected_splits = alltoall_expected(rank, size, dtype)
    for kind, splits in [("list", alltoall_splits(rank, size)),
                         ("tensor", torch.tensor(alltoall_splits(rank, size), dtype=torch.int32))]:
        result, received = hvd.alltoall(tensor, splits=splits, name=f"a2a.{kind}")
        assert_equal(result, expected, f"alltoall {dtype} splits as {kind}")
        assert isinstance(received, torch.Tensor)
        assert received.tolist() == expected_splits, f"received splits, splits as {kind}"


def test_alltoall_async(hvd):
    size, rank = hvd.size(), hvd.rank()
    tensor = alltoall_input(rank, size, torch.float32, trailing=(2, 2))
    expected, expected_splits = alltoall_expected(rank, size, torch.float32, trailing=(2, 2))
    handle = hvd.alltoall_async(tensor, splits=alltoall_splits(rank, size), name="a2a.async")
    result, received = hvd.synchronize(handle)
    assert_equal(result, expected, "alltoall_async with splits")
    assert received.tolist() == expected_splits

    inputs = [rank_input((size, 2), torch.int32, 181, r) for r in range(size)]
    handle = hvd.alltoall_async(inputs[rank], name="a2a.async.equal")
    result, received = hvd.synchronize(handle)
    assert_equal(result, torch.cat([inputs[r][rank:rank + 1] for r in range(size)]),
                 "alltoall_async without splits")
    assert received.tolist() == [1] * size


# ---- reducescatter --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter(hvd, op, dtype):
    size, rank = hvd.size(), hvd.rank()
    for i, dim0 in enumerate([3 * size, 3 * size + 1, 2 * size - 1]):
        inputs, reduced = reduce_inputs(op, (dim0, 3), dtype, 191 + i, size)
        tensor = inputs[rank].clone()
        result = hvd.reducescatter(tensor, op=getattr(hvd, op), name=f"rs.{op}.{i}")
        offset, rows = slice_of(scatter_rows(dim0, size), rank)
        assert_equal(result, reduced[offset:offset + rows], f"reducescatter {op} {dtype} {dim0}")
        assert_equal(tensor, inputs[rank], "reducescatter must not modify its input")


def test_reducescatter_default_op_scale_and_async(hvd):
    size, rank = hvd.size(), hvd.rank()
    inputs, reduced = reduce_inputs("Average", (2 * size, 5), torch.float32, 201, size)
    result = hvd.reducescatter(inputs[rank])  # horovod.torch's default op is Average
    assert_equal(result, reduced[2 * rank:2 * rank + 2], "reducescatter without op")

    inputs, reduced = reduce_inputs("Sum", (2 * size, 5), torch.float64, 202, size)
    result = hvd.reducescatter(inputs[rank], op=hvd.Sum, prescale_factor=0.5,
                               postscale_factor=0.25)
    assert_equal(result, reduced[2 * rank:2 * rank + 2] * 0.125, "reducescatter pre/post")

    handle = hvd.reducescatter_async(inputs[rank], op=hvd.Sum, name="rs.async")
    assert_equal(hvd.synchronize(handle), reduced[2 * rank:2 * rank + 2], "reducescatter_async")


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_reducescatter(hvd, op):
    size, rank = hvd.size(), hvd.rank()
    cases = [reduce_inputs(op, (dim0, 2), torch.float32, 211 + i, size)
             for i, dim0 in enumerate([size, 2 * size + 1, 3 * size])]
    results = hvd.grouped_reducescatter([c[0][rank] for c in cases], op=getattr(hvd, op),
                                        name=f"grs.{op}")
    assert len(results) == len(cases)
    for i, (result, (_, reduced)) in enumerate(zip(results, cases)):
        offset, rows = slice_of(scatter_rows(reduced.shape[0], size), rank)
        assert_equal(result, reduced[offset:offset + rows], f"grouped_reducescatter [{i}]")


# ---- join, barrier, process sets, timeline --------------------------------------------------


def test_join(hvd):
    size, rank = hvd.size(), hvd.rank()
    # Rank r has r + 1 batches: ranks that ran out have joined and contribute zeros.
    for i in range(rank + 1):
        result = hvd.allreduce(torch.full((4,), float(rank + 1)), op=hvd.Sum, name=f"join.{i}")
        expected = float(sum(r + 1 for r in range(i, size)))
        assert_equal(result, torch.full((4,), expected), f"allreduce {i} while others joined")
    last = hvd.join()
    assert isinstance(last, int)
    assert last == size - 1, "join returns the rank that joined last"
    # Everything works as before once every rank has joined.
    result = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.join")
    assert_equal(result, torch.full((3,), float(size)), "allreduce after join")


def test_barrier(hvd):
    """No rank leaves a barrier before the last one has entered it (one host: one clock)."""
    hvd.barrier()
    if hvd.rank() == 0:
        time.sleep(0.5)
    entered = time.time()
    hvd.barrier()
    left = time.time()
    entries = hvd.allgather(torch.tensor([entered], dtype=torch.float64), name="barrier.entries")
    assert left >= entries.max().item(), (
        f"left the barrier {entries.max().item() - left:.3f}s before the last rank entered it")


def test_global_process_set(hvd):
    size, rank = hvd.size(), hvd.rank()
    process_set = hvd.global_process_set
    assert isinstance(process_set, hvd.ProcessSet)
    assert process_set.size() == size
    assert process_set.rank() == rank
    assert process_set.included()
    inputs, expected = reduce_inputs("Sum", (6,), torch.float32, 221, size)
    result = hvd.allreduce(inputs[rank], op=hvd.Sum, process_set=hvd.global_process_set)
    assert_equal(result, expected, "allreduce on the global process set")
    assert callable(hvd.add_process_set)
    assert callable(hvd.remove_process_set)


def test_timeline(hvd):
    rank = hvd.rank()
    directory = tempfile.mkdtemp(prefix=f"timeline{rank}.", dir=os.environ.get("TEST_TMPDIR"))
    path = os.path.join(directory, "timeline.json")
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(16), name="timeline.tensor")
    hvd.stop_timeline()
    # Horovod writes the timeline on rank 0 (overlap may write it on every rank).
    if rank == 0:
        assert os.path.exists(path), "start_timeline/stop_timeline wrote no file"
        with open(path) as f:
            text = f.read()
        assert "timeline.tensor" in text, "the timeline does not mention the tensor reduced"
        # A Chrome trace: a JSON array of events, possibly left open at the end.
        head = text.lstrip()
        assert head.startswith("[") or head.startswith("{"), head[:80]
        try:
            json.loads(text)
        except ValueError:
            json.loads(text.rstrip().rstrip(",") + "]")
