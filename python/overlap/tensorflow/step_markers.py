"""Step markers for the runtime's planners (DESIGN.md section 13), placed by the tape and the
optimizer as OverlapStepMarker ops (native/step_markers.cc).

Eagerly a marker runs when it is emitted. Inside a tf.function it runs when the graph reaches it:
a marker with no inputs runs as the function starts (the forward), one that depends on the loss
runs as the backward starts, one that depends on every gradient runs as the update starts. The
op library's state machine supplies a missing phase and drops repeats, so a training loop that
places only some markers still gives the runtime forward -> backward -> update.
"""

import tensorflow as tf

from overlap import _core
from overlap.tensorflow import mpi_ops


def _mark(kind, after):
    if not _core.is_initialized():
        return None
    after = [t for t in (after or []) if t is not None]
    if after and not tf.executing_eagerly():
        with tf.control_dependencies([t.op if hasattr(t, "op") else t for t in after]):
            return mpi_ops.step_marker(kind)
    return mpi_ops.step_marker(kind)


def forward():
    return _mark("forward", None)


def backward(after=None):
    """The backward begins once `after` (the loss, or a first gradient) is computed."""
    return _mark("backward", after)


def update(after=None):
    """The update begins once `after` (every gradient) is computed."""
    return _mark("update", after)
