"""Collectives on torch tensors with horovod.torch's names, arguments and results.

Every operation turns its tensors into core buffers (overlap._core), submits them to the runtime
and returns an integer handle; synchronize() waits and returns the result. Tensors the core
cannot take directly (int16, bool, non-contiguous ones, CUDA tensors under a compressor without
CUDA kernels or where the core sees no GPU) are staged through a host copy in a dtype it has, and
the result is converted back, so the Python API does not change when the core learns them.
"""

import itertools
import threading
import time

import torch

from overlap import _core
from overlap.common import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,
                            _OP_NAMES, core_reduce_op, global_process_set, process_set_id,
                            rank_prefix)
from overlap.torch.compression import Compression

_CORE_DTYPES = {
    torch.uint8: _core.UINT8, torch.int8: _core.INT8, torch.int32: _core.INT32,
    torch.int64: _core.INT64, torch.float16: _core.FLOAT16, torch.bfloat16: _core.BFLOAT16,
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64,
}
_TORCH_DTYPES = {code: dtype for dtype, code in _CORE_DTYPES.items()}
# Dtypes the core lacks travel as a wider or same-size one.
_STAGED_AS = {torch.int16: torch.int32, torch.bool: torch.uint8}



class _Op:
    """An operation in flight: its core handles, the tensors they use, and how to build the
    result once they are done."""

    __slots__ = ("handles", "keep", "finish")

    def __init__(self, handles, keep, finish):
        self.handles = handles
        self.keep = keep
        self.finish = finish


_ops = {}
_ops_lock = threading.Lock()
_handle_ids = itertools.count(1)
_noname = {}


def _register(handles, keep, finish):
    handle = next(_handle_ids)
    with _ops_lock:
        _ops[handle] = _Op(handles, keep, finish)
    return handle


def _auto_name(kind, name):
    """Unnamed operations are numbered per kind in call order, which every rank shares."""
    if name is not None:
        return str(name)
    with _ops_lock:
        n = _noname.get(kind, 0)
        _noname[kind] = n + 1
    return "%s.noname.%d" % (kind, n)


def _c_op(op):
    return core_reduce_op(op)


def _set_rank(process_set):
    """This rank's position in `process_set` (the global rank for the global set)."""
    set_id = process_set_id(process_set)
    return _core.rank() if set_id == 0 else _core.process_set_rank(set_id)


def _set_size(process_set):
    set_id = process_set_id(process_set)
    return _core.size() if set_id == 0 else _core.process_set_size(set_id)


def _native_cuda(tensor, compression_spec=None):
    """Whether the runtime takes `tensor` on its GPU as it is (NCCL, or MPI staged through pinned
    memory: OVERLAP_EXECUTOR): a CUDA tensor, a runtime built with CUDA that sees a GPU, and no
    runtime compression, or one the core runs on the GPU (the others run on host copies)."""
    if tensor.device.type != "cuda":
        return False
    spec = compression_spec or _core.setting("OVERLAP_COMPRESSION", "none") or "none"
    if spec != "none" and not _core.cuda_compresses(spec):
        return False
    return _core.cuda_device_count() > 0


def _stage(tensor, what, compression_spec=None):
    """A contiguous tensor in a core dtype that the runtime can take: the tensor itself when it
    already is one (host memory, or a CUDA tensor when _native_cuda), else a host copy.
    Refusals name the rank and the operation (`what`, e.g. "allreduce 'fc.weight'")."""
    what = "rank %d: %s" % (_core.rank(), what)
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s: sparse tensors need sparse_allreduce_async or "
                         "DistributedOptimizer(sparse_as_dense=True)" % what)
    dtype = _STAGED_AS.get(tensor.dtype, tensor.dtype)
    if dtype not in _CORE_DTYPES:
        raise ValueError("%s: tensor type %s is not supported" % (what, tensor.dtype))
    native_cuda = _native_cuda(tensor, compression_spec)
    if dtype == tensor.dtype and tensor.is_contiguous() and (
            tensor.device.type == "cpu" or native_cuda):
        return tensor
    if native_cuda:
        return tensor.detach().to(dtype).contiguous()
    return tensor.detach().to("cpu", dtype).contiguous()


def _adasum_on_host(op, src):
    """`src`, or for Adasum a host copy of a CUDA tensor: NCCL has no Adasum, so it runs on the
    host (as Horovod's without NCCL) and the result is copied back to the device."""
    if op == Adasum and src.device.type == "cuda":
        return src.detach().to("cpu").contiguous()
    return src


