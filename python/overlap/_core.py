"""The one binding to liboverlap.so (runtime/c_api.h), shared by every framework adapter.

It knows buffers (address, bytes, dtype code, shape), handles and errors; the adapters turn
their tensors into buffers and back. The library is the one installed next to this file by
``pip install .``, or the one named by OVERLAP_LIBRARY (tests and development trees).
"""

import atexit
import ctypes
import functools
import json
import os
import sys
import threading
import time

from overlap.common import HorovodInternalError

# overlap::DataType (collectives/dtype.h).
UINT8, INT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(8)
DTYPE_SIZES = {UINT8: 1, INT8: 1, INT32: 4, INT64: 8, FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4,
               FLOAT64: 8}

# overlap::ReduceOp (collectives/dtype.h).
C_SUM, C_AVERAGE, C_MIN, C_MAX, C_PRODUCT, C_ADASUM = range(6)

# absl::StatusCode values the binding tells apart.
_OK, _INVALID_ARGUMENT, _DEADLINE_EXCEEDED, _NOT_FOUND, _FAILED_PRECONDITION = 0, 3, 4, 5, 9

_C_API_VERSION = 12
_MAX_NDIM = 32


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("capacity_bytes", ctypes.c_int64),
                ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("device_kind", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("stream", ctypes.c_void_p)]

DEVICE_CPU, DEVICE_CUDA = 0, 1


_lib = None
_lib_lock = threading.Lock()


