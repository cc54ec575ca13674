"""Gradient compression for overlap.torch, with horovod.torch's Compression interface.

Compression.none and Compression.fp16 behave as in Horovod: the tensor is cast before the
allreduce and cast back after it, with no memory of what the cast lost. The other compressors run
inside the runtime with error feedback (docs/compression.md): what a step does not send stays in
a per-tensor residual and goes out later, so no gradient mass is lost.
"""

import torch

from overlap.common import (  # noqa: F401 (re-exported)
    Compressor, NoneCompressor, RuntimeCompressor, RuntimeCompressors)


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


class Compression(RuntimeCompressors):
    """Optional gradient compression, as horovod.torch.Compression, plus overlap's error-feedback
    compressors (common.RuntimeCompressors: topk, covap, randomk, bf16, fp16_ef, onebit, powersgd,
    runtime)."""

    none = NoneCompressor
    fp16 = FP16Compressor