def cuda_built():
    """Whether the core library was built with CUDA, so that CUDA tensors go through it
    (docs/gpu.md), whatever this machine has; torch.cuda.is_available() tells that."""
    return _core.cuda_built()


def nccl_built():
    """As Horovod: the NCCL version code the core library runs CUDA tensors with (22803 for
    2.28.3), 0 when it was built without CUDA."""
    return _core.nccl_version()


def in_place_slot(name, tensor, compression_spec=None, looks_ahead=False):
    """An _core.InPlaceSlot for reducing tensors like `tensor` (contiguous; its dtype, shape and
    device) in place under `name`, with the runtime compressor `compression_spec` (and
    `looks_ahead`: the optimizer looks ahead on it, _core.gradient_flags), or None
    unless it is a floating-point tensor of a core dtype (integers are pre- and post-scaled in
    float64 by _allreduce_async, as by Horovod) that the runtime takes where it lies: host
    memory, or a CUDA tensor when _native_cuda."""
    dtype = _CORE_DTYPES.get(tensor.dtype)
    if dtype is None or not tensor.dtype.is_floating_point:
        return None
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.device.type == "cpu":
        return _core.InPlaceSlot(name, dtype, list(tensor.shape), nbytes, compression_spec,
                                 looks_ahead=looks_ahead)
    if _native_cuda(tensor, compression_spec):
        return _core.InPlaceSlot(name, dtype, list(tensor.shape), nbytes, compression_spec,
                                 _core.DEVICE_CUDA, tensor.device.index, looks_ahead)
    return None


def current_stream(device_index):
    """The raw cudaStream_t torch queues work on for `device_index` now (the stream a tensor
    just written on it was written on)."""
    return _raw_stream(device_index)


def _raw_stream_fallback(device_index):
    return torch.cuda.current_stream(device_index).cuda_stream


# torch's own accessor, without building a Stream object per call; the public one otherwise.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _raw_stream_fallback


def _int_scaled(tensor, factor):
    return (tensor.to(torch.float64) * factor).to(tensor.dtype)


def _buffer(tensor):
    if tensor.device.type == "cuda":
        # The runtime waits on the stream the tensor was written on instead of the whole device.
        stream = current_stream(tensor.device.index)
        return _core.Buffer(tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                            _CORE_DTYPES[tensor.dtype], list(tensor.shape), tensor,
                            _core.DEVICE_CUDA, tensor.device.index, stream)
    return _core.Buffer(tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                        _CORE_DTYPES[tensor.dtype], list(tensor.shape), tensor)


def _like(result, original):
    """`result` in `original`'s dtype and device (itself when they already match)."""
    if result.dtype == original.dtype and result.device == original.device:
        return result
    return result.to(original.device, original.dtype)


def _deliver(result, tensor, in_place):
    """The operation's result for the caller: written into `tensor` for the in-place variants,
    else a tensor of `tensor`'s dtype and device."""
    if in_place:
        if result is not tensor:
            tensor.copy_(result)
        return tensor
    return _like(result, tensor)


def _read_output(core_handle, src):
    """The runtime-owned result of a core handle, copied into a new tensor on `src`'s device
    (`src`: the tensor the operation was submitted with)."""
    address, dtype, shape = core_handle.output()
    out = torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=src.device)
    if src.device.type == "cuda":
        core_handle.copy_output(out.data_ptr(), out.numel() * out.element_size())
    else:
        _core.copy_bytes(out.data_ptr(), address, out.numel() * out.element_size())
    return out