def library_path():
    path = os.environ.get("OVERLAP_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "liboverlap.so")


def _declare(lib):
    h = ctypes.c_void_p
    hp = ctypes.POINTER(ctypes.c_void_p)
    t = ctypes.POINTER(_Tensor)
    sigs = {
        "overlap_c_api_version": ([], ctypes.c_int),
        "overlap_last_error": ([], ctypes.c_char_p),
        "overlap_init": ([], ctypes.c_int),
        "overlap_init_with_settings": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.POINTER(ctypes.c_char_p)], ctypes.c_int),
        "overlap_config_json": ([], ctypes.c_char_p),
        "overlap_shutdown": ([], ctypes.c_int),
        "overlap_abort": ([ctypes.c_char_p], ctypes.c_int),
        "overlap_is_initialized": ([], ctypes.c_int),
        "overlap_rank": ([], ctypes.c_int),
        "overlap_size": ([], ctypes.c_int),
        "overlap_local_rank": ([], ctypes.c_int),
        "overlap_local_size": ([], ctypes.c_int),
        "overlap_start_forward": ([], ctypes.c_int),
        "overlap_start_backward": ([], ctypes.c_int),
        "overlap_start_update": ([], ctypes.c_int),
        "overlap_note_update_ms": ([ctypes.c_double], ctypes.c_int),
        "overlap_start_timeline": ([ctypes.c_char_p], ctypes.c_int),
        "overlap_stop_timeline": ([], ctypes.c_int),
        "overlap_allreduce": ([ctypes.c_char_p, t, t, ctypes.c_int32, ctypes.c_double,
                               ctypes.c_double, ctypes.c_char_p, hp], ctypes.c_int),
        "overlap_allreduce_flags": ([ctypes.c_int32, ctypes.c_char_p, t, t, ctypes.c_int32,
                                     ctypes.c_double, ctypes.c_double, ctypes.c_char_p,
                                     ctypes.c_int32, hp], ctypes.c_int),
        "overlap_grouped_allreduce": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p), t, t,
                                       ctypes.c_int32, ctypes.c_double, ctypes.c_double,
                                       ctypes.c_char_p, hp], ctypes.c_int),
        "overlap_allgather": ([ctypes.c_char_p, t, hp], ctypes.c_int),
        "overlap_broadcast": ([ctypes.c_char_p, t, t, ctypes.c_int32, hp], ctypes.c_int),
        "overlap_reducescatter": ([ctypes.c_char_p, t, ctypes.c_int32, ctypes.c_double,
                                   ctypes.c_double, hp], ctypes.c_int),
        "overlap_alltoall": ([ctypes.c_char_p, t, ctypes.POINTER(ctypes.c_int64),
                              ctypes.c_int32, hp], ctypes.c_int),
        "overlap_barrier": ([hp], ctypes.c_int),
        "overlap_join": ([hp], ctypes.c_int),
        "overlap_grouped_allreduce_ps": ([ctypes.c_int32, ctypes.c_int32,
                                          ctypes.POINTER(ctypes.c_char_p), t, t, ctypes.c_int32,
                                          ctypes.c_double, ctypes.c_double, ctypes.c_char_p, hp],
                                         ctypes.c_int),
        "overlap_allgather_ps": ([ctypes.c_int32, ctypes.c_char_p, t, hp], ctypes.c_int),
        "overlap_broadcast_ps": ([ctypes.c_int32, ctypes.c_char_p, t, t, ctypes.c_int32, hp],
                                 ctypes.c_int),
        "overlap_reducescatter_ps": ([ctypes.c_int32, ctypes.c_char_p, t, ctypes.c_int32,
                                      ctypes.c_double, ctypes.c_double, hp], ctypes.c_int),
        "overlap_alltoall_ps": ([ctypes.c_int32, ctypes.c_char_p, t,
                                 ctypes.POINTER(ctypes.c_int64), ctypes.c_int32, hp],
                                ctypes.c_int),
        "overlap_barrier_ps": ([ctypes.c_int32, hp], ctypes.c_int),
        "overlap_add_process_set": ([ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                     ctypes.POINTER(ctypes.c_int32)], ctypes.c_int),
        "overlap_remove_process_set": ([ctypes.c_int32], ctypes.c_int),
        "overlap_process_set_rank": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)],
                                     ctypes.c_int),
        "overlap_process_set_size": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)],
                                     ctypes.c_int),
        "overlap_process_set_ranks": ([ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                       ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)],
                                      ctypes.c_int),
        "overlap_process_set_ids": ([ctypes.POINTER(ctypes.c_int32), ctypes.c_int32],
                                    ctypes.c_int32),
        "overlap_handle_poll": ([h], ctypes.c_int),
        "overlap_handle_has_update": ([h], ctypes.c_int),
        "overlap_handle_wait": ([h, ctypes.c_double], ctypes.c_int),
        "overlap_handle_output": ([h, ctypes.POINTER(ctypes.c_void_p),
                                   ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                   ctypes.POINTER(ctypes.c_int64), ctypes.c_int32], ctypes.c_int),
        "overlap_cuda_device_count": ([], ctypes.c_int),
        "overlap_cuda_built": ([], ctypes.c_int),
        "overlap_nccl_version": ([], ctypes.c_int),
        "overlap_cuda_compresses": ([ctypes.c_char_p], ctypes.c_int),
        "overlap_handle_copy_output": ([h, ctypes.c_void_p, ctypes.c_int64], ctypes.c_int),
        "overlap_handle_received_splits": ([h, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32],
                                           ctypes.c_int32),
        "overlap_wait_bound": ([ctypes.POINTER(ctypes.c_double)] * 3, ctypes.c_int),
        "overlap_wait_expired": ([ctypes.c_char_p, ctypes.c_double], ctypes.c_int),
        "overlap_handles_wait": ([ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32,
                                  ctypes.c_double, ctypes.POINTER(ctypes.c_int32),
                                  ctypes.POINTER(ctypes.c_int32),
                                  ctypes.POINTER(ctypes.c_int32)], ctypes.c_int),
        "overlap_handle_free": ([h], None),
        "overlap_stats_json": ([], ctypes.c_char_p),
        "overlap_plan_schedule_json": ([], ctypes.c_char_p),
        "overlap_plan_clock": ([ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)],
                               ctypes.c_int),
        "overlap_save_compression_state": ([ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.POINTER(ctypes.c_int64)], ctypes.c_int),
        "overlap_restore_compression_state": ([ctypes.c_char_p, ctypes.c_int64], ctypes.c_int),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def lib():
    """The loaded core library (loaded on first use)."""
    global _lib
    if _lib is not None:  # every call into the core asks: no lock once loaded
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            if not os.path.exists(path):
                raise ImportError(
                    "overlap: core library not found at %s (install the package with "
                    "`pip install .` at the repository root, or set OVERLAP_LIBRARY to a built "
                    "bazel-bin/runtime/liboverlap.so)" % path)
            # RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols from the global scope.
            loaded = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            _declare(loaded)
            version = loaded.overlap_c_api_version()
            if version != _C_API_VERSION:
                raise ImportError("overlap: %s has C API version %d, this package needs %d "
                                  "(reinstall the package)" % (path, version, _C_API_VERSION))
            _lib = loaded
        return _lib


