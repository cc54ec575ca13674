"""DistributedOptimizer(op=hvd.Adasum): Adasum applied to each rank's update, as Horovod does.

Adasum (collectives/adasum.h) combines vectors by how much they agree, so it should see what
each rank would do to its parameters, not the raw gradients: the optimizer's own rule (momentum,
Adam's scaling, weight decay) is part of the step being combined. As horovod.torch's Adasum
optimizer documents, each rank therefore runs the wrapped optimizer on its own gradient, takes
the change it made to a parameter (the delta), and the ranks Adasum-reduce the deltas; every
rank then adds the reduced delta to the parameter as it was before the local step. The local
step of a parameter runs in its gradient hook, as soon as backward has accumulated the gradient
(backward_passes_per_step times), so the reduction overlaps the rest of backward; step() waits
for the reductions and applies them. The optimizer's state (momentum, Adam moments) is each
rank's own, as in Horovod.

The wrapper is the user's optimizer object itself, re-classed, as overlap's other optimizers.
"""

import torch

from overlap import _core
from overlap.common import Adasum, RuntimeCompressor, global_process_set, process_set_id
from overlap.torch import layerwise, mpi_ops


def _here(message):
    return "rank %d: DistributedOptimizer(op=Adasum): %s" % (_core.rank(), message)


class _AdasumOptimizer:
    def _adasum_setup(self, names, compression, backward_passes_per_step, process_set):
        if isinstance(compression, RuntimeCompressor):
            raise ValueError(_here("overlap's runtime compressors (%s) reduce sums and averages, "
                                   "not Adasum; use Compression.none or Compression.fp16"
                                   % compression.runtime_spec))
        if backward_passes_per_step < 1:
            raise ValueError(_here("backward_passes_per_step must be >= 1, got %r" %
                                   (backward_passes_per_step,)))
        process_set_id(process_set)  # refuses an unregistered set by name
        self._compression = compression
        self._process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step
        # As Horovod: {parameter: the name its delta is reduced under}.
        self._parameter_names = names
        self._requires_update = [p for group in self.param_groups for p in group["params"]
                                 if p.requires_grad]
        self._passes_left = {p: backward_passes_per_step for p in self._requires_update}
        self._pending = {}  # parameter -> (handle, the delta being reduced, compression ctx)
        # A rank outside the process set steps on its own gradients, as in Horovod.
        self._included = process_set is None or bool(process_set.included())
        self._hook_handles = []
        if self._included:
            for p in self._requires_update:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(lambda q: self._on_grad(q)))

    def _on_grad(self, p):
        if p in self._pending:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before call "
                "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
        self._passes_left[p] -= 1
        if self._passes_left[p] == 0:
            self._launch(p)

    def _launch(self, p):
        """Runs the wrapped optimizer on `p` alone, moves its change into a delta (p keeps its
        value from before the step) and starts the delta's Adasum reduction."""
        if p.grad is None:  # not used on this rank; other ranks may have: a zero gradient
            p.grad = torch.zeros_like(p)
        start = p.detach().clone()
        base = super(_AdasumOptimizer, self)
        layerwise.step_subset(self.param_groups, base.step, {p: p.grad},
                              [{} for _ in self.param_groups])
        with torch.no_grad():
            delta = p.detach() - start
            p.copy_(start)
        compressed, ctx = self._compression.compress(delta)
        compressed = compressed.contiguous()
        handle = mpi_ops.allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum,
                                          process_set=self._process_set)
        self._pending[p] = (handle, compressed, ctx)

    def synchronize(self):
        """Nothing to do: step() waits for the reductions (as Horovod's Adasum optimizer)."""

    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        """Waits for every parameter's reduced delta and adds it to the parameter. Parameters
        whose gradient backward has not produced (backward_passes_per_step times) take their
        local step now."""
        if not self._included:
            return super(_AdasumOptimizer, self).step(closure)
        loss = closure() if closure is not None else None
        for p in self._requires_update:
            if p not in self._pending:
                self._launch(p)
        try:
            for p, (handle, _, ctx) in self._pending.items():
                reduced = self._compression.decompress(mpi_ops.synchronize(handle), ctx)
                with torch.no_grad():
                    p.add_(reduced.to(p.dtype))
        finally:
            self._pending.clear()
            for p in self._requires_update:
                self._passes_left[p] = self.backward_passes_per_step
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._pending:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(_AdasumOptimizer, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._requires_update:
            self._passes_left[p] = passes


def wrap(optimizer, names, compression, backward_passes_per_step,
         process_set=global_process_set):
    """Re-classes `optimizer` as an Adasum optimizer; `names`: {parameter: reduction name}."""
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        raise ValueError(_here("needs torch >= 2.1 (register_post_accumulate_grad_hook)"))
    ranks = mpi_ops._set_size(process_set)
    if ranks & (ranks - 1):
        raise ValueError(_here("Adasum needs a power-of-two number of ranks, and this job has %d"
                               % ranks))
    base = optimizer.__class__
    optimizer.__class__ = type(base.__name__, (_AdasumOptimizer, base), {})
    try:
        optimizer._adasum_setup(names, compression, backward_passes_per_step, process_set)
    except Exception:
        optimizer.__class__ = base
        raise
    return optimizer
