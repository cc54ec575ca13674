"""horovod.tensorflow's small helpers: rank and size as ops, build and GPU queries, and the
list and variable-reference utilities its public namespace carries."""

import importlib
import sys

import tensorflow as tf

from overlap import _core

# Horovod's process_set_included_op codes (horovod/common/basics.py).
_PROCESS_SET_ERROR_INIT = -1
_PROCESS_SET_ERROR_UNKNOWN_SET = -3


def rank_op(name=None):
    """This process's rank as an int32 scalar tensor. Horovod's op reads it when the graph runs;
    overlap's ranks are fixed for the job, so the value is taken when the op is created (inside
    a tf.function, at tracing)."""
    return tf.constant(_core.rank(), tf.int32, name=name)


def local_rank_op(name=None):
    """This process's rank on its node, as an int32 scalar tensor (see rank_op)."""
    return tf.constant(_core.local_rank(), tf.int32, name=name)


def local_size_op(name=None):
    """The number of processes on this node, as an int32 scalar tensor (see rank_op)."""
    return tf.constant(_core.local_size(), tf.int32, name=name)


def size_op(process_set_id=0, name=None):
    """The number of processes in the set `process_set_id` (0: every rank), as an int32 scalar
    tensor (see rank_op). ValueError for a set that is not registered."""
    _core.require_init("size_op")
    size = _core.size() if process_set_id == 0 else _core.process_set_size(process_set_id)
    return tf.constant(size, tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this process is in the set `process_set_id`, 0 if not, as Horovod's op; -1 before
    init and -3 for a set that is not registered (Horovod's error codes)."""
    if not _core.is_initialized():
        value = _PROCESS_SET_ERROR_INIT
    elif process_set_id not in _core.process_set_ids():
        value = _PROCESS_SET_ERROR_UNKNOWN_SET
    else:
        value = int(process_set_id == 0 or _core.rank() in _core.process_set_ranks(process_set_id))
    return tf.constant(value, tf.int32, name=name)


def _gpu_reason(ext_base_name):
    """None when overlap's `ext_base_name` adapter runs collectives on GPUs here, else why not."""
    if ext_base_name == "tensorflow":
        return "overlap.tensorflow's op library has CPU kernels only"
    if ext_base_name != "torch":
        return "overlap has no extension %r (it has 'tensorflow' and 'torch')" % ext_base_name
    torch = importlib.import_module("torch")
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if _core.cuda_device_count() <= 0:
        return "the core library was built without CUDA or sees no GPU"
    return None


def gpu_available(ext_base_name, verbose=False):
    """Whether overlap's `ext_base_name` adapter ("tensorflow" or "torch") runs its collectives
    on GPUs: True for torch with a CUDA device and a core library built with CUDA; always False
    for tensorflow (CPU kernels). False, as Horovod's, when the framework cannot be imported;
    `verbose` prints the answer and its reason."""
    try:
        reason = _gpu_reason(ext_base_name)
    except Exception as error:  # noqa: BLE001 (Horovod answers False for any failure)
        reason = "%s: %s" % (type(error).__name__, error)
    if verbose:
        print("Extension %s was %srunning with GPU%s." % (
            ext_base_name, "NOT " if reason else "", " (%s)" % reason if reason else ""),
            file=sys.stderr)
    return reason is None


def check_num_rank_power_of_2(num_rank):
    """Whether num_rank is a power of two (Horovod's Adasum precondition)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def split_list(items, n):
    """`items` in n consecutive chunks whose lengths differ by at most one, longer ones first."""
    per, extra = divmod(len(items), n)
    bounds = [i * per + min(i, extra) for i in range(n + 1)]
    return [items[bounds[i]:bounds[i + 1]] for i in range(n)]


def vars_to_refs(variables):
    """A variable's hashable reference (v.ref()), nested lists becoming tuples."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    """The inverse of vars_to_refs: tuples of references back to lists of variables."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()


def _executing_eagerly():
    """Horovod's name for tf.executing_eagerly() (its tests and some scripts import it)."""
    return tf.executing_eagerly()
