"""torch.compile and overlap.torch's global module forward pre-hooks (updates at forward, the
staleness correction's weight prediction, the step markers).

Those hooks have side effects outside the graph: they wait on reductions, step the wrapped
optimizer, call the core through ctypes. Dynamo must never trace them (it fails inside them, or
would bake one step's state into the graph). So every such hook is wrapped by `module_hook`:

- `torch.compile(model)` (an OptimizedModule): torch calls the global hooks once more for the
  OptimizedModule itself, eagerly, before its compiled forward. The wrapped hook runs the hook
  there for every sub-module of the original model, so every parameter the compiled forward
  reads is up to date before it starts; inside the compiled region the hook is a no-op that
  dynamo traces away (no graph break). The compiled forward then acts as one layer for updates
  at forward: it waits for all its parameters' updates before it starts.
- Any other compiled region that calls modules (`model.compile()`, a compiled function calling
  the model): the hook runs eagerly through `torch._dynamo.disable`, a graph break, with the
  values of an eager run. A break there falls inside torch's Module._call_impl, where dynamo
  cannot resume, so in practice the model's whole forward then runs eagerly (no graph). The
  step markers' hook is optional (module_hook's `optional`) and is left out there instead.

Which case applies is read from `_covered`, a global that dynamo guards on, so a graph traced
inside an OptimizedModule is never reused elsewhere.

Dynamo also guards on the global hooks' dict, its keys included: a hook switched on and off each
step (the step markers') is put back under its first key (SwitchedHook), or every step would
bring a new key and a recompile, until dynamo's recompile limit.
"""

import functools
import weakref

import torch

# OptimizedModule forwards running now (theirs is the eager hooks' work, done before them).
_covered = 0
_tracked = weakref.WeakSet()


def _optimized_module_class():
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # torch without dynamo
        return None
    return OptimizedModule


_OPTIMIZED_MODULE = _optimized_module_class()


def is_compiling():
    """True while dynamo traces (torch 2.0 names it torch._dynamo.is_compiling)."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    dynamo = getattr(torch, "_dynamo", None)
    return bool(dynamo is not None and dynamo.is_compiling())


def eager(fn):
    """fn, run eagerly when called inside a compiled region (a graph break there)."""
    dynamo = getattr(torch, "_dynamo", None)
    return fn if dynamo is None else dynamo.disable(fn)


def _enter(module, inputs):
    global _covered
    _covered += 1


def _leave(module, inputs, output):
    global _covered
    _covered -= 1


def _track(module):
    """Counts this OptimizedModule's forwards in _covered from now on (this one included)."""
    if module in _tracked:
        return  # its own pre-hook, which runs after the global ones, counts this call
    _tracked.add(module)
    module.register_forward_pre_hook(_enter)
    try:
        module.register_forward_hook(_leave, always_call=True)
    except TypeError:  # torch < 2.0: no always_call (an exception in forward leaves it counted)
        module.register_forward_hook(_leave)
    _enter(module, None)  # the hooks just registered miss this call


def module_hook(hook, optional=False):
    """A global module forward pre-hook `hook(module, inputs)` (returning None), made safe
    under torch.compile as the module docstring says. optional: the hook may be left out in a
    compiled region that no OptimizedModule covers (no graph break there) because something
    later does its work, as the step markers' first gradient marks a forward not yet marked."""
    eager_hook = eager(hook)

    @functools.wraps(hook)
    def wrapped(module, inputs):
        if is_compiling():
            if _covered or optional:
                return None  # the OptimizedModule's eager call did it, or nothing needs it
            return eager_hook(module, inputs)
        if _OPTIMIZED_MODULE is not None and isinstance(module, _OPTIMIZED_MODULE):
            _track(module)
            for sub in module._orig_mod.modules():
                hook(sub, inputs)
            return None
        return hook(module, inputs)
    return wrapped


class SwitchedHook:
    """A global module forward pre-hook (module_hook's, with its `optional`) switched on only
    while needed, because any global hook sends every module call through torch's slow path.
    It always holds the same key in torch's hook dict, so a compiled region traced with it
    switched on finds the same dict at every later step (module docstring)."""

    def __init__(self, hook, optional=False):
        self._hook = module_hook(hook, optional)
        self._handle = None
        self._on = False

    def switch(self, on):
        if on == self._on:
            return
        if on and self._handle is None:
            register = torch.nn.modules.module.register_module_forward_pre_hook
            self._handle = register(self._hook)
        elif on:
            self._handle.hooks_dict_ref()[self._handle.id] = self._hook  # its first key
        else:
            self._handle.remove()  # torch copies the hooks before calling them: safe inside one
        self._on = on
