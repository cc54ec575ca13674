"""SyncBatchNorm: batch normalization with statistics over the whole global batch, or over the
batches of a process set's members.

Training-mode statistics are sums allreduced across ranks through the differentiable allreduce,
so backward sends the gradients of those sums back across ranks by the same route, and the
result equals torch's BatchNorm on the concatenated batch of the ranks taking part.
"""

import itertools

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from overlap.common import Sum, global_process_set, process_set_id
from overlap.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d whose batch statistics span every rank, or the
    members of `process_set` (a registered hvd.ProcessSet; each rank may pass its own, e.g. the
    set of its half of the job). On a rank outside `process_set` the statistics are this rank's
    batch alone (plain BatchNorm), as overlap's DistributedOptimizer keeps local gradients
    outside its set. horovod.torch 0.28's SyncBatchNorm has no process_set argument."""

    _instances = itertools.count()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set, **kwargs):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, **kwargs)
        self.process_set = process_set
        # Every rank builds its modules in the same order, so the count names the same layer on
        # every rank; a fixed name lets the runtime recognise the step and plan it.
        self._stats_name = "sync_batch_norm.%d.stats" % next(SyncBatchNorm._instances)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def _reduce(self, stats):
        """The sum of `stats` over the ranks taking part: every rank of the set, or this rank
        alone outside it. An unregistered set raises ValueError naming this rank."""
        set_id = process_set_id(self.process_set)
        if set_id != 0 and not self.process_set.included():
            return stats
        return mpi_ops.allreduce(stats, op=Sum, name=self._stats_name,
                                 process_set=self.process_set)

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
        total = self._reduce(stats)
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
