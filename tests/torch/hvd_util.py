"""Helpers shared by the overlap.torch suites.

Every rank can compute every other rank's input, because inputs come from generators seeded
with (test seed, rank): the references are computed locally from those, never by trusting the
collective under test. Values are small integers, so sums, averages over 2 or 4 ranks and
products are exact in every dtype, float16 and bfloat16 included.
"""

import torch

INT_DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES
# Dtypes autograd works with (and the ones Horovod tests gradients for).
GRAD_DTYPES = [torch.float32, torch.float64]


def generator(seed, rank=0):
    g = torch.Generator()
    g.manual_seed(1000003 * seed + 7919 * rank + 17)
    return g


def ints(shape, low, high, dtype, seed, rank=0):
    """Integers in [low, high) as `dtype`, the same on every rank for the same (seed, rank)."""
    values = torch.randint(low, high, tuple(shape), generator=generator(seed, rank))
    return values.to(dtype)


def floats(shape, seed, rank=0, dtype=torch.float64):
    """Uniform values in [-1, 1), for gradients and models."""
    values = torch.rand(tuple(shape), generator=generator(seed, rank), dtype=torch.float64)
    return (values * 2 - 1).to(dtype)


def rank_input(shape, dtype, seed, rank):
    """A rank's input for Sum/Min/Max: values in [0, 8) for unsigned types, [-8, 8) otherwise."""
    low = 0 if dtype == torch.uint8 else -8
    return ints(shape, low, 8, dtype, seed, rank)


def product_input(shape, dtype, seed, rank):
    """A rank's input for Product: values in {1, 2} (and -1 for signed types)."""
    values = ints(shape, 0, 3 if dtype != torch.uint8 else 2, torch.int64, seed, rank) + 1
    if dtype != torch.uint8:
        values = torch.where(values == 3, torch.full_like(values, -1), values)
    return values.to(dtype)


def average_input(shape, dtype, seed, rank, size):
    """Inputs whose sum over the ranks is size * base exactly, so the average is `base` in
    every dtype, integers included (no rounding rule of integer division is involved)."""
    base = ints(shape, 6, 20, torch.int64, seed)
    step = ints(shape, 0, 2, torch.int64, seed + 1)
    offset = 2 * rank - (size - 1)  # sums to zero over the ranks
    return (base + offset * step).to(dtype), base.to(dtype)


def wide(t):
    """The tensor in a dtype where comparisons and arithmetic are exact for the test values."""
    return t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64)


def assert_equal(actual, expected, what=""):
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
    assert torch.equal(wide(actual), wide(expected)), (
        f"{what}: max difference {(wide(actual) - wide(expected)).abs().max().item()}\n"
        f"actual:   {actual.flatten()[:8].tolist()}\nexpected: {expected.flatten()[:8].tolist()}")


def assert_close(actual, expected, what="", rtol=1e-5, atol=1e-6):
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    assert torch.allclose(a, e, rtol=rtol, atol=atol), (
        f"{what}: max difference {(a - e).abs().max().item()}")


def row_counts(size):
    """A different first dimension on each rank: rank r has r + 1 rows."""
    return [r + 1 for r in range(size)]


def scatter_rows(dim0, size):
    """Rows each rank keeps after a reducescatter of `dim0` rows: earlier ranks get one more
    when dim0 does not divide (as Horovod)."""
    q, m = divmod(dim0, size)
    return [q + (1 if r < m else 0) for r in range(size)]


def slice_of(rows, rank):
    """(offset, length) of `rank`'s block when blocks of `rows` rows are concatenated."""
    return sum(rows[:rank]), rows[rank]


def alltoall_splits(sender, size):
    """Rows `sender` sends to each rank in the uneven alltoall tests (zeros included)."""
    return [(sender + 2 * receiver) % 3 for receiver in range(size)]


def alltoall_input(sender, size, dtype, trailing=(3,)):
    """Rows that say who sent them to whom: row value = 100 * sender + 10 * receiver + index,
    kept below 128 for int8/uint8 by wrapping into a small range."""
    rows = []
    for receiver, count in enumerate(alltoall_splits(sender, size)):
        for i in range(count):
            value = (31 * sender + 7 * receiver + i) % 100
            rows.append(torch.full(trailing, value, dtype=torch.int64))
    if not rows:
        return torch.zeros((0,) + tuple(trailing), dtype=dtype)
    return torch.stack(rows).to(dtype)


def alltoall_expected(receiver, size, dtype, trailing=(3,)):
    """What `receiver` gets from the uneven alltoall: each sender's block for it, in rank order."""
    blocks, splits = [], []
    for sender in range(size):
        counts = alltoall_splits(sender, size)
        offset = sum(counts[:receiver])
        blocks.append(alltoall_input(sender, size, dtype, trailing)[offset:offset + counts[receiver]])
        splits.append(counts[receiver])
    return torch.cat(blocks), splits


def mlp(seed=0):
    """The small MLP the update-at-forward and torch.compile suites train: three Linear layers with
    Tanh between them, 6 inputs and 3 outputs, its weights seeded alike on every rank."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 48),
                               torch.nn.Tanh(), torch.nn.Linear(48, 3))


def mlp_batch(hvd, step, size=4):
    """Step `step`'s (input, target) for mlp() on this rank, as float32."""
    return (floats((size, 6), 100 + step, hvd.rank()).float(),
            floats((size, 3), 200 + step, hvd.rank()).float())
