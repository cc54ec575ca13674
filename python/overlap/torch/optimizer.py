"""DistributedOptimizer: horovod.torch's optimizer wrapper on overlap's runtime.

Each parameter's gradient is submitted for reduction from a hook the moment backward has
accumulated it, so communication overlaps the rest of backward; step() waits for all of them and
then runs the wrapped optimizer. With update_at_forward (the default under the bytescheduler,
usbyte, dear, deft and auto planners), step() returns at once and each parameter is updated just
before the next forward that uses it (overlap/torch/layerwise.py). The wrapper is the user's
optimizer object itself, re-classed, so its state, param_groups and isinstance checks are
unchanged.
"""

import contextlib
import time
import warnings
import weakref

import torch

from overlap import _core, staleness
from overlap.common import (FORWARD_WINDOW_PLANNERS, Adasum, Average, RuntimeCompressor, Sum,
                            global_process_set, process_set_id)
from overlap.torch import adasum_optimizer, compiled, layerwise, mpi_ops, step_markers
from overlap.torch.staleness import StalenessCorrection
from overlap.torch.compression import Compression


# Optimizers with deferred updates, which hvd.shutdown() applies first.
_deferring = weakref.WeakSet()


def apply_all_pending_updates():
    """Applies every DistributedOptimizer's deferred updates (hvd.shutdown() calls this). A
    reduction that failed is reported as a warning naming its error: shutdown goes on."""
    for optimizer in list(_deferring):
        try:
            optimizer.apply_pending_updates()
        except Exception as error:  # noqa: BLE001 (reported, and shutdown must still run)
            warnings.warn("rank %d: shutdown: the deferred parameter updates of the last step "
                          "were not applied: %s" % (_core.rank(), error))


def _here(message):
    """A refusal of DistributedOptimizer's arguments, naming this rank."""
    return "rank %d: DistributedOptimizer: %s" % (_core.rank(), message)


class _Param:
    """One trainable parameter's per-step state. The hot path (a hook per gradient, synchronize
    per step) reaches it directly, never through a dict keyed by the tensor: a tensor's hash is
    a Python-level call, and 50 tiny gradients a step made a dozen per gradient."""

    __slots__ = ("p", "name", "group", "passes_left", "entry", "slot", "slot_key")

    def __init__(self, p, name, group, passes):
        self.p = p
        self.name = name
        self.group = group        # index of its group, or None
        self.passes_left = passes  # backward passes before its gradient is reduced
        self.entry = None          # this step's reduction (kind, handle, ctx); None: not launched
        self.slot = None           # its mpi_ops.in_place_slot, made on first use
        self.slot_key = None       # the (dtype, shape) the slot was made for


# optimizer.state_dict()'s entry for the staleness correction's state (StalenessCorrection).
_CORRECTION_KEY = "overlap_staleness_correction"


def _base_step(optimizer):
    """The wrapped optimizer class's own step (no closure), as the correction's look-ahead runs
    it on scratch state."""
    return super(_DistributedOptimizer, optimizer).step()


