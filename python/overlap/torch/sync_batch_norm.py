"""SyncBatchNorm: batch normalization with statistics over the whole global batch.

Training-mode statistics are sums allreduced across ranks through the differentiable allreduce,
so backward sends the gradients of those sums back across ranks by the same route, and the
result equals torch's BatchNorm on the concatenated batch.
"""

import itertools

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from overlap.common import Sum
from overlap.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d whose batch statistics span every rank."""

    _instances = itertools.count()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Every rank builds its modules in the same order, so the count names the same layer on
        # every rank; a fixed name lets the runtime recognise the step and plan it.
        self._stats_name = "sync_batch_norm.%d.stats" % next(SyncBatchNorm._instances)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not (self.training or not self.track_running_stats):
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, False, 0.0, self.eps)
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
        momentum = self.momentum
        if momentum is None:
            momentum = 1.0 / float(self.num_batches_tracked)
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        x = input.to(torch.float64) if input.dtype in (torch.float16, torch.bfloat16) else input
        local_count = torch.tensor([x.numel() / channels], dtype=x.dtype)
        stats = torch.cat([local_count, x.sum(dims), (x * x).sum(dims)])
        total = mpi_ops.allreduce(stats, op=Sum, name=self._stats_name)
        count = total[0]
        mean = total[1:1 + channels] / count
        var = total[1 + channels:] / count - mean * mean
        if self.training and self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (count / max(float(count) - 1.0, 1.0))
                self.running_mean.mul_(1 - momentum).add_(momentum * mean.to(self.running_mean))
                self.running_var.mul_(1 - momentum).add_(momentum * unbiased.to(self.running_var))
        shape = [1, channels] + [1] * (input.dim() - 2)
        y = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(input.dtype)