# ---------------------------------------------------------------------------------------------
# Allreduce.

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                     compression_spec=None, process_set=global_process_set, gradient=False,
                     looks_ahead=False):
    """`gradient`: DistributedOptimizer's, which a delayed plan may deliver late
    (_core.allreduce; `looks_ahead`: its optimizer looks ahead on it); every other allreduce gets
    its own step's result."""
    _core.require_init("allreduce")
    set_id = process_set_id(process_set)
    c_op = _c_op(op)
    name = _auto_name("allreduce", name)
    src = _adasum_on_host(op, _stage(tensor, "allreduce '%s'" % name,
                                     compression_spec=compression_spec))
    pre, post = float(prescale_factor), float(postscale_factor)
    int_scaled = not src.dtype.is_floating_point and (pre != 1.0 or post != 1.0)
    if int_scaled:  # as Horovod: integer tensors are scaled in float64 and cast back
        src = _int_scaled(src, pre)
        pre = 1.0
    in_place = output is tensor
    dst = src if in_place else torch.empty_like(src)
    core_handle = _core.allreduce(name, _buffer(src), _buffer(dst), c_op, pre,
                                  1.0 if int_scaled else post, compression_spec, set_id, gradient,
                                  looks_ahead)

    def finish():
        return _deliver(_int_scaled(dst, post) if int_scaled else dst, tensor, in_place)

    return _register([core_handle], (tensor, src, dst), finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` across ranks (Average by default) into a new tensor; returns a
    handle for poll() and synchronize()."""
    return _allreduce_async(tensor, None, name, _op_of(op, average), prescale_factor,
                            postscale_factor, None, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, writing the result into `tensor`."""
    return _allreduce_async(tensor, tensor, name, _op_of(op, average), prescale_factor,
                            postscale_factor, None, process_set)


def _op_of(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("the op parameter supersedes average; give only one of them")
        return Average if average else Sum
    return Average if op is None else op


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce with a gradient: the gradient is reduced with the same op and factors."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, compression_spec,
                process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        # A named forward gives its gradient a fixed name too, so that a step repeats the same
        # tensors (the runtime's plan needs that); unnamed ones stay numbered as in Horovod.
        ctx.grad_name = None if name is None else str(name) + ".grad"
        return synchronize(_allreduce_async(tensor, None, name, op, prescale_factor,
                                            postscale_factor, compression_spec, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, ctx.grad_name, op,
                                            prescale_factor, postscale_factor, None,
                                            process_set))
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across ranks (Average by default) and returns the result; differentiable.
    `compression` may be a Horovod-style compressor (cast around the call) or one of overlap's
    error-feedback compressors (run by the runtime)."""
    op = _op_of(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                     compression.runtime_spec, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             compression_spec=None, process_set=global_process_set):
    _core.require_init("grouped_allreduce")
    set_id = process_set_id(process_set)
    if not tensors:
        raise ValueError("grouped_allreduce: empty list of tensors")
    c_op = _c_op(op)
    base = _auto_name("grouped_allreduce", name)
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    srcs = [_adasum_on_host(op, _stage(t, "grouped allreduce '%s'" % n,
                                       compression_spec=compression_spec))
            for t, n in zip(tensors, names)]
    in_place = outputs is tensors
    dsts = srcs if in_place else [torch.empty_like(s) for s in srcs]
    core_handle = _core.grouped_allreduce(names, [_buffer(s) for s in srcs],
                                          [_buffer(d) for d in dsts], c_op,
                                          float(prescale_factor), float(postscale_factor),
                                          compression_spec, set_id)

    def finish():
        return [_deliver(d, t, in_place) for d, t in zip(dsts, tensors)]

    return _register([core_handle], (list(tensors), srcs, dsts), finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(list(tensors), None, name, _op_of(op, average),
                                    prescale_factor, postscale_factor, None, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    tensors = list(tensors)
    return _grouped_allreduce_async(tensors, tensors, name, _op_of(op, average), prescale_factor,
                                    postscale_factor, None, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, compression_spec, process_set,
                *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(_grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, compression_spec,
            process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale_factor, postscale_factor, process_set = ctx.args
        reduced = synchronize(_grouped_allreduce_async(
            [g.contiguous() for g in grads], None, None, op, prescale_factor, postscale_factor,
            None, process_set))
        return (None, None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one fused unit; differentiable."""
    op = _op_of(op, average)
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                            compression.runtime_spec, process_set,
                                            *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse tensor by allgathering its indices and values. As in Horovod, returns a
    callable that waits and returns the coalesced sparse result (summed, then divided by size()
    for Average)."""
    _core.require_init("sparse_allreduce_async")
    if op not in (Average, Sum):
        raise ValueError("rank %d: sparse_allreduce_async '%s': op must be Average or Sum, got %s"
                         % (_core.rank(), name, _OP_NAMES.get(op, op)))
    t = tensor.coalesce()
    base = _auto_name("sparse_allreduce", name)
    h_values = _allgather_async(t._values().contiguous(), base + ".values", process_set)
    h_indices = _allgather_async(t._indices().t().contiguous(), base + ".indices", process_set)
    shape, divisor = t.shape, (_set_size(process_set) if op == Average else 1)

    def finish():
        values = synchronize(h_values)
        indices = synchronize(h_indices).t()
        try:
            out = torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)
        except TypeError:  # torch < 2.0 has no check_invariants
            out = torch.sparse_coo_tensor(indices, values, shape)
        out = out.coalesce()
        return out / divisor if divisor != 1 else out

    return finish


# ---------------------------------------------------------------------------------------------
# Allgather, broadcast, alltoall, reducescatter.

def _allgather_async(tensor, name, process_set=global_process_set):
    _core.require_init("allgather")
    set_id = process_set_id(process_set)
    name = _auto_name("allgather", name)
    src = _stage(tensor, "allgather '%s'" % name)
    if src.dim() == 0:
        raise ValueError("rank %d: allgather '%s': needs at least one dimension (got a scalar)"
                         % (_core.rank(), name))
    core_handle = _core.allgather(name, _buffer(src), set_id)
    return _register([core_handle], (tensor, src),
                     lambda: _like(_read_output(core_handle, src), tensor))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0, in rank order."""
    return _allgather_async(tensor, name, process_set)


class HorovodAllgather(torch.autograd.Function):
    """Allgather with a gradient: the rows that came from this rank of the gradient averaged
    over ranks (Horovod 0.28's definition)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        handle = _allgather_async(tensor, name, process_set)  # refuses a scalar by name
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, None, Average, 1.0,
                                            1.0, None, ctx.process_set))
        dims = synchronize(_allgather_async(torch.tensor([ctx.dim], dtype=torch.int64), None,
                                            ctx.process_set))
        offset = int(dims[:_set_rank(ctx.process_set)].sum())
        return grad.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along dimension 0 (first dimensions may differ);
    differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    base = _auto_name("grouped_allgather", name)
    handles = [_allgather_async(t, "%s.%d" % (base, i), process_set)
               for i, t in enumerate(tensors)]
    return _register([], (), lambda: [synchronize(h) for h in handles])


class HorovodGroupedAllgather(torch.autograd.Function):
    """Allgather of several tensors at once, each with HorovodAllgather's gradient."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = synchronize(_grouped_allreduce_async(
            [g.contiguous() for g in grads], None, None, Average, 1.0, 1.0, None,
            ctx.process_set))
        dims = synchronize(_allgather_async(torch.tensor([ctx.dims], dtype=torch.int64), None,
                                            ctx.process_set))
        set_rank = _set_rank(ctx.process_set)
        offsets = dims[:set_rank].sum(0).tolist() if set_rank else [0] * len(ctx.dims)
        return (None, None) + tuple(g.narrow(0, int(o), d)
                                    for g, o, d in zip(reduced, offsets, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor, submitted together; differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


def _broadcast_async(tensor, output, root_rank, name, process_set=global_process_set):
    _core.require_init("broadcast")
    set_id = process_set_id(process_set)
    name = _auto_name("broadcast", name)
    src = _stage(tensor, "broadcast '%s'" % name)
    in_place = output is tensor
    dst = src if in_place else torch.empty_like(src)
    core_handle = _core.broadcast(name, _buffer(src), _buffer(dst), int(root_rank), set_id)

    def finish():
        return _deliver(dst, tensor, in_place)

    return _register([core_handle], (tensor, src, dst), finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's `tensor` into a new tensor on every rank."""
    return _broadcast_async(tensor, None, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast with a gradient: the gradient averaged over ranks on the root, zero elsewhere
    (Horovod 0.28's definition)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, None, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(_allreduce_async(grad_output.contiguous(), None, None, Average, 1.0,
                                            1.0, None, ctx.process_set))
        if _core.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows of `tensor` to rank r (equal parts when splits is None);
    synchronize() returns (received tensor, received splits)."""
    _core.require_init("alltoall")
    set_id = process_set_id(process_set)
    name = _auto_name("alltoall", name)
    src = _stage(tensor, "alltoall '%s'" % name)
    core_handle = _core.alltoall(name, _buffer(src), _splits_list(splits), set_id)

    def finish():
        received = torch.tensor(core_handle.received_splits(), dtype=torch.int32)
        return _like(_read_output(core_handle, src), tensor), received

    return _register([core_handle], (tensor, src), finish)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall with a gradient: the gradient rows go back to where they came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, grad_splits):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received, None,
                                             ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent here, concatenated in rank order; with `splits` given, also the
    received splits (as horovod.torch). Differentiable in the tensor."""
    output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


def _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                         process_set=global_process_set):
    _core.require_init("reducescatter")
    set_id = process_set_id(process_set)
    c_op = _c_op(op)
    name = _auto_name("reducescatter", name)
    if op == Adasum:  # NotImplementedError, a RuntimeError, as Horovod's tests expect
        raise NotImplementedError("rank %d: reducescatter '%s': Adasum is an allreduce only"
                                  % (_core.rank(), name))
    src = _stage(tensor, "reducescatter '%s'" % name)
    if src.dim() == 0:
        raise ValueError("rank %d: reducescatter '%s': needs at least one dimension" %
                         (_core.rank(), name))
    pre, post = float(prescale_factor), float(postscale_factor)
    int_scaled = not src.dtype.is_floating_point and (pre != 1.0 or post != 1.0)
    if int_scaled:  # as Horovod: integer tensors are scaled in float64 and cast back
        src = _int_scaled(src, pre)
    core_handle = _core.reducescatter(name, _buffer(src), c_op, 1.0 if int_scaled else pre,
                                      1.0 if int_scaled else post, set_id)

    def finish():
        out = _read_output(core_handle, src)
        return _like(_int_scaled(out, post) if int_scaled else out, tensor)

    return _register([core_handle], (tensor, src), finish)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` and leaves this rank its share of dimension 0 (earlier ranks get
    one more row when it does not divide evenly)."""
    return _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor, process_set)


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter with a gradient, as Horovod 0.28 defines it (gradients of a loss averaged
    over ranks): the gathered gradient, times size() for Sum."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        return synchronize(_reducescatter_async(tensor, name, op, prescale_factor,
                                                postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(_allgather_async(grad_output.contiguous(), None, ctx.process_set))
        if ctx.op == Sum:
            grad = grad * _set_size(ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                     postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    base = _auto_name("grouped_reducescatter", name)
    handles = [_reducescatter_async(t, "%s.%d" % (base, i), op, prescale_factor,
                                    postscale_factor, process_set)
               for i, t in enumerate(tensors)]
    return _register([], (), lambda: [synchronize(h) for h in handles])


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Reducescatter of several tensors at once, each with HorovodReducescatter's gradient."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        gathered = synchronize(grouped_allgather_async([g.contiguous() for g in grads], None,
                                                       ctx.process_set))
        if ctx.op == Sum:
            size = _set_size(ctx.process_set)
            gathered = [g * size for g in gathered]
        return (None, None, None, None, None) + tuple(gathered)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor, submitted together; differentiable."""
    compressed = [compression.compress(t) for t in tensors]
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                             postscale_factor, *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]


