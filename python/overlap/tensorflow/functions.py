"""Variable and object helpers of horovod.tensorflow: broadcast_variables, broadcast_,
broadcast_object, broadcast_object_fn, allgather_object."""

import pickle

import numpy as np
import tensorflow as tf

from overlap import _core
from overlap.common import global_process_set, process_set_id
from overlap.tensorflow import mpi_ops
from overlap.tensorflow.gradients import variable_name


def _broadcast_assign(variables, root_rank, prefix, process_set):
    """Assigns root_rank's value to each variable; returns (the assigned values in order, the
    assignments, which a TensorFlow 1 graph must run).

    In a TensorFlow 1 graph each value carries its assignment as a control dependency, so that
    running it also assigns the variable, as Horovod's in-place op does: a value that did not
    would leave the variable unassigned after session.run(value), and a program (or test) that
    then reads the variable sees its own value on non-root ranks and the root's on the root. Its
    ranks then take different paths, and their collectives stop matching."""
    process_set_id(process_set)  # refuses an unregistered set by name
    in_graph = _tf1_graph()
    values, assignments = [], []
    for i, v in enumerate(variables):
        value = v.value if hasattr(v, "path") else v  # a Keras 3 variable's tf.Variable value
        received = mpi_ops.broadcast(value, root_rank, name="%s.%s" % (prefix, variable_name(v, i)),
                                     process_set=process_set)
        assignment = v.assign(received)
        assignments.append(assignment)
        if in_graph:
            with tf.control_dependencies([assignment]):
                received = tf.identity(received)
        values.append(received)
    return values, assignments


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root_rank's values to `variables` (tf.Variable or Keras 3 variables) on every
    rank of `process_set` (root_rank is a global rank, as in Horovod). Works eagerly and in a
    tf.function (where the assignments run with the function, as every stateful op does).
    Returns None, or in a TensorFlow 1 graph the op that does it (session.run it), as
    Horovod's."""
    _, assignments = _broadcast_assign(list(variables), root_rank, "broadcast_variables",
                                       process_set)
    return tf.group(*assignments) if _tf1_graph() else None


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: assigns root_rank's values to `variables` and returns those
    values, in order. `name` prefixes the collectives' names (matched across ranks)."""
    return _broadcast_assign(list(variables), root_rank, name or "broadcast_", process_set)[0]


def broadcast_global_variables(root_rank):
    """TensorFlow 1's global-variable broadcast: in a graph (tf.compat.v1), the op that assigns
    root_rank's values to every global variable. Eager TensorFlow 2 has no global variables:
    there it raises RuntimeError, as Horovod's does."""
    if not _tf1_graph():
        raise RuntimeError("broadcast_global_variables needs TensorFlow 1's global variables "
                           "(a tf.compat.v1 graph); with TensorFlow 2 use "
                           "hvd.broadcast_variables(model.variables, root_rank) or, in Keras, "
                           "hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank)")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def _to_bytes(obj):
    return tf.constant(np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                                     dtype=np.uint8))


def _tf1_graph():
    """True inside a TensorFlow 1 graph (tf.compat.v1, sessions); False eagerly and inside a
    tf.function, whose stateful ops run with the function."""
    return not tf.compat.v1.executing_eagerly_outside_functions()


def _evaluate(tensors, session):
    """The tensors' values as numpy arrays: eagerly, or in a TensorFlow 1 graph through
    `session`, else the default session, else a session of its own (as Horovod's object
    helpers run theirs)."""
    if tf.executing_eagerly():
        return [t.numpy() for t in tensors]
    if not _tf1_graph():
        raise ValueError("rank %d: the object helpers run eagerly or in a TensorFlow 1 graph, "
                         "not inside a tf.function (their result is a Python object)"
                         % _core.rank())
    session = session or tf.compat.v1.get_default_session()
    if session is not None:
        return session.run(tensors)
    with tf.compat.v1.Session() as own:
        return own.run(tensors)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable `obj`, on every rank of `process_set` (root_rank is a global
    rank). Eagerly, or in a TensorFlow 1 graph through `session` (see _evaluate)."""
    process_set_id(process_set)  # refuses an unregistered set by name
    name = name or type(obj).__name__
    if _core.rank() == root_rank:
        payload = _to_bytes(obj)
        length = tf.constant([int(payload.shape[0])], tf.int64)
    else:
        payload, length = None, tf.zeros([1], tf.int64)
    length = mpi_ops.broadcast(length, root_rank, name="broadcast_object.%s.size" % name,
                               process_set=process_set)
    (length,) = _evaluate([length], session)
    if payload is None:
        payload = tf.zeros([int(length[0])], tf.uint8)
    payload = mpi_ops.broadcast(payload, root_rank, name="broadcast_object.%s.bytes" % name,
                                process_set=process_set)
    (data,) = _evaluate([payload], session)
    return obj if _core.rank() == root_rank else pickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function obj -> root_rank's obj (Horovod's TensorFlow 1 helper, which builds the
    broadcast once for a session; here each call is an eager broadcast_object)."""
    name = name or "broadcast_object_fn"

    def broadcast_fn(obj):
        return broadcast_object(obj, root_rank, name=name, process_set=process_set)

    return broadcast_fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable `obj`, as a list in rank order (of `process_set`'s members).
    Eagerly, or in a TensorFlow 1 graph through `session` (see _evaluate)."""
    process_set_id(process_set)  # refuses an unregistered set by name
    name = name or type(obj).__name__
    payload = _to_bytes(obj)
    sizes = mpi_ops.allgather(tf.constant([int(payload.shape[0])], tf.int64),
                              name="allgather_object.%s.sizes" % name, process_set=process_set)
    gathered = mpi_ops.allgather(payload, name="allgather_object.%s.bytes" % name,
                                 process_set=process_set)
    sizes, gathered = _evaluate([sizes, gathered], session)
    objects, offset = [], 0
    for n in sizes.tolist():
        objects.append(pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return objects
