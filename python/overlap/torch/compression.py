"""Gradient compression for overlap.torch, with horovod.torch's Compression interface.

Compression.none and Compression.fp16 behave as in Horovod: the tensor is cast before the
allreduce and cast back after it, with no memory of what the cast lost. The other compressors run
inside the runtime with error feedback (docs/compression.md): what a step does not send stays in
a per-tensor residual and goes out later, so no gradient mass is lost.
"""

import torch


class Compressor:
    """Interface: compress before the collective, decompress after it. `runtime_spec` names a
    compressor the runtime applies (with error feedback) instead; None for Python-side ones."""

    runtime_spec = None

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and come back in their own dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.type(ctx)


class RuntimeCompressor(Compressor):
    """A runtime compressor with error feedback, named by its spec string ("topk:ratio=0.01").
    Applies to float32 gradients reduced with Sum or Average; the runtime checks the spec."""

    def __init__(self, spec):
        self.runtime_spec = spec

    def compress(self, tensor):
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor

    def __repr__(self):
        return "RuntimeCompressor(%r)" % self.runtime_spec


def _spec(name, **params):
    given = ",".join("%s=%s" % (k, v) for k, v in params.items() if v is not None)
    return RuntimeCompressor(name + (":" + given if given else ""))


class Compression:
    """Optional gradient compression, as horovod.torch.Compression, plus overlap's compressors."""

    none = NoneCompressor
    fp16 = FP16Compressor

    # Error-feedback compressors run by the runtime (docs/compression.md has the parameters).
    @staticmethod
    def runtime(spec):
        return RuntimeCompressor(spec)

    @staticmethod
    def fp16_ef():
        return _spec("fp16")

    @staticmethod
    def bf16():
        return _spec("bf16")

    @staticmethod
    def topk(ratio=None, k=None, method=None):
        return _spec("topk", ratio=ratio, k=k, method=method)

    @staticmethod
    def randomk(ratio=None, k=None, seed=None):
        return _spec("randomk", ratio=ratio, k=k, seed=seed)

    @staticmethod
    def covap(R=None):
        return _spec("covap", R=R)

    @staticmethod
    def onebit():
        return _spec("efsign")

    @staticmethod
    def powersgd(rank=None):
        return _spec("powersgd", rank=rank)
