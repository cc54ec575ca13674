"""Finds, compiles if needed, and loads overlap's TensorFlow op library (build_ops.py).

In order:
1. OVERLAP_TF_OPS_LIBRARY: a library path to load as it is (development);
2. the library ``pip install .`` compiled into the package, if its key matches;
3. the cache, ``$OVERLAP_TF_OPS_CACHE`` or ``~/.cache/overlap/tf_ops``, one folder per key,
   compiled there on first use (about half a minute). Ranks starting together take a file lock,
   so one of them compiles and the others wait and load its result.

The core library is loaded first, with its symbols global, since the op library's references to
the C ABI resolve against it, the kernels' waiters' bound (overlap_wait_bound, native/waiter.h)
among them.
"""

import ctypes
import fcntl
import os
import threading

import tensorflow as tf

from overlap import _core
from overlap.tensorflow import build_ops

_module = None
_lock = threading.Lock()


def cache_dir():
    root = os.environ.get("OVERLAP_TF_OPS_CACHE")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "overlap", "tf_ops")


def _read_key(folder):
    try:
        with open(os.path.join(folder, build_ops.KEY_NAME)) as f:
            return f.read().strip()
    except OSError:
        return None


def library_path():
    """The path of a library built for this TensorFlow, compiling one into the cache if none."""
    explicit = os.environ.get("OVERLAP_TF_OPS_LIBRARY")
    if explicit:
        return explicit
    key = build_ops.key()
    packaged = os.path.dirname(os.path.abspath(__file__))
    if _read_key(packaged) == key:
        return os.path.join(packaged, build_ops.LIBRARY_NAME)
    folder = os.path.join(cache_dir(), key)
    path = os.path.join(folder, build_ops.LIBRARY_NAME)
    if _read_key(folder) == key and os.path.exists(path):
        return path
    os.makedirs(cache_dir(), exist_ok=True)
    with open(os.path.join(cache_dir(), key + ".lock"), "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another rank may be compiling it
        if _read_key(folder) != key or not os.path.exists(path):
            build_ops.build(folder, key)
    return path


def load():
    """The op library's Python module (tf.load_op_library), loaded once per process."""
    global _module, _native
    with _lock:
        if _module is None:
            _core.lib()
            path = library_path()
            _module = tf.load_op_library(path)
            # The same library again (dlopen hands back the loaded one), for its C functions.
            _native = ctypes.CDLL(path)
            _native.overlap_tf_override_wait_bound.argtypes = [ctypes.c_double]
            _native.overlap_tf_override_wait_bound.restype = None
            _native.overlap_tf_abandoned_waits.argtypes = []
            _native.overlap_tf_abandoned_waits.restype = ctypes.c_int
            _native.overlap_tf_is_parked.argtypes = [ctypes.c_char_p]
            _native.overlap_tf_is_parked.restype = ctypes.c_int
            _native.overlap_tf_abandon_parked.argtypes = [ctypes.c_char_p]
            _native.overlap_tf_abandon_parked.restype = ctypes.c_int
            _native.overlap_tf_parked_reductions.argtypes = []
            _native.overlap_tf_parked_reductions.restype = ctypes.c_int
        return _module


_native = None


def override_wait_bound(seconds):
    """For tests: every kernel's wait gives up after `seconds` instead of the core's bound
    (overlap._core.wait_bound(), native/waiter.h), as if the core had failed to end the
    operation; 0 goes back to the core's."""
    load()
    _native.overlap_tf_override_wait_bound(float(seconds))


def abandoned_waits():
    """Kernels' operations whose wait gave up and that still run (their handles and tensors are
    kept until they end)."""
    load()
    return _native.overlap_tf_abandoned_waits()


def is_parked(name):
    """Whether a gradient allreduce submitted under `name` waits to be collected."""
    load()
    return bool(_native.overlap_tf_is_parked(name.encode()))


def abandon_parked(name):
    """Gives up the gradient allreduce parked under `name`, if any (its optimizer was collected):
    freed unread once it ends. Returns whether one was parked."""
    load()
    return bool(_native.overlap_tf_abandon_parked(name.encode()))


def parked_reductions():
    """Gradient allreduces submitted for an update at forward and not yet collected
    (native/pending.h)."""
    load()
    return _native.overlap_tf_parked_reductions()
