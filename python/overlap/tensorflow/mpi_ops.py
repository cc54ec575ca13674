"""Collectives on TensorFlow tensors with horovod.tensorflow's names, arguments and results.

Each function emits one of the op library's asynchronous ops (native/kernels.cc), so the same
call works eagerly and inside tf.function; in a graph the op runs when its input is ready and
its kernel frees TensorFlow's thread while the runtime works. Failures raise
tf.errors.OpError subclasses whose message names the rank, the tensor and the cause.

Process sets (Horovod's process_set=): each op carries its set's id as the `process_set_id`
attribute. Python refuses, with ValueError and the runtime's text, a set that is not registered,
a set this rank is not in and a broadcast root outside the set, when the op is created (eagerly,
or when a tf.function is traced); the kernel's submission refuses a set removed after tracing
with tf.errors.InvalidArgumentError. Averages, gradients and ranks count the set's members.

Names: a collective is matched across ranks by name. Unnamed calls are numbered per kind in call
order when eager ("allreduce.noname.3", as overlap.torch) and take the graph's unique op name
when traced, so every step of a tf.function submits the same names (which the runtime's plans
need). Dtypes the core lacks (bool, int16, uint16) travel as uint8 and int32.
"""

import itertools
import threading

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps, ops as tf_ops

from overlap import _core
from overlap.common import (_OP_NAMES, Average, Sum, core_reduce_op, global_process_set,
                            process_set_id)
from overlap.tensorflow import graph_deps, op_library
from overlap.tensorflow.compression import Compression

_lib = op_library.load()

# tf.function runs stateful ops in program order. The collectives are stateful (so that nothing
# folds or merges them away), but chaining them would serialise communication: a gradient's
# allreduce would wait for every earlier one instead of starting when the gradient is ready.
# TensorFlow's "must run, order insensitive" class is what they are: unchained, and still run
# when a rank does not use the result (every rank must submit what the others wait for, e.g. a
# broadcast's gradient, which non-root ranks replace with zeros). The step markers too: chained,
# a marker waited for every stateful op traced before it (a tf.py_function in the model, an
# Assert), and the gradients' allreduces, which wait for the backward marker, then started only
# after the whole backward; step_markers.py orders the markers among themselves (and the
# optimizer's time, noted beside them, by its own dependencies). Barrier and join stay ordered.
_INDEPENDENT = {"OverlapAllreduce", "OverlapGroupedAllreduce", "OverlapAllgather",
                "OverlapBroadcast", "OverlapReducescatter", "OverlapAlltoall",
                "OverlapAllreduceStart", "OverlapAllreduceFinish", "OverlapStepMarker",
                "OverlapNoteUpdateTime"}
auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = frozenset(
    auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS | _INDEPENDENT)

_CORE_DTYPES = {tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
                tf.float64}
_STAGED_AS = {tf.bool: tf.uint8, tf.int16: tf.int32, tf.uint16: tf.int32}

_counters = {}
_counters_lock = threading.Lock()


def _auto_name(kind, name):
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        with _counters_lock:
            counter = _counters.setdefault(kind, itertools.count())
            return "%s.noname.%d" % (kind, next(counter))
    graph = tf_ops.get_default_graph()
    # A tf.function's FuncGraph has a name; a TF1-style tf.Graph (sessions) has none.
    return "%s.%s/%s" % (kind, getattr(graph, "name", "graph"), graph.unique_name(kind))


def _here(what):
    return "rank %d: %s" % (_core.rank(), what)


