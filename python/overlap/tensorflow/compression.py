"""Gradient compression for overlap.tensorflow, with horovod.tensorflow's Compression interface.

Compression.none and Compression.fp16 behave as in Horovod: the tensor is cast before the
collective and cast back after it, with no memory of what the cast lost. overlap's other
compressors (common.RuntimeCompressors) run inside the runtime with error feedback
(docs/compression.md): the op carries their spec and the runtime keeps what a step did not send.
"""

import tensorflow as tf

from overlap.common import (  # noqa: F401 (re-exported)
    Compressor, NoneCompressor, RuntimeCompressor, RuntimeCompressors)


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and come back in their own dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression(RuntimeCompressors):
    """Optional gradient compression, as horovod.tensorflow.Compression, plus overlap's
    error-feedback compressors (topk, covap, randomk, bf16, fp16_ef, onebit, powersgd, runtime)."""

    none = NoneCompressor
    fp16 = FP16Compressor