def last_error():
    return lib().overlap_last_error().decode("utf-8", "replace")


def check_submit(rc):
    """Raises for a failed submission: ValueError for a bad argument (as Horovod does for bad
    input and duplicate names), HorovodInternalError otherwise."""
    if rc == _OK:
        return
    message = last_error()
    if rc in (_INVALID_ARGUMENT, _FAILED_PRECONDITION):
        raise ValueError(message)
    raise HorovodInternalError(message)


def check(rc):
    if rc != _OK:
        raise HorovodInternalError(last_error())


# ---------------------------------------------------------------------------------------------
# Process lifetime.

_atexit_registered = False
_config = None  # the runtime's configuration (config()), read once per init


def init(settings=None):
    """Starts the runtime (collective). A second call while running is a no-op, as in Horovod.
    `settings`: {OVERLAP_* name: value} given in code, over the environment's (the C API's
    overlap_init_with_settings; this process's environment is left as it is)."""
    global _atexit_registered, _config
    if is_initialized():
        return
    _config = None
    items = sorted((settings or {}).items())
    names = (ctypes.c_char_p * max(len(items), 1))(*[k.encode() for k, _ in items])
    values = (ctypes.c_char_p * max(len(items), 1))(*[str(v).encode() for _, v in items])
    rc = lib().overlap_init_with_settings(len(items), names, values)
    if rc != _OK:
        raise ValueError(last_error()) if rc == _INVALID_ARGUMENT else HorovodInternalError(
            last_error())
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _install_excepthook()
        _atexit_registered = True
    for hook in _init_hooks:
        hook()


_init_hooks = []


def on_init(hook):
    """Calls hook() after every successful init() from now on (and now, if running): for what an
    adapter derives from the configuration."""
    _init_hooks.append(hook)
    if is_initialized():
        hook()


def shutdown():
    global _config
    _config = None
    if _lib is None:
        return
    check(lib().overlap_shutdown())


def abort(reason):
    """Ends this rank's part in the job at once, without waiting for the other ranks (whose
    waits then fail within seconds, naming this rank): for a process about to exit after an
    error. Shutdown would wait for ranks that may be waiting on this one. A no-op before init."""
    global _aborted
    if not is_initialized():
        return
    _aborted = True
    lib().overlap_abort(str(reason).encode("utf-8", "replace"))


_aborted = False


def _shutdown_at_exit():
    if _aborted:
        return  # the reason was logged; the process is exiting non-zero
    shutdown()


