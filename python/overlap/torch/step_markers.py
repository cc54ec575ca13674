"""Drives the runtime's step markers (StartForward / StartBackward / StartUpdate) from PyTorch
hooks, so that the planners see real per-layer compute windows (DESIGN.md section 13).

forward: the first module forward after an update (a global module forward pre-hook);
backward: the first gradient hook after that forward;
update: the optimizer's synchronize() (or step()).
Extra forwards and backwards within a step (backward_passes_per_step > 1) fall inside the
backward window; a step without a module forward starts at its first gradient.
"""

import threading

import torch

from overlap import _core
from overlap.torch import compiled

_IDLE, _FORWARD, _BACKWARD, _UPDATE = range(4)


class StepMarkers:
    """The global forward pre-hook is on only while a forward marker is due (idle, or after an
    update): any global hook sends every module call through torch's slow path, which for many
    small modules costs more than the runtime's own work."""

    def __init__(self):
        self._state = _IDLE
        self._lock = threading.Lock()
        self._closed = False
        self._hook = compiled.SwitchedHook(self._on_module_forward, optional=True)
        self._watch_forwards(True)

    def close(self):
        with self._lock:
            self._closed = True
            self._watch_forwards(False)

    def _watch_forwards(self, on):
        self._hook.switch(on and not self._closed)

    def _on_module_forward(self, module, inputs):
        if self._state in (_IDLE, _UPDATE) and torch.is_grad_enabled():
            self._advance(_FORWARD)

    # Another module forward pre-hook that must run after the forward marker calls this first.
    before_module_forward = _on_module_forward

    def on_gradient(self):
        if self._state != _BACKWARD:
            if self._state != _FORWARD:
                self._advance(_FORWARD)
            self._advance(_BACKWARD)

    def on_update(self):
        if self._state != _UPDATE:
            if self._state != _BACKWARD:
                self.on_gradient()
            self._advance(_UPDATE)

    def _advance(self, state):
        with self._lock:
            if self._state == state or not _core.is_initialized():
                return
            self._state = state
            self._watch_forwards(state == _UPDATE)
            marker = {_FORWARD: _core.start_forward, _BACKWARD: _core.start_backward,
                      _UPDATE: _core.start_update}[state]
        marker()


_current = None


def install():
    """The process's markers, shared by every DistributedOptimizer: their calls are idempotent
    within a phase, so two optimizers (a GAN's, say) mark one step, not two."""
    global _current
    if _current is None:
        _current = StepMarkers()
    return _current


def before_module_forward(module, inputs):
    """For another module forward pre-hook that must run after the forward marker: advances the
    process's markers now (the hooks' order is that of their registration)."""
    if _current is not None:
        _current.before_module_forward(module, inputs)
