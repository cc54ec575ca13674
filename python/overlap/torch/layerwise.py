"""Updates at forward: DistributedOptimizer.step() returns before the gradients are averaged, and
each parameter's update is applied just before the first module forward that uses it (DeAR's and
DeFT's move, DESIGN.md section 9), so the averaging of one step overlaps the next step's forward
and the planners see each layer's real first use.

The contract (docs/torch.md, "Updates at forward"):
- Values are the synchronous optimizer's: the same averaged gradient, the wrapped optimizer's own
  step on each parameter, with the settings (lr, momentum, ...) its param groups held when step()
  was called. A learning-rate scheduler stepped after step() acts from the next step on, as it
  does without deferral.
- A parameter's deferred update is applied before the first of: a forward of a module that holds
  it (training or eval), state_dict() of such a module (once it has run a forward) or of the
  optimizer, the next backward's first gradient, the next step() or synchronize(),
  apply_pending_updates(), or hvd.shutdown(). Code that reads parameters in another way right
  after step() (p.data, torch.save(model) without state_dict) calls apply_pending_updates() first.
- The wrapped optimizer must update each parameter from its own gradient and state (SGD, Adam,
  AdamW, RMSprop, Adagrad, ...): it is stepped once per set of parameters updated together.
"""

import weakref

import torch

from overlap.torch import compiled


class PendingUpdate:
    """One reduction whose parameters wait for their update.

    params: the parameters it updates; resolve(): waits for the reduction and returns
    {param: averaged gradient, or None when the plan brings no update this step}; snapshot: the
    param groups' settings when step() deferred it; step: the forward marker of the step whose
    gradients it reduces (the staleness correction classifies its update by it), or None."""

    __slots__ = ("params", "resolve", "snapshot", "step")

    def __init__(self, params, resolve, snapshot, step=None):
        self.params = params
        self.resolve = resolve
        self.snapshot = snapshot
        self.step = step


def snapshot_settings(param_groups):
    """Each group's settings other than its params, as they are now (tensors copied: a scheduler
    may fill a tensor learning rate in place)."""
    return [{k: (v.clone() if torch.is_tensor(v) else v) for k, v in group.items()
             if k != "params"} for group in param_groups]


def step_subset(param_groups, base_step, grads, snapshot):
    """Runs base_step() on the parameters in `grads` only, each with p.grad = its averaged
    gradient and its group's settings from `snapshot`; puts the groups' parameter lists and
    settings and every p.grad back afterwards."""
    saved = [(group["params"], {k: group[k] for k in settings if k in group})
             for group, settings in zip(param_groups, snapshot)]
    saved_grads = [(p, p.grad) for p in grads]
    try:
        for group, settings in zip(param_groups, snapshot):
            group["params"] = [p for p in group["params"] if p in grads]
            group.update(settings)
        for p, grad in grads.items():
            p.grad = grad
        base_step()
    finally:
        for group, (params, settings) in zip(param_groups, saved):
            group["params"] = params
            group.update(settings)
        for p, grad in saved_grads:
            p.grad = grad


class DeferredUpdates:
    """The parameters whose update step() deferred, and the hooks that apply them in time.

    params: every parameter the optimizer updates; apply(entries): applies a list of
    PendingUpdate; before_forward(module, inputs): runs before an application in a module
    forward (the step markers, so that the first wait on a handle counts from the forward's
    start). Holds apply's owner weakly: the hooks go away with it (close())."""

    def __init__(self, params, apply, before_forward):
        self._params = set(params)
        self._apply = weakref.WeakMethod(apply)
        self._before_forward = before_forward
        self._by_param = {}
        self._seen_modules = weakref.WeakSet()
        self._reached = weakref.WeakKeyDictionary()  # module -> _reached_params(module)
        self._hooks = []
        register = torch.nn.modules.module.register_module_forward_pre_hook
        self._hooks.append(register(compiled.module_hook(self._on_forward)))

    def __bool__(self):
        return bool(self._by_param)

    def params(self):
        return list(self._by_param)

    def add(self, entry):
        for p in entry.params:
            self._by_param[p] = entry

    def apply(self, params=None):
        """Applies the updates of `params` (every pending one by default), with the whole
        reductions they belong to."""
        if not self._by_param:
            return
        wanted = self._by_param if params is None else params
        entries, seen = [], set()
        for p in wanted:
            entry = self._by_param.get(p)
            if entry is not None and id(entry) not in seen:
                seen.add(id(entry))
                entries.append(entry)
        for entry in entries:
            for q in entry.params:
                self._by_param.pop(q, None)
        apply = self._apply()
        if entries and apply is not None:
            apply(entries)

    def close(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._by_param = {}
        self._params = set()

    def _on_forward(self, module, inputs):
        if module not in self._seen_modules:
            self._seen_modules.add(module)
            self._reached.clear()  # a module ran its own forward: it no longer needs a parent's
            register = getattr(module, "register_state_dict_pre_hook", None)
            if register is not None and any(p in self._params
                                            for p in self._reached_params(module)):
                # Saving the model right after step() must save the updated parameters.
                self._hooks.append(register(lambda *_: self.apply()))
        if not self._by_param:
            return
        own = [p for p in self._reached_params(module) if p in self._by_param]
        if not own:
            return
        self._before_forward(module, inputs)
        self.apply(own)

    def _reached_params(self, module):
        """The parameters `module`'s forward may read: its own, and those of submodules that
        have never run a forward of their own (nn.MultiheadAttention reads its out_proj's weight
        directly), since no hook of theirs would apply the update before that read. A submodule
        that does run its forward keeps its parameters, and they update just before it."""
        params = self._reached.get(module)
        if params is None:
            params, stack = [], [module]
            while stack:
                m = stack.pop()
                params.extend(p for p in m._parameters.values() if p is not None)
                stack.extend(c for c in m._modules.values()
                             if c is not None and c not in self._seen_modules)
            self._reached[module] = params
        return params