class _DistributedOptimizer:
    def _overlap_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set,
                       update_at_forward, staleness_correction="auto"):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError(_here("gradient_predivide_factor not supported with op != Average"))
        if backward_passes_per_step < 1:
            raise ValueError(_here("backward_passes_per_step must be >= 1, got %r" %
                                   (backward_passes_per_step,)))
        process_set_id(process_set)  # refuses an unregistered set by name
        correction_mode = staleness.check_mode(staleness_correction, "DistributedOptimizer")
        staleness.warn_unless_looking_ahead(staleness_correction, "DistributedOptimizer")
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
        names = self._runtime_names(named_parameters, params)
        # Horovod's attribute, which scripts and its tests read: parameter -> its name, the same
        # on every rank (the runtime's tensor name without its "allreduce." prefix).
        self._parameter_names = {p: n[len("allreduce."):] for p, n in names.items()}
        self._requires_update = [p for p in params if p.requires_grad]
        group_of = self._parameter_groups(groups, params)
        self._params = [_Param(p, names[p], group_of.get(p), backward_passes_per_step)
                        for p in self._requires_update]
        # Each group's trainable members in parameter order, fixed for the optimizer's life.
        self._group_members = {}
        for r in self._params:
            if r.group is not None:
                self._group_members.setdefault(r.group, []).append(r)

        # The common case, a dense gradient that the framework-side compressor leaves as it is
        # (none, or a runtime compressor), goes straight to the core: its name, shape, device
        # and compressor are encoded once per parameter (mpi_ops.in_place_slot).
        self._in_place_ok = (compression is Compression.none or
                             isinstance(compression, RuntimeCompressor))
        self._c_op = mpi_ops._c_op(op)
        self._set_id = process_set_id(process_set)
        self._factors = ((1.0 / self._predivide, self._predivide) if op == Average else
                         (1.0, 1.0))
        self._group_ready = {}      # group index -> members whose gradient is in
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        self._markers = step_markers.install()
        if update_at_forward is None:
            update_at_forward = (_core.setting("OVERLAP_PLANNER", "observed")
                                 in FORWARD_WINDOW_PLANNERS)
        self._deferred = None
        if update_at_forward and self._included:
            self._deferred = layerwise.DeferredUpdates(self._requires_update,
                                                       self._apply_deferred,
                                                       step_markers.before_module_forward)
            _deferring.add(self)
            weakref.finalize(self, self._deferred.close)  # its module hooks go with the optimizer
        # Off on a rank outside the process set: its gradients are never delayed.
        self._correction = StalenessCorrection(
            self, [(r.p, r.name) for r in self._params],
            correction_mode if self._included else "off",
            base_step=_base_step if staleness.looks_ahead(staleness_correction) else None)
        weakref.finalize(self, self._correction.close)
        if self._included:
            self._register_hooks()

    # -- setup ------------------------------------------------------------------------------

    @staticmethod
    def _runtime_names(named_parameters, params):
        """param -> the name its gradient's allreduce goes by (matched across ranks)."""
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
        # Under compiled autograd dynamo would trace the hook, which submits through ctypes and
        # updates this step's state: it runs eagerly instead (a graph break per gradient).
        on_grad = compiled.eager(self._on_grad)
        for r in self._params:
            p = r.p
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(lambda _, r=r: on_grad(r)))
            else:  # torch < 2.1: hook the gradient accumulator
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(
                    accumulator.register_hook(lambda *_, r=r: self._on_grad(r)))
                self._hook_handles.append(accumulator)  # keeps it alive

    # -- per-gradient work ------------------------------------------------------------------

    def _on_grad(self, r):
        if self._deferred:
            # Every forward of the step is done: what no forward applied is applied now.
            self._deferred.apply()
        self._markers.on_gradient()
        if r.entry is not None and r.passes_left <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before "
                "call to step(). Increase backward_passes_per_step to accumulate gradients "
                "locally.")
        r.passes_left -= 1
        if r.passes_left > 0:
            return
        if r.p.grad is not None:
            self._correction.keep_local(r.p, r.p.grad)
        if r.group is not None:
            self._on_group_member(r)
        else:
            r.entry = self._reduce_async(r)

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

    def _reduce_async(self, r):
        p = r.p
        grad = self._prepared_grad(p)
        if grad is None:
            return ("sparse", mpi_ops.sparse_allreduce_async(p.grad, r.name, self._op,
                                                             self._process_set), None)
        if self._in_place_ok and grad.is_contiguous():
            key = (grad.dtype, grad.shape, grad.device)
            if r.slot_key != key:
                r.slot_key, r.slot = key, mpi_ops.in_place_slot(
                    r.name, grad, self._compression.runtime_spec, self._correction.looks_ahead)
            if r.slot is not None:
                pre, post = self._factors
                stream = (mpi_ops.current_stream(grad.device.index)
                          if grad.device.type == "cuda" else None)
                return ("in_place", r.slot.allreduce(grad.data_ptr(), self._c_op, pre, post,
                                                     self._set_id, stream), grad)
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._factors
        handle = mpi_ops._allreduce_async(compressed, compressed, r.name, self._op, pre, post,
                                          self._compression.runtime_spec, self._process_set,
                                          gradient=True, looks_ahead=self._correction.looks_ahead)
        return ("dense", handle, (compressed, ctx))

    def _on_group_member(self, r):
        ready = self._group_ready.setdefault(r.group, [])
        ready.append(r)
        if len(ready) == len(self._group_members[r.group]):
            self._launch_group(r.group)

    def _launch_group(self, index):
        members = self._group_members[index]
        grads = [self._prepared_grad(q.p) for q in members]
        if any(g is None for g in grads):
            for q in members:  # sparse members go one by one
                q.entry = self._reduce_async(q)
            return
        compressed = [self._compression.compress(g) for g in grads]
        tensors = [c for c, _ in compressed]
        pre, post = self._factors
        handle = mpi_ops._grouped_allreduce_async(
            tensors, tensors, "grouped.%s" % members[0].name, self._op, pre, post,
            self._compression.runtime_spec, self._process_set)
        entry = ("group", handle, ([q.p for q in members], compressed))
        for q in members:
            q.entry = entry
        self._group_ready[index] = []

    # -- step ---------------------------------------------------------------------------------

    def synchronize(self):
        """Waits for every gradient's reduction and writes the results into p.grad. Gradients
        that backward never produced on this rank are reduced now (as zeros). Under a delayed
        plan (planner deft with staleness > 0) p.grad receives the average of an earlier step,
        and is set to None in the steps that bring a parameter no update, so that step()
        skips it. Updates that an earlier step() deferred (update_at_forward) are applied
        first."""
        self.apply_pending_updates()
        self._markers.on_update()
        if not self._included:
            self._synchronized = True
            return
        self._launch_missing()
        # The common case first: in-place reductions, waited on in one call.
        in_place, others = [], []
        for p, entry in self._reductions():
            (in_place if entry[0] == "in_place" else others).append((p, entry))
        updates = _core.wait_all([entry[1] for _, entry in in_place])
        for (p, _), updated in zip(in_place, updates):
            if not updated:
                p.grad = None
        for p, entry in others:
            kind = entry[0]
            if kind == "sparse":
                p.grad = entry[1]()
                continue
            for q, grad in self._resolver(p, entry)[1]().items():
                if grad is None:
                    # A delayed plan has no update for this parameter this step: the optimizer
                    # skips a parameter without a gradient (momentum and weight decay included).
                    q.grad = None
        self._end_step()
        self._synchronized = True

    def _launch_missing(self):
        """Reduces now the gradients that backward never produced on this rank (as zeros)."""
        for r in self._params:
            if r.entry is None:
                if r.group is not None:
                    self._group_ready[r.group] = []
                    self._launch_group(r.group)
                else:
                    r.entry = self._reduce_async(r)

    def _reductions(self):
        """(a parameter, its reduction) once per reduction of this step: a group's members
        share one."""
        groups_done = set()
        for r in self._params:
            entry = r.entry
            if r.group is not None:
                if id(entry) in groups_done:
                    continue
                groups_done.add(id(entry))
            yield r.p, entry

    def _resolver(self, p, entry):
        """(the parameters, resolve) of a dense or grouped reduction: resolve() waits for it,
        writes the averages into the gradient tensors reduced (decompressed where compressed;
        the tensors of now, since p.grad may be reset before resolve() runs) and returns
        {param: its averaged gradient, or None when a delayed plan brings no update}."""
        kind, handle, ctx = entry
        if kind == "in_place":
            def resolve_in_place():
                handle.wait()
                return {p: ctx if handle.has_update() else None}
            return [p], resolve_in_place
        if kind == "dense":
            buffer = p.grad  # reduced in place

            def resolve():
                reduced, updated = mpi_ops._synchronize(handle)
                if not updated:
                    return {p: None}
                compressed, cctx = ctx
                if reduced is not buffer:
                    buffer.copy_(self._compression.decompress(reduced, cctx))
                return {p: buffer}
            return [p], resolve
        members, compressed = ctx
        buffers = [q.grad for q in members]

        def resolve_group():
            mpi_ops.synchronize(handle)
            for b, (c, cctx) in zip(buffers, compressed):
                if c is not b:
                    b.copy_(self._compression.decompress(c, cctx))
            return dict(zip(members, buffers))
        return list(members), resolve_group

    def _end_step(self):
        self._group_ready.clear()
        passes = self.backward_passes_per_step
        for r in self._params:
            r.entry = None
            r.passes_left = passes

    # -- updates at forward (overlap/torch/layerwise.py) --------------------------------------

    def _defer_step(self):
        """step() with update_at_forward: hands every reduction to the deferred updates and
        returns True, or returns False when this step must run synchronously (a sparse
        gradient)."""
        self._markers.on_update()
        self._launch_missing()
        if any(r.entry[0] == "sparse" for r in self._params):
            return False
        self._correction.active()  # its forward hook, while a plan delays
        snapshot = layerwise.snapshot_settings(self.param_groups)
        submitted = self._correction.step_now()
        for p, entry in self._reductions():
            params, resolve = self._resolver(p, entry)
            self._deferred.add(layerwise.PendingUpdate(params, resolve, snapshot, submitted))
        self._end_step()
        return True

    def _apply_deferred(self, entries):
        grads = {}
        for entry in entries:
            grads.update(entry.resolve())
        grads = {p: g for p, g in grads.items() if g is not None}
        if grads:
            base = super(_DistributedOptimizer, self)
            # The correction steps parameters the plan runs synchronously exactly as
            # step_subset does, and corrects the delayed ones.
            started = time.perf_counter()
            self._correction.step(base.step, grads, entries[0].snapshot, entries[0].step)
            _core.note_update_ms(1e3 * (time.perf_counter() - started))

    def apply_pending_updates(self):
        """Applies now every update that step() deferred (update_at_forward). Needed only before
        reading parameters other than through a module's forward or state_dict() right after
        step(); a no-op otherwise."""
        self._correction.restore()
        if self._deferred:
            self._deferred.apply()

    def staleness_correction_bytes(self):
        """Bytes of extra state the staleness correction holds now: with "predict", two copies
        of each parameter the plan in force delays (its true value while its forward runs
        ahead, and its last update), with "auto"'s look-ahead 1 + d + p - 1 (its true value and
        this rank's gradients of the last d + p - 1 steps) and, under a period p > 1 between
        its updates, a scratch copy of its optimizer state; 0 with "on" or "off", or while no
        plan delays (overlap/torch/staleness.py, "Memory")."""
        return self._correction.bytes()

    def state_dict(self, *args, **kwargs):
        self.apply_pending_updates()
        state = super(_DistributedOptimizer, self).state_dict(*args, **kwargs)
        # The staleness correction's last updates: without them a resumed run's first forward
        # is not moved ahead as the uninterrupted run's is, and every parameter differs.
        correction = self._correction.state_dict(self._all_params())
        if correction:
            state[_CORRECTION_KEY] = correction
        return state

    def load_state_dict(self, state_dict, *args, **kwargs):
        self.apply_pending_updates()
        correction = state_dict.get(_CORRECTION_KEY)
        if correction is not None:
            state_dict = {k: v for k, v in state_dict.items() if k != _CORRECTION_KEY}
        result = super(_DistributedOptimizer, self).load_state_dict(state_dict, *args, **kwargs)
        self._correction.load_state_dict(self._all_params(), correction or {})
        return result

    def _all_params(self):
        """Every parameter in torch's state_dict order (its integer keys)."""
        return [p for group in self.param_groups for p in group["params"]]

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
            if self._deferred is not None and closure is None and not self._synchronized:
                self.apply_pending_updates()  # the previous step's, in order
                if self._defer_step():
                    return None
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        base = super(_DistributedOptimizer, self)
        # The optimizer's own time, noted for the planner's price of look-ahead
        # (_core.note_update_ms).
        started = time.perf_counter()
        loss = None
        if closure is None and self._correction.active():
            grads = {p: p.grad for group in self.param_groups for p in group["params"]
                     if p.grad is not None}
            self._correction.step(base.step, grads, None, self._correction.step_now())
        else:
            loss = base.step(closure)
        _core.note_update_ms(1e3 * (time.perf_counter() - started))
        return loss

    def zero_grad(self, *args, **kwargs):
        if any(r.entry is not None for r in self._params):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        if self._deferred:
            # A deferred update still owns its gradient buffer (it is being averaged in place):
            # the next backward gets a new one, whatever set_to_none says.
            for p in self._deferred.params():
                p.grad = None
        return super(_DistributedOptimizer, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for r in self._params:
            r.passes_left = passes


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, update_at_forward=None,
                         staleness_correction="auto"):
    """Wraps a torch optimizer so that step() applies gradients averaged over every rank.

    As horovod.torch.DistributedOptimizer: named_parameters (model.named_parameters()) names the
    gradients; compression (Compression.fp16, or an overlap error-feedback compressor such as
    Compression.topk(0.01)); backward_passes_per_step accumulates that many backward passes
    locally before reducing; op Average, Sum or Adasum (each rank steps on its own gradient and
    the parameter deltas are Adasum-reduced, as Horovod: overlap/torch/adasum_optimizer.py);
    gradient_predivide_factor splits the averaging
    between before and after the sum; groups (an int, or lists of parameters) reduces parameters
    together; sparse_as_dense reduces sparse gradients as dense ones. num_groups is Horovod's
    deprecated spelling of an int groups. process_set (registered) averages over its members
    only; on other ranks step() applies the local gradients, as in Horovod. The planner and
    staleness are hvd.init() options (the global set's plans; a process set's gradients run
    negotiated and on the plan its runtime observes).

    update_at_forward (overlap's own; by default on under the bytescheduler, usbyte, dear, deft
    and auto planners, whose plans assume it, and off otherwise): step() returns before the
    gradients are averaged, and each parameter is updated, with the same values, just before
    the next forward of its module, so averaging overlaps the next forward (docs/torch.md,
    "Updates at forward"). Call optimizer.apply_pending_updates() before reading parameters in
    another way right after step().

    staleness_correction (overlap's own): "auto" (the default, the best measured choice:
    "predict", and at a delay without update periods a look-ahead: the momentum / beta1 kept,
    and each forward run at the parameters the coming updates will make, computed by the
    wrapped optimizer's own step on a copy of its state, with this rank's own gradients standing
    in for the averages it has not received), "predict", "on" or "off". Under a plan that delays gradients or gives them an
    update period (planner deft with staleness or max_period; docs/scheduler.md, "Staleness
    correction in the adapters"), "on" lowers the momentum (SGD) or beta1 (Adam, AdamW) of each
    delayed parameter for its mean staleness, and "predict" also runs each forward at the
    parameters extrapolated to where its gradient will be applied, and applies SGD's period
    updates as that many momentum steps. Parameters the plan runs synchronously, and every
    parameter under a synchronous plan, are stepped exactly as without it. Extra memory:
    optimizer.staleness_correction_bytes(). With "predict", parameters read between a training
    forward and step() (inside the step) are the extrapolated ones.
    """
    if not _core.is_initialized():
        raise ValueError("overlap has not been initialized; call hvd.init() before "
                         "DistributedOptimizer")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError(_here("the optimizer is already a DistributedOptimizer"))
    if num_groups and groups is None:
        groups = num_groups
    if op == Adasum and _core.size() == 1:
        op = Sum  # Adasum of one rank's gradient is that gradient, as Horovod's plain optimizer
    if op == Adasum:
        if gradient_predivide_factor != 1.0:
            raise ValueError(_here("gradient_predivide_factor not supported with op != Average"))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        names = _DistributedOptimizer._runtime_names(named_parameters, params)
        return adasum_optimizer.wrap(optimizer, names, compression, backward_passes_per_step,
                                     process_set)
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {})
    optimizer.__class__ = cls
    try:
        optimizer._overlap_setup(named_parameters, compression, backward_passes_per_step, op,
                                 gradient_predivide_factor, groups, sparse_as_dense, process_set,
                                 update_at_forward, staleness_correction)
    except Exception:
        optimizer.__class__ = base  # refused: the optimizer stays the user's, ready to wrap again
        raise
    return optimizer