# ---------------------------------------------------------------------------------------------
# Handles, barrier, join.

def poll(handle):
    """True once the operation behind `handle` finished (successfully or not)."""
    with _ops_lock:
        op = _ops.get(handle)
    if op is None:
        raise ValueError("%spoll: unknown handle %r (already synchronized?)"
                         % (rank_prefix(), handle))
    return all(h.poll() for h in op.handles)


def _forget(handle):
    with _ops_lock:
        _ops.pop(handle, None)


def synchronize(handle):
    """Waits for the operation behind `handle` and returns its result; raises
    HorovodInternalError (a RuntimeError) naming the rank, tensor and cause if it failed."""
    return _synchronize(handle)[0]


def _synchronize(handle):
    """synchronize(), and whether the result holds an update: False only when a delayed plan
    (planner deft with staleness > 0) had nothing for this allreduce this step, and the result
    is zeros."""
    with _ops_lock:
        op = _ops.get(handle)
    if op is None:
        raise ValueError("%ssynchronize: unknown handle %r (already synchronized?)"
                         % (rank_prefix(), handle))
    # The entry holds the only references to the tensors the runtime reads and writes until the
    # operation ends: it goes once the wait has an outcome. An interrupted wait (Ctrl-C, a
    # signal handler's exception, a test timeout) leaves it in place, so that the memory stays
    # valid and synchronize(handle) can be called again.
    try:
        for h in op.handles:
            h.wait()
    except HorovodInternalError:
        if all(h.poll() for h in op.handles):  # a part still running keeps its tensors
            _forget(handle)
        raise
    _forget(handle)
    updated = not op.handles or any(h.has_update() for h in op.handles)
    return op.finish(), updated


def barrier(process_set=global_process_set):
    """Returns when every rank of `process_set` (by default all) has called barrier()."""
    _core.require_init("barrier")
    _core.barrier(process_set_id(process_set)).wait()


def join(device=-1):
    """For ranks with uneven data: keeps contributing zeros to the other ranks' allreduces until
    every rank has joined. Returns the rank that joined last: the one whose join() call has the
    latest wall-clock time (the highest such rank on a tie). A rank with more batches cannot
    finish its extra allreduces before the others have joined, so on one host the order is
    exact; across hosts it relies on their clocks being synchronised."""
    _core.require_init("join")
    called = time.time()
    _core.join().wait()
    stamps = synchronize(_allgather_async(torch.tensor([called], dtype=torch.float64),
                                          "__join.called"))
    latest = float(stamps.max())
    return max(r for r, t in enumerate(stamps.tolist()) if t == latest)