def _stage(tensor, what):
    """The tensor in a dtype the core carries, and the dtype to give the result back in."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype in _CORE_DTYPES:
        return tensor, None
    if tensor.dtype in _STAGED_AS:
        return tf.cast(tensor, _STAGED_AS[tensor.dtype]), tensor.dtype
    raise ValueError(_here("%s: tensor type %s is not supported" % (what, tensor.dtype.name)))


def _unstage(tensor, dtype):
    return tensor if dtype is None else tf.cast(tensor, dtype)


def _prepare(kind, name, process_set):
    """The op's name and its process set's id, once the set is known to be usable here: refuses
    an unregistered set and (except for grouped_allreduce, which the runtime names after its
    members) a set this rank is not in."""
    _core.require_init(kind)
    set_id = process_set_id(process_set)
    name = _auto_name(kind, name)
    if kind != "grouped_allreduce":
        _check_member(set_id, "%s '%s'" % (kind, name))
    return name, set_id


def _check_member(set_id, what):
    """Refuses, as the runtime would at submission (the same text), an op `what` ("allreduce
    'x'") on a set this rank is not in. A no-op for the global set."""
    if set_id == 0:
        return
    try:
        _core.process_set_rank(set_id)
    except ValueError as error:
        raise ValueError(_here("%s: %s" % (what, error))) from None


def _rank_in(set_id):
    """This rank's position in set `set_id` (the global rank for the global set)."""
    return _core.rank() if set_id == 0 else _core.process_set_rank(set_id)


def _size_of(set_id):
    return _core.size() if set_id == 0 else _core.process_set_size(set_id)


def _op_of(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("the op parameter supersedes average; give only one of them")
        return Average if average else Sum
    return Average if op is None else op


# ---------------------------------------------------------------------------------------------
# Allreduce.

def _allreduce(tensor, name, c_op, prescale, postscale, compression_spec, set_id,
               gradient=False, looks_ahead=False):
    """One OverlapAllreduce on set `set_id`: (the result, its has_update flag, a bool scalar
    tensor). Integer tensors are scaled in float64 around it, as Horovod. `gradient`: a gradient
    the optimizer applies, which a delayed plan may deliver late (plan_may_delay); any other
    allreduce gets its own step's result. `looks_ahead`: its optimizer looks ahead under delays
    (AllreduceOptions::looks_ahead: the planner charges that)."""
    if set_id != 0 and compression_spec:
        # The runtime's refusal, at the call rather than when the op runs.
        raise ValueError(_here("allreduce '%s': process set %d: compression and delayed updates "
                               "(delay, period, phase) run on the global process set 0 only"
                               % (name, set_id)))
    tensor, original = _stage(tensor, "allreduce '%s'" % name)
    tensor, prescale, postscale, rescale = _scaled_in_float64(tensor, prescale, postscale)
    out, has_update = _lib.overlap_allreduce(
        tensor, tensor_name=name, reduce_op=c_op, prescale=prescale, postscale=postscale,
        compression=compression_spec or "", process_set_id=set_id, plan_may_delay=gradient,
        independent_of_results=graph_deps.independent_of_results(tensor),
        looks_ahead=bool(gradient and looks_ahead))
    return _unstage(rescale(out), original), has_update


def _scaled_in_float64(tensor, prescale, postscale):
    """Horovod scales integer tensors in float64 math around the reduction (the result cast back
    toward zero); the core scales floating-point ones itself. Returns (the tensor to reduce, the
    factors for the core, a function that applies the post-scale to the result)."""
    prescale, postscale = float(prescale), float(postscale)
    if tensor.dtype.is_floating or (prescale == 1.0 and postscale == 1.0):
        return tensor, prescale, postscale, lambda out: out
    dtype = tensor.dtype
    scaled = tf.cast(tf.cast(tensor, tf.float64) * prescale, dtype)
    return scaled, 1.0, 1.0, lambda out: tf.cast(tf.cast(out, tf.float64) * postscale, dtype)


def _sparse_allreduce(slices, name, op, process_set, prescale_factor=1.0, postscale_factor=1.0):
    """IndexedSlices (an embedding's gradient): values and indices allgathered, as Horovod,
    which raises NotImplementedError for the reductions and scalings that have no meaning there."""
    if op not in (Average, Sum):
        raise NotImplementedError(_here("allreduce '%s': IndexedSlices reduce with Average or Sum "
                                        "only, got hvd.%s" % (name, _OP_NAMES.get(op, op))))
    if float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise NotImplementedError(_here("allreduce '%s': IndexedSlices take no prescale or "
                                        "postscale factor" % name))
    values = allgather(slices.values, name=name + ".values", process_set=process_set)
    indices = allgather(slices.indices, name=name + ".indices", process_set=process_set)
    if op == Average:
        values = values / tf.cast(_size_of(process_set_id(process_set)), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """`tensor` reduced across ranks (Average by default), differentiable. An IndexedSlices is
    allgathered instead. `compression` is Horovod's cast compressor or one of overlap's runtime
    compressors; device_dense, device_sparse and ignore_name_scope are accepted for
    compatibility (the op library runs on the CPU)."""
    op = _op_of(op, average)
    name, set_id = _prepare("allreduce", name, process_set)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, name, op, process_set, prescale_factor, postscale_factor)
    return _dense_allreduce(tensor, name, op, compression, prescale_factor, postscale_factor,
                            set_id)[0]


def allreduce_with_update(tensor, name, op=Average, compression=Compression.none,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set, looks_ahead=False):
    """allreduce of a gradient, with its has_update flag: (result, bool scalar tensor). A
    delayed plan (deft with staleness > 0 or update periods) may deliver it late: the result is
    then an earlier step's average, and the flag is false in a step that brings this tensor no
    update (the result is zeros then). The gradient reducer uses it so that the optimizer skips
    that variable; any other allreduce always carries its own step's result. `looks_ahead`:
    the optimizer looks ahead on it under delays (the staleness correction "auto"), which the
    planner charges."""
    name, set_id = _prepare("allreduce", name, process_set)
    return _dense_allreduce(tensor, name, op, compression, prescale_factor, postscale_factor,
                            set_id, gradient=True, looks_ahead=looks_ahead)


def allreduce_start(tensor, name, op=Average, compression_spec="", prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Submits a floating-point gradient's allreduce and returns without waiting (the op, or
    None eagerly): allreduce_finish(name, ...) collects the result, in this step or a later one
    (updates at forward, layerwise.py; native/pending.h). Marked as a gradient, so a delayed
    plan may deliver it late, as allreduce_with_update's."""
    name, set_id = _prepare("allreduce", name, process_set)
    tensor = tf.convert_to_tensor(tensor)
    if not tensor.dtype.is_floating:
        raise ValueError(_here("allreduce '%s': a deferred allreduce takes a floating-point "
                               "gradient, got %s" % (name, tensor.dtype.name)))
    return _lib.overlap_allreduce_start(tensor, tensor_name=name, reduce_op=core_reduce_op(op),
                                        prescale=float(prescale_factor),
                                        postscale=float(postscale_factor),
                                        compression=compression_spec or "",
                                        process_set_id=set_id)


def allreduce_finish(name, dtype, shape):
    """(result, has_update) of the allreduce allreduce_start submitted under `name`: waits for
    it; zeros and False when nothing is pending under that name (collected already)."""
    return _lib.overlap_allreduce_finish(dtype=dtype, shape=shape, tensor_name=name)


def _dense_allreduce(tensor, name, op, compression, prescale_factor, postscale_factor, set_id,
                     gradient=False, looks_ahead=False):
    c_op = core_reduce_op(op)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    out, has_update = _allreduce(compressed, name, c_op, float(prescale_factor),
                                 float(postscale_factor), compression.runtime_spec, set_id,
                                 gradient, looks_ahead)
    return compression.decompress(out, ctx), has_update


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """allreduce of each tensor as one unit the runtime negotiates and fuses together (one unit
    per dtype); differentiable. Returns a list."""
    op = _op_of(op, average)
    base, set_id = _prepare("grouped_allreduce", name, process_set)
    tensors = list(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse:
        # IndexedSlices members are allgathered one by one, as Horovod; the dense rest stays one
        # grouped op. Checked before anything is submitted, so no rank submits half a group.
        results = [None] * len(tensors)
        for i in sparse:
            results[i] = _sparse_allreduce(tensors[i], "%s.%d" % (base, i), op, process_set,
                                           prescale_factor, postscale_factor)
        dense = [i for i in range(len(tensors)) if results[i] is None]
        reduced = grouped_allreduce([tensors[i] for i in dense], compression=compression, op=op,
                                    name=base + ".dense", process_set=process_set) if dense else []
        for i, out in zip(dense, reduced):
            results[i] = out
        return results
    c_op = core_reduce_op(op)
    if not tensors:
        return []
    # The runtime names a grouped allreduce by its members' names.
    group = "allreduce 'group[%s]'" % ",".join("%s.%d" % (base, i) for i in range(len(tensors)))
    _check_member(set_id, group)
    if set_id != 0 and compression.runtime_spec:
        raise ValueError(_here("%s: process set %d: compression and delayed updates (delay, "
                               "period, phase) run on the global process set 0 only"
                               % (group, set_id)))
    staged, originals, contexts = [], [], []
    for i, t in enumerate(tensors):
        compressed, ctx = compression.compress(tf.convert_to_tensor(t))
        s, original = _stage(compressed, "grouped allreduce '%s.%d'" % (base, i))
        staged.append(s)
        originals.append(original)
        contexts.append(ctx)
    # The core fuses one dtype per group: tensors of each dtype go as one grouped op.
    by_dtype = {}
    for i, t in enumerate(staged):
        by_dtype.setdefault(t.dtype, []).append(i)
    outs = [None] * len(staged)
    for members in by_dtype.values():
        scaled = [_scaled_in_float64(staged[i], prescale_factor, postscale_factor)
                  for i in members]
        reduced = _lib.overlap_grouped_allreduce(
            [t for t, _, _, _ in scaled], tensor_names=["%s.%d" % (base, i) for i in members],
            reduce_op=c_op, prescale=scaled[0][1], postscale=scaled[0][2],
            compression=compression.runtime_spec or "", process_set_id=set_id)
        for i, out, (_, _, _, rescale) in zip(members, reduced, scaled):
            outs[i] = rescale(out)
    return [compression.decompress(_unstage(o, orig), ctx)
            for o, orig, ctx in zip(outs, originals, contexts)]


def _reduction_grad(op, grads, grouped):
    """Gradient of an allreduce: the gradient reduced with the same op and factors (Average and
    Sum; Horovod defines no other)."""
    c_op = op.get_attr("reduce_op")
    if c_op not in (_core.C_AVERAGE, _core.C_SUM):
        raise NotImplementedError(_here("allreduce: only Average and Sum have gradients"))
    kwargs = dict(reduce_op=c_op, prescale=op.get_attr("prescale"),
                  postscale=op.get_attr("postscale"), process_set_id=op.get_attr("process_set_id"))
    if grouped:
        names = [n.decode() + ".grad" for n in op.get_attr("tensor_names")]
        grads = [tf.zeros_like(t) if g is None else g for g, t in zip(grads, op.inputs)]
        return _lib.overlap_grouped_allreduce(grads, tensor_names=names, **kwargs)
    return _lib.overlap_allreduce(grads[0], tensor_name=op.get_attr("tensor_name").decode() +
                                  ".grad", **kwargs)[0]


@tf.RegisterGradient("OverlapAllreduce")
def _allreduce_grad(op, grad, _has_update_grad):
    return _reduction_grad(op, [grad], grouped=False)


@tf.RegisterGradient("OverlapGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _reduction_grad(op, list(grads), grouped=True)


# ---------------------------------------------------------------------------------------------
# Allgather, broadcast, reducescatter, alltoall.

def allgather(tensor, device_dense="", device_sparse="", name=None,
              process_set=global_process_set, ignore_name_scope=False):
    """Every rank's `tensor` concatenated along dimension 0 in rank order (first dimensions may
    differ); differentiable."""
    name, set_id = _prepare("allgather", name, process_set)
    tensor, original = _stage(tensor, "allgather '%s'" % name)
    if tensor.shape.rank == 0:
        raise ValueError(_here("allgather '%s': needs at least one dimension (got a scalar)"
                               % name))
    return _unstage(_lib.overlap_allgather(tensor, tensor_name=name, process_set_id=set_id),
                    original)


@tf.RegisterGradient("OverlapAllgather")
def _allgather_grad(op, grad):
    """This rank's rows of the gradient averaged over the set's ranks (Horovod 0.28's
    definition)."""
    name = op.get_attr("tensor_name").decode()
    set_id = op.get_attr("process_set_id")
    reduced = _lib.overlap_allreduce(grad, tensor_name=name + ".grad",
                                     reduce_op=_core.C_AVERAGE, process_set_id=set_id)[0]
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = _lib.overlap_allgather(rows, tensor_name=name + ".grad.rows",
                                      process_set_id=set_id)
    offset = tf.reduce_sum(all_rows[:_rank_in(set_id)])
    return reduced[offset:offset + rows[0]]


def broadcast(tensor, root_rank, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """root_rank's `tensor` on every rank (of `process_set`; root_rank is a global rank that must
    be a member, as in Horovod); differentiable."""
    name, set_id = _prepare("broadcast", name, process_set)
    root_rank = int(root_rank)
    if set_id != 0:
        ranks = _core.process_set_ranks(set_id)
        if root_rank not in ranks:  # the runtime's refusal, at the call
            raise ValueError(_here("broadcast '%s': root rank %d is not a member of process set "
                                   "%d (ranks %s)" % (name, root_rank, set_id, ranks)))
    tensor, original = _stage(tensor, "broadcast '%s'" % name)
    return _unstage(_lib.overlap_broadcast(tensor, tensor_name=name, root_rank=root_rank,
                                           process_set_id=set_id), original)


@tf.RegisterGradient("OverlapBroadcast")
def _broadcast_grad(op, grad):
    """The gradient averaged over the set's ranks on the root, zero elsewhere (Horovod 0.28)."""
    reduced = _lib.overlap_allreduce(grad, tensor_name=op.get_attr("tensor_name").decode() +
                                     ".grad", reduce_op=_core.C_AVERAGE,
                                     process_set_id=op.get_attr("process_set_id"))[0]
    if _core.rank() == op.get_attr("root_rank"):
        return reduced
    # Zeros that still run the allreduce: a TensorFlow 1 graph would prune an op nothing uses,
    # and the root would wait for this rank forever.
    with tf.control_dependencies([reduced]):
        return tf.zeros_like(grad)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """`tensor` reduced across ranks, this rank keeping its share of dimension 0 (earlier ranks
    get one more row when it does not divide evenly); differentiable."""
    name, set_id = _prepare("reducescatter", name, process_set)
    c_op = core_reduce_op(op)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    staged, original = _stage(compressed, "reducescatter '%s'" % name)
    if staged.shape.rank == 0:
        raise ValueError(_here("reducescatter '%s': needs at least one dimension" % name))
    staged, prescale, postscale, rescale = _scaled_in_float64(staged, prescale_factor,
                                                              postscale_factor)
    out = _lib.overlap_reducescatter(staged, tensor_name=name, reduce_op=c_op, prescale=prescale,
                                     postscale=postscale, process_set_id=set_id)
    return compression.decompress(_unstage(rescale(out), original), ctx)


@tf.RegisterGradient("OverlapReducescatter")
def _reducescatter_grad(op, grad):
    """The gathered gradient, times the set's size for Sum (Horovod 0.28's definition)."""
    set_id = op.get_attr("process_set_id")
    gathered = _lib.overlap_allgather(grad, tensor_name=op.get_attr("tensor_name").decode() +
                                      ".grad", process_set_id=set_id)
    if op.get_attr("reduce_op") == _core.C_SUM:
        gathered = gathered * tf.cast(_size_of(set_id), gathered.dtype)
    return gathered


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    base = _auto_name("grouped_reducescatter", name)
    return [reducescatter(t, compression=compression, op=op, name="%s.%d" % (base, i),
                          process_set=process_set, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor) for i, t in enumerate(tensors)]


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    base = _auto_name("grouped_allgather", name)
    return [allgather(t, name="%s.%d" % (base, i), process_set=process_set)
            for i, t in enumerate(tensors)]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[r] rows of `tensor` to rank r (equal parts when splits is None) and returns
    the rows every rank sent here in rank order, with the received splits when `splits` was
    given - (rows, received splits) - as horovod.tensorflow since 0.22; differentiable in the
    tensor."""
    name, set_id = _prepare("alltoall", name, process_set)
    tensor, original = _stage(tensor, "alltoall '%s'" % name)
    given = splits is not None
    splits = tf.cast(splits, tf.int32) if given else tf.zeros([0], tf.int32)
    received, received_splits = _lib.overlap_alltoall(tensor, tf.reshape(splits, [-1]),
                                                      tensor_name=name, process_set_id=set_id)
    received = _unstage(received, original)
    return (received, received_splits) if given else received


@tf.RegisterGradient("OverlapAlltoall")
def _alltoall_grad(op, grad, _):
    """The gradient rows go back where they came from."""
    back, _ = _lib.overlap_alltoall(grad, op.outputs[1],
                                    tensor_name=op.get_attr("tensor_name").decode() + ".grad",
                                    process_set_id=op.get_attr("process_set_id"))
    return back, None


# ---------------------------------------------------------------------------------------------
# Join and barrier.

def join():
    """For ranks with uneven data: keeps contributing zeros to the other ranks' allreduces until
    every rank has joined. Returns the rank that joined last (latest call time, the highest such
    rank on a tie) as an int32 scalar tensor."""
    _core.require_init("join")
    called = _lib.overlap_join()
    stamps = _lib.overlap_allgather(tf.reshape(called, [1]), tensor_name=_auto_name(
        "join.called", None))
    latest = tf.reduce_max(stamps)
    ranks = tf.cast(tf.where(tf.equal(stamps, latest))[:, 0], tf.int32)
    return tf.reduce_max(ranks)


def barrier(process_set=global_process_set):
    """Returns when every rank (of `process_set`) has called barrier()."""
    _core.require_init("barrier")
    set_id = process_set_id(process_set)
    _check_member(set_id, "barrier '__barrier'")
    return _lib.overlap_barrier(process_set_id=set_id)


def step_marker(kind):
    """Emits an OverlapStepMarker op ("forward", "backward" or "update"; step_markers.cc)."""
    return _lib.overlap_step_marker(kind=kind)


def note_update_time(ms):
    """Emits an OverlapNoteUpdateTime op: the optimizer's update took `ms` (a float64 scalar
    tensor; step_markers.cc)."""
    return _lib.overlap_note_update_time(ms)
