"""Step markers for the runtime's planners (DESIGN.md section 13), placed by the tape and the
optimizer as OverlapStepMarker ops (native/step_markers.cc); and, beside them, the Keras
optimizer's update time (timed_update, an OverlapNoteUpdateTime op).

Eagerly a marker runs when it is emitted. Inside a tf.function it runs when the graph reaches it:
a marker with no inputs runs as the function starts (the forward), one that depends on the loss
runs as the backward starts, one that depends on every gradient runs as the update starts. The
op library's state machine supplies a missing phase and drops repeats, so a training loop that
places only some markers still gives the runtime forward -> backward -> update.

tf.function runs the stateful ops that take no resource in program order, but not the markers
(mpi_ops.py lists them as order-insensitive): chained, the optimizer's forward marker, traced
after the model, waited for every tf.py_function or Assert of the forward and backward, and every
gradient's allreduce waited with it. So each graph chains its markers only among themselves,
here: a marker waits for the one traced before it in the same graph, and for its `after`.
"""

import time
import weakref

import tensorflow as tf

from overlap import _core
from overlap.tensorflow import mpi_ops


# graph -> the last marker traced in it.
_last_marker = weakref.WeakKeyDictionary()


def _mark(kind, after):
    if not _core.is_initialized():
        return None
    if tf.executing_eagerly():
        return mpi_ops.step_marker(kind)
    graph = tf.compat.v1.get_default_graph()
    deps = [t.op if hasattr(t, "op") else t for t in (after or []) if t is not None]
    previous = _last_marker.get(graph)
    if previous is not None:
        deps.append(previous)
    with tf.control_dependencies(deps):
        marker = mpi_ops.step_marker(kind)
    _last_marker[graph] = marker
    return marker


def forward():
    return _mark("forward", None)


def backward(after=None):
    """The backward begins once `after` (the loss, or a first gradient) is computed."""
    return _mark("backward", after)


def update(after=None):
    """The update begins once `after` (every gradient) is computed."""
    return _mark("update", after)


def timed_update(apply, grads, variables):
    """Runs `apply()`, the optimizer's update of `variables` from `grads`, and notes its time
    to the core (NoteUpdateTime), from which the planner prices the look-ahead of a delayed
    plan (scheduler/lookahead.h), as overlap.torch's optimizer does. Inside a tf.function the
    clock is two tf.timestamp ops: stateful ops on different resources run in no set order
    there, so the first waits for the gradients (not for their reduction) and the second for a
    read of every variable, which runs after the update's writes to it."""
    if not _core.is_initialized():
        return apply()
    if tf.executing_eagerly():
        started = time.perf_counter()
        result = apply()
        _core.note_update_ms(1e3 * (time.perf_counter() - started))
        return result
    ready = [g for g in grads if isinstance(g, tf.Tensor)]
    with tf.control_dependencies(ready):
        start = tf.timestamp()
    with tf.control_dependencies([start]):
        result = apply()
    with tf.control_dependencies([tf.convert_to_tensor(v) for v in variables]):
        end = tf.timestamp()
    mpi_ops.note_update_time((end - start) * 1e3)
    return result