def _install_excepthook():
    """An uncaught exception ends the process: abort instead of the collective shutdown at exit,
    which would wait for ranks blocked on this one until OVERLAP_COLLECTIVE_TIMEOUT_S (Horovod
    fails the other ranks at once too). Interactive sessions go on after an uncaught exception,
    so there the runtime stays up."""
    previous = sys.excepthook
    owner = os.getpid()  # a forked child (a DataLoader worker) has no runtime of its own

    def abort_on_uncaught(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if os.getpid() == owner and not (hasattr(sys, "ps1") or sys.flags.interactive):
            abort("the program stopped on an uncaught %s: %s" % (exc_type.__name__, exc))

    sys.excepthook = abort_on_uncaught


def is_initialized():
    return _lib is not None and bool(_lib.overlap_is_initialized())


def require_init(what):
    if not is_initialized():
        raise ValueError("overlap has not been initialized; call hvd.init() before %s" % what)


def rank():
    require_init("rank()")
    return lib().overlap_rank()


def size():
    require_init("size()")
    return lib().overlap_size()


def local_rank():
    require_init("local_rank()")
    return lib().overlap_local_rank()


def local_size():
    require_init("local_size()")
    return lib().overlap_local_size()


def start_forward():
    check(lib().overlap_start_forward())


def start_backward():
    check(lib().overlap_start_backward())


def start_update():
    check(lib().overlap_start_update())


def note_update_ms(ms):
    """The time the program's optimizer just spent updating (overlap::NoteUpdateTime): the
    planner prices look-ahead's extra optimizer steps from it. A measurement only: it never
    fails the update it measured (after shutdown it is dropped)."""
    lib().overlap_note_update_ms(float(ms))


def start_timeline(path):
    require_init("start_timeline()")
    check_submit(lib().overlap_start_timeline(str(path).encode()))


def stop_timeline():
    check(lib().overlap_stop_timeline())


def cuda_device_count():
    """CUDA devices the core library sees: 0 when it was built without CUDA or has no GPU."""
    return lib().overlap_cuda_device_count()


def cuda_built():
    """Whether the core library was built with CUDA, whatever this machine has."""
    return lib().overlap_cuda_built() == 1


def nccl_version():
    """The NCCL version the core library runs with (22803 for 2.28.3); 0 without CUDA."""
    return lib().overlap_nccl_version()


@functools.lru_cache(maxsize=64)
def cuda_compresses(spec):
    """Whether the core compresses CUDA tensors with `spec` on the GPU (its CUDA kernels: fp16,
    bf16, covap, topk with method=exact, efsign)."""
    return lib().overlap_cuda_compresses(spec.encode()) == 1


def config():
    """The configuration the runtime runs with, {OVERLAP_* name: value as text}: the environment
    and init()'s options as the core read them (overlap::CurrentConfig). Before init: {}."""
    global _config
    if _config is None:
        text = lib().overlap_config_json() if is_initialized() else None
        if text is None:
            return {}
        _config = json.loads(text.decode())
    return _config


def setting(name, default):
    """One value of config(), converted to the type of `default`. Before init (an optimizer made
    first), the environment's value, else `default`."""
    value = config().get(name) if is_initialized() else (os.environ.get(name) or None)
    try:
        return default if value is None else type(default)(value)
    except ValueError:
        return default  # a bad OVERLAP_* value: init() names it


def wait_bound():
    """(seconds, stall timeout, collective timeout): how long a framework-side wait on one
    operation (Handle.wait, wait_all) goes on without an operation ending before it gives up; the
    core's own backstop (overlap_wait_bound in runtime/c_api.h, Handle::Wait() in overlap.h), so
    that C++, torch and TensorFlow waits give up alike. The core ends every operation sooner (a
    stall after OVERLAP_STALL_TIMEOUT_S, a lost peer or stuck collective after
    OVERLAP_COLLECTIVE_TIMEOUT_S); reaching the bound means it failed to, a bug (wait_expired)."""
    bound, stall, collective = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    lib().overlap_wait_bound(ctypes.byref(bound), ctypes.byref(stall), ctypes.byref(collective))
    return bound.value, stall.value, collective.value


def wait_expired(what, waited_s):
    """The error of a wait on `what` (e.g. "operation 'grad.0'") that reached wait_bound(): the
    core's message (overlap_wait_expired)."""
    lib().overlap_wait_expired(_enc(what), float(waited_s))
    return HorovodInternalError(last_error())


def stats():
    """The runtime's counters and plan (overlap::Stats()) as a dict."""
    return json.loads(lib().overlap_stats_json().decode())


def plan_clock():
    """(generation, step): the generation of plan_schedule(), which changes when a plan is
    adopted or dropped, and the forward markers so far (Stats().steps). Cheap: once a step."""
    generation, step = ctypes.c_int64(0), ctypes.c_int64(0)
    lib().overlap_plan_clock(ctypes.byref(generation), ctypes.byref(step))
    return generation.value, step.value


def plan_schedule():
    """The delays and update periods of the plan in force, per gradient (overlap::PlanSchedule):
    {"generation", "first_step", "first_pass", "tensors": {name: [[offset, count, delay, period,
    phase], ...]}}; a tensor's submission in the step of forward marker first_step runs in pass
    first_pass, each later step's in the next. Tensors that the plan runs synchronously (or no
    plan) are absent."""
    return json.loads(lib().overlap_plan_schedule_json().decode())


def save_compression_state():
    data, n = ctypes.c_void_p(), ctypes.c_int64()
    check(lib().overlap_save_compression_state(ctypes.byref(data), ctypes.byref(n)))
    return ctypes.string_at(data, n.value)


def restore_compression_state(snapshot):
    check_submit(lib().overlap_restore_compression_state(snapshot, len(snapshot)))


# ---------------------------------------------------------------------------------------------
# Buffers and operations.

class Buffer:
    """Caller-owned memory as the C API sees it. `owner` keeps the memory alive."""

    __slots__ = ("struct", "shape_array", "owner")

    def __init__(self, address, nbytes, dtype, shape, owner, device_kind=DEVICE_CPU,
                 device_index=0, stream=None):
        self.shape_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.struct = _Tensor(address, nbytes, dtype, len(shape), self.shape_array, device_kind,
                              device_index, stream)
        self.owner = owner


# overlap_allreduce_flags' flags (runtime/c_api.h).
ALLREDUCE_GRADIENT = 1
ALLREDUCE_LOOKS_AHEAD = 4


def gradient_flags(looks_ahead):
    """The flags of a gradient's allreduce: a delayed plan may deliver it late, and (looks_ahead)
    its optimizer looks ahead under delays, which the planner charges."""
    return ALLREDUCE_GRADIENT | (ALLREDUCE_LOOKS_AHEAD if looks_ahead else 0)


class InPlaceSlot:
    """A gradient of one shape, dtype and device, reduced in place under one name step after
    step by DistributedOptimizer; a delayed plan may deliver it late (overlap_allreduce_flags;
    `looks_ahead`: gradient_flags). Its name, shape, device, compressor and the C call are
    prepared once, so a submission only sets the address (and, for a CUDA tensor, the stream it
    was written on): with one gradient per parameter per step, the Python cost per gradient is
    the optimizer's budget (Horovod and DDP pay it in C++), and on a GPU that cost delays the
    launch of the backward's kernels."""

    __slots__ = ("name", "_c_name", "_shape_array", "_struct", "_ref", "_call", "_compression",
                 "_flags")

    def __init__(self, name, dtype, shape, nbytes, compression=None, device_kind=DEVICE_CPU,
                 device_index=0, looks_ahead=False):
        self.name = name
        self._c_name = name.encode()
        self._shape_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._struct = _Tensor(None, nbytes, dtype, len(shape), self._shape_array, device_kind,
                               device_index, None)
        self._ref = ctypes.byref(self._struct)
        self._call = lib().overlap_allreduce_flags
        self._compression = _enc(compression)
        self._flags = gradient_flags(looks_ahead)

    def allreduce(self, address, op, prescale, postscale, process_set=0, stream=None):
        """allreduce() of the tensor at `address` into itself; `stream`: the CUDA stream that
        wrote it (None: the legacy default stream, or a host tensor)."""
        self._struct.data = address
        self._struct.stream = stream
        p = ctypes.c_void_p()
        rc = self._call(process_set, self._c_name, self._ref, self._ref, op, prescale, postscale,
                        self._compression, self._flags, ctypes.byref(p))
        if rc != _OK:
            check_submit(rc)
        return Handle(p, self.name)


class Handle:
    """One submitted operation. Frees the C handle when collected. `keep`: what must stay
    allocated while the operation may run (its Buffers), kept by the handle itself so that a
    wait that gives up (wait_bound) cannot leave the core writing into freed memory."""

    __slots__ = ("_ptr", "name", "_keep")

    def __init__(self, ptr, name, keep=None):
        self._ptr = ptr
        self.name = name
        self._keep = keep

    def poll(self):
        return bool(lib().overlap_handle_poll(self._ptr))

    def has_update(self):
        """False when a delayed plan had no update for this allreduce this step (its output is
        zeros; runtime/planes/plan_delays.h): the caller should skip the update."""
        return bool(lib().overlap_handle_has_update(self._ptr))

    def wait(self):
        """Blocks until the operation ends; raises HorovodInternalError if it failed. Waits in
        one-second slices so that Ctrl-C reaches Python. The runtime's own timeouts end it; if
        they have not after wait_bound() seconds, the wait gives up with wait_expired's error
        and the handle (with its tensors) is kept until the operation ends."""
        c = lib()
        start = time.monotonic()
        deadline = None  # worked out at the first slice that runs out: most waits end sooner
        while True:
            rc = c.overlap_handle_wait(self._ptr, 1.0)
            if rc == _DEADLINE_EXCEEDED:
                if not c.overlap_handle_poll(self._ptr):
                    now = time.monotonic()
                    if deadline is None:
                        deadline = start + wait_bound()[0]
                    if now < deadline:
                        continue
                    _abandon([self])
                    raise wait_expired("operation '%s'" % self.name, now - start)
                # It finished between the timeout and the poll: ask again for its own status.
                rc = c.overlap_handle_wait(self._ptr, 0.0)
            check(rc)
            return

    def output(self):
        """(address, dtype, shape) of the runtime-owned result, valid while this handle lives."""
        data, dtype, ndim = ctypes.c_void_p(), ctypes.c_int32(), ctypes.c_int32()
        shape = (ctypes.c_int64 * _MAX_NDIM)()
        check(lib().overlap_handle_output(self._ptr, ctypes.byref(data), ctypes.byref(dtype),
                                          ctypes.byref(ndim), shape, _MAX_NDIM))
        return data.value, dtype.value, [shape[i] for i in range(ndim.value)]

    def copy_output(self, address, nbytes):
        """Copies the runtime-owned result to `address` (on the result's device); returns once
        the copy is done."""
        check(lib().overlap_handle_copy_output(self._ptr, address, nbytes))

    def received_splits(self):
        buf = (ctypes.c_int64 * 4096)()
        n = lib().overlap_handle_received_splits(self._ptr, buf, 4096)
        return [buf[i] for i in range(min(n, 4096))]

    def __del__(self):
        if self._ptr and _lib is not None:
            _lib.overlap_handle_free(self._ptr)
            self._ptr = None


def wait_all(handles):
    """Handle.wait() for every handle, in order, in one call into the core; returns each one's
    has_update(). Raises HorovodInternalError for the first that failed. Waits in one-second
    slices so that Ctrl-C reaches Python, as Handle.wait(), and gives up as it does once
    wait_bound() seconds pass without one more of the handles ending (the operations of a step
    queue behind each other, so the bound applies to each in turn)."""
    n = len(handles)
    if n == 0:
        return []
    c = lib()
    ptrs = (ctypes.c_void_p * n)(*[h._ptr.value for h in handles])
    updates = (ctypes.c_int32 * n)()
    running = ctypes.c_int32(0)
    first = ctypes.c_int32(0)
    start, waiting_on, deadline = time.monotonic(), 0, None
    while True:
        rc = c.overlap_handles_wait(ptrs, n, 1.0, updates, ctypes.byref(first),
                                    ctypes.byref(running))
        if rc == _DEADLINE_EXCEEDED and running.value:
            # The slice ran out, not an operation.
            now = time.monotonic()
            if first.value != waiting_on:  # progress: the bound restarts for the next handle
                start, waiting_on, deadline = now, first.value, None
            if deadline is None:
                deadline = start + wait_bound()[0]
            if now < deadline:
                continue
            _abandon([h for h in handles[first.value:] if not h.poll()])
            raise wait_expired("operation '%s'" % handles[first.value].name, now - start)
        check(rc)
        return [bool(u) for u in updates]


# Handles whose wait gave up (wait_bound) while their operation still ran: kept, with their
# tensors, until it ends, so that the core never writes into memory Python has freed. Swept
# whenever another one joins; in a healthy runtime the list stays empty.
_abandoned = []
_abandoned_lock = threading.Lock()


def _abandon(handles):
    with _abandoned_lock:
        _abandoned[:] = [h for h in _abandoned if not h.poll()] + handles


def abandoned_handles():
    """How many handles gave up waiting (wait_bound) and still run; for tests."""
    with _abandoned_lock:
        _abandoned[:] = [h for h in _abandoned if not h.poll()]
        return len(_abandoned)


def _out_handle():
    return ctypes.c_void_p()


def _finish(rc, ptr, name, keep=None):
    check_submit(rc)
    return Handle(ptr, name, keep)


def _enc(s):
    return None if s is None else s.encode()


# `process_set`: the id of the process set to run on (0, the default, is every rank).

def allreduce(name, inp, out, op, prescale, postscale, compression, process_set=0,
              gradient=False, looks_ahead=False):
    """`gradient`: a gradient the optimizer applies, which a delayed plan may deliver late
    (overlap_allreduce_flags; `looks_ahead`: gradient_flags); any other allreduce carries its
    own step's result."""
    p = _out_handle()
    flags = gradient_flags(looks_ahead) if gradient else 0
    rc = lib().overlap_allreduce_flags(process_set, name.encode(), ctypes.byref(inp.struct),
                                       ctypes.byref(out.struct), op, prescale, postscale,
                                       _enc(compression), flags, ctypes.byref(p))
    return _finish(rc, p, name, (inp, out))


def grouped_allreduce(names, inputs, outputs, op, prescale, postscale, compression,
                      process_set=0):
    n = len(names)
    c_names = (ctypes.c_char_p * n)(*[s.encode() for s in names])
    c_in = (_Tensor * n)(*[b.struct for b in inputs])
    c_out = (_Tensor * n)(*[b.struct for b in outputs])
    p = _out_handle()
    rc = lib().overlap_grouped_allreduce_ps(process_set, n, c_names, c_in, c_out, op, prescale,
                                            postscale, _enc(compression), ctypes.byref(p))
    return _finish(rc, p, "group[%s]" % ",".join(names), (inputs, outputs))


def allgather(name, inp, process_set=0):
    p = _out_handle()
    rc = lib().overlap_allgather_ps(process_set, name.encode(), ctypes.byref(inp.struct),
                                    ctypes.byref(p))
    return _finish(rc, p, name, inp)


def broadcast(name, inp, out, root, process_set=0):
    """`root` is a global rank, a member of the process set (as in Horovod)."""
    p = _out_handle()
    rc = lib().overlap_broadcast_ps(process_set, name.encode(), ctypes.byref(inp.struct),
                                    ctypes.byref(out.struct), root, ctypes.byref(p))
    return _finish(rc, p, name, (inp, out))


def reducescatter(name, inp, op, prescale, postscale, process_set=0):
    p = _out_handle()
    rc = lib().overlap_reducescatter_ps(process_set, name.encode(), ctypes.byref(inp.struct), op,
                                        prescale, postscale, ctypes.byref(p))
    return _finish(rc, p, name, inp)


def alltoall(name, inp, splits, process_set=0):
    p = _out_handle()
    if splits is None:
        rc = lib().overlap_alltoall_ps(process_set, name.encode(), ctypes.byref(inp.struct), None,
                                       0, ctypes.byref(p))
    else:
        arr = (ctypes.c_int64 * len(splits))(*splits)
        rc = lib().overlap_alltoall_ps(process_set, name.encode(), ctypes.byref(inp.struct), arr,
                                       len(splits), ctypes.byref(p))
    return _finish(rc, p, name, inp)


def barrier(process_set=0):
    p = _out_handle()
    return _finish(lib().overlap_barrier_ps(process_set, ctypes.byref(p)), p, "__barrier")


# ---------------------------------------------------------------------------------------------
# Process sets (overlap.h, AddProcessSet).

def add_process_set(ranks):
    """Registers the set of global `ranks` (collective over every rank); returns its id.
    ValueError, the same on every rank, for invalid ranks or ranks that disagree."""
    require_init("add_process_set()")
    arr = (ctypes.c_int32 * max(len(ranks), 1))(*ranks)
    out = ctypes.c_int32()
    check_submit(lib().overlap_add_process_set(arr, len(ranks), ctypes.byref(out)))
    return out.value


def remove_process_set(process_set_id):
    """Shuts set `process_set_id` down and forgets it (collective over every rank)."""
    require_init("remove_process_set()")
    check_submit(lib().overlap_remove_process_set(process_set_id))


def _query(fn, process_set_id):
    out = ctypes.c_int32()
    rc = fn(process_set_id, ctypes.byref(out))
    if rc != _OK:
        raise ValueError(last_error())
    return out.value


def process_set_rank(process_set_id):
    """This rank's position in the set; ValueError on a non-member or an unknown id."""
    require_init("ProcessSet.rank()")
    return _query(lib().overlap_process_set_rank, process_set_id)


def process_set_size(process_set_id):
    require_init("ProcessSet.size()")
    return _query(lib().overlap_process_set_size, process_set_id)


def process_set_ranks(process_set_id):
    require_init("ProcessSet.ranks")
    count = ctypes.c_int32()
    buf = (ctypes.c_int32 * 4096)()
    rc = lib().overlap_process_set_ranks(process_set_id, buf, 4096, ctypes.byref(count))
    if rc != _OK:
        raise ValueError(last_error())
    return [buf[i] for i in range(min(count.value, 4096))]


def process_set_ids():
    """The registered ids, 0 first; [] before init."""
    if not is_initialized():
        return []
    buf = (ctypes.c_int32 * 4096)()
    n = lib().overlap_process_set_ids(buf, 4096)
    return [buf[i] for i in range(min(n, 4096))]


def join():
    p = _out_handle()
    return _finish(lib().overlap_join(ctypes.byref(p)), p, "__join")


def copy_bytes(dst_address, src_address, nbytes):
    if nbytes:
        ctypes.memmove(dst_address, src_address, nbytes)


# Settings an adapter's init() may take as arguments, by the OVERLAP_* setting each sets.
_INIT_SETTINGS = {"planner": "OVERLAP_PLANNER", "staleness": "OVERLAP_STALENESS",
                  "max_period": "OVERLAP_MAX_PERIOD", "budget": "OVERLAP_BUDGET",
                  "compression": "OVERLAP_COMPRESSION",
                  "profile_steps": "OVERLAP_PROFILE_STEPS", "timeline": "OVERLAP_TIMELINE",
                  "coordinator_wait": "OVERLAP_COORDINATOR_WAIT"}


def init_settings(**options):
    """init()'s options as {OVERLAP_* name: value} for init(settings); None means unset."""
    settings = {}
    for key, value in options.items():
        if key not in _INIT_SETTINGS:
            raise TypeError("init() got an unexpected keyword argument '%s' (overlap's options: "
                            "%s)" % (key, ", ".join(sorted(_INIT_SETTINGS))))
        if value is not None:
            settings[_INIT_SETTINGS[key]] = value
    return settings
