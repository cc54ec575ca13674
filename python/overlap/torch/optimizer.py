"""DistributedOptimizer: horovod.torch's optimizer wrapper on overlap's runtime.

Each parameter's gradient is submitted for reduction from a hook the moment backward has
accumulated it, so communication overlaps the rest of backward; step() waits for all of them and
then runs the wrapped optimizer. The wrapper is the user's optimizer object itself, re-classed,
so its state, param_groups and isinstance checks are unchanged.
"""

import contextlib
import warnings

import torch

from overlap import _core
from overlap.common import Adasum, Average, global_process_set, process_set_id
from overlap.torch import mpi_ops, step_markers
from overlap.torch.compression import Compression


def _here(message):
    """A refusal of DistributedOptimizer's arguments, naming this rank."""
    return "rank %d: DistributedOptimizer: %s" % (_core.rank(), message)


class _DistributedOptimizer:
    def _overlap_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set):
        if op == Adasum:
            raise ValueError("rank %d: overlap does not implement Adasum; use op=hvd.Average or "
                             "hvd.Sum" % _core.rank())
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError(_here("gradient_predivide_factor not supported with op != Average"))
        if backward_passes_per_step < 1:
            raise ValueError(_here("backward_passes_per_step must be >= 1, got %r" %
                                   (backward_passes_per_step,)))
        process_set_id(process_set)  # refuses an unregistered set by name
        self._compression = compression
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        # As Horovod: a rank outside the process set reduces nothing and steps on its own
        # gradients.
        self._included = process_set is None or bool(process_set.included())
        self.backward_passes_per_step = backward_passes_per_step

        params = [p for group in self.param_groups for p in group["params"]]
        self._names = self._parameter_names(named_parameters, params)
        self._requires_update = [p for p in params if p.requires_grad]
        self._groups = self._parameter_groups(groups, params)
        # Each group's trainable members in parameter order, fixed for the optimizer's life.
        self._group_members = {}
        for p in self._requires_update:
            if p in self._groups:
                self._group_members.setdefault(self._groups[p], []).append(p)

        self._handles = {}          # param -> (handle, ctx) or a group's shared entry
        self._group_ready = {}      # group index -> params whose gradient is in
        self._passes_left = {p: backward_passes_per_step for p in self._requires_update}
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        self._markers = step_markers.install()
        if self._included:
            self._register_hooks()

    # -- setup ------------------------------------------------------------------------------

    @staticmethod
    def _parameter_names(named_parameters, params):
        if named_parameters is None:
            # Not "allreduce.noname.N": unnamed hvd.allreduce calls are numbered that way, and a
            # gradient must never share a name with one of them.
            return {p: "allreduce.gradient.noname.%d" % i for i, p in enumerate(params)}
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise ValueError(_here("named_parameters should be a sequence of (name, parameter) "
                                   "tuples, usually produced by model.named_parameters()"))
        names = [n for n, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(_here("parameter names in named_parameters must be unique; "
                                   "duplicates: %s" % ", ".join(duplicates)))
        by_param = {p: n for n, p in named}
        unnamed = [p for p in params if p not in by_param]
        if unnamed:
            raise ValueError(_here("named_parameters was specified, but %d of the optimizer's "
                                   "parameters were not named (pass model.named_parameters() of "
                                   "the model the optimizer trains)" % len(unnamed)))
        return {p: "allreduce." + by_param[p] for p in params}

    def _parameter_groups(self, groups, params):
        """param -> group index for parameters reduced together, from an int (that many groups
        of consecutive parameters) or a list of parameter lists."""
        if groups is None:
            return {}
        trainable = [p for p in params if p.requires_grad]
        if isinstance(groups, int):
            if groups < 1:
                raise ValueError(_here("groups must be a positive int or a list of parameter "
                                       "lists"))
            per = -(-len(trainable) // groups) if trainable else 1
            return {p: i // per for i, p in enumerate(trainable)}
        mapping = {}
        for index, group in enumerate(groups):
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(_here("groups must hold lists of parameters "
                                           "(torch.Tensor)"))
                if p in mapping:
                    raise ValueError(_here("a parameter appears in two groups"))
                mapping[p] = index
        return mapping

    def _register_hooks(self):
        for p in self._requires_update:
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hook_handles.append(p.register_post_accumulate_grad_hook(self._on_grad))
            else:  # torch < 2.1: hook the gradient accumulator
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(
                    accumulator.register_hook(lambda *_, p=p: self._on_grad(p)))
                self._hook_handles.append(accumulator)  # keeps it alive

    # -- per-gradient work ------------------------------------------------------------------

    def _on_grad(self, p):
        self._markers.on_gradient()
        if p in self._handles and self._handles[p] is not None:
            if self._passes_left[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
        self._passes_left[p] -= 1
        if self._passes_left[p] > 0:
            self._handles.setdefault(p, None)
            return
        if p in self._groups:
            self._on_group_member(p)
        else:
            self._handles[p] = self._reduce_async(p)

    def _prepared_grad(self, p):
        if p.grad is None:
            # This rank did not use the parameter; other ranks may have: reduce zeros.
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            if self._sparse_as_dense:
                p.grad = p.grad.to_dense()
            else:
                return None
        return p.grad

    def _factors(self):
        if self._op == Average:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _reduce_async(self, p):
        grad = self._prepared_grad(p)
        name = self._names[p]
        if grad is None:
            return ("sparse", mpi_ops.sparse_allreduce_async(p.grad, name, self._op,
                                                             self._process_set), None)
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._factors()
        handle = mpi_ops._allreduce_async(compressed, compressed, name, self._op, pre, post,
                                          self._compression.runtime_spec, self._process_set)
        return ("dense", handle, (compressed, ctx))

    def _on_group_member(self, p):
        index = self._groups[p]
        ready = self._group_ready.setdefault(index, [])
        ready.append(p)
        self._handles[p] = None
        if len(ready) == len(self._group_members[index]):
            self._launch_group(index)

    def _launch_group(self, index):
        members = self._group_members[index]
        grads = [self._prepared_grad(q) for q in members]
        if any(g is None for g in grads):
            for q in members:  # sparse members go one by one
                self._handles[q] = self._reduce_async(q)
            return
        compressed = [self._compression.compress(g) for g in grads]
        tensors = [c for c, _ in compressed]
        pre, post = self._factors()
        handle = mpi_ops._grouped_allreduce_async(
            tensors, tensors, "grouped.%s" % self._names[members[0]], self._op, pre, post,
            self._compression.runtime_spec, self._process_set)
        entry = ("group", handle, (members, compressed))
        for q in members:
            self._handles[q] = entry
        self._group_ready[index] = []

    # -- step ---------------------------------------------------------------------------------

    def synchronize(self):
        """Waits for every gradient's reduction and writes the results into p.grad. Gradients
        that backward never produced on this rank are reduced now (as zeros). Under a delayed
        plan (planner deft with staleness > 0) p.grad receives the average of an earlier step,
        and is set to None in the steps that bring a parameter no update, so that step()
        skips it."""
        self._markers.on_update()
        if not self._included:
            self._synchronized = True
            return
        for p in self._requires_update:
            if self._handles.get(p) is None:
                if p in self._groups:
                    self._group_ready[self._groups[p]] = []
                    self._launch_group(self._groups[p])
                else:
                    self._handles[p] = self._reduce_async(p)
        done = set()
        for p in self._requires_update:
            entry = self._handles[p]
            if id(entry) in done:
                continue
            done.add(id(entry))
            kind, handle, ctx = entry
            if kind == "sparse":
                p.grad = handle()
            elif kind == "dense":
                reduced, updated = mpi_ops._synchronize(handle)
                compressed, cctx = ctx
                if not updated:
                    # A delayed plan has no update for this parameter this step: the optimizer
                    # skips a parameter without a gradient (momentum and weight decay included).
                    p.grad = None
                    continue
                if reduced is not p.grad:
                    p.grad.copy_(self._compression.decompress(reduced, cctx))
            else:
                mpi_ops.synchronize(handle)
                members, compressed = ctx
                for q, (c, cctx) in zip(members, compressed):
                    if c is not q.grad:
                        q.grad.copy_(self._compression.decompress(c, cctx))
        self._handles.clear()
        self._group_ready.clear()
        for p in self._requires_update:
            self._passes_left[p] = self.backward_passes_per_step
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a synchronize() called by hand before step(), e.g. to clip gradients."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(_DistributedOptimizer, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if any(entry is not None for entry in self._handles.values()):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(_DistributedOptimizer, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._requires_update:
            self._passes_left[p] = passes


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that step() applies gradients averaged over every rank.

    As horovod.torch.DistributedOptimizer: named_parameters (model.named_parameters()) names the
    gradients; compression (Compression.fp16, or an overlap error-feedback compressor such as
    Compression.topk(0.01)); backward_passes_per_step accumulates that many backward passes
    locally before reducing; op Average or Sum; gradient_predivide_factor splits the averaging
    between before and after the sum; groups (an int, or lists of parameters) reduces parameters
    together; sparse_as_dense reduces sparse gradients as dense ones. num_groups is Horovod's
    deprecated spelling of an int groups. process_set (registered) averages over its members
    only; on other ranks step() applies the local gradients, as in Horovod. The planner and
    staleness are hvd.init() options (the global set's plans; a process set's gradients run
    negotiated and on the plan its runtime observes).
    """
    if not _core.is_initialized():
        raise ValueError("overlap has not been initialized; call hvd.init() before "
                         "DistributedOptimizer")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("the optimizer is already a DistributedOptimizer")
    if num_groups and groups is None:
        groups = num_groups
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    optimizer.__class__ = cls
    try:
        optimizer._overlap_setup(named_parameters, compression, backward_passes_per_step, op,
                                 gradient_predivide_factor, groups, sparse_as_dense, process_set)
    except Exception:
        optimizer.__class__ = base  # refused: the optimizer stays the user's, ready to wrap again
        raise
    return optimizer
