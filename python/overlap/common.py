"""Framework-neutral pieces of the Horovod-compatible API: exceptions, reduce ops, process sets,
overlap's runtime compressors and build queries. The torch and TensorFlow adapters re-export
them."""


class HorovodInternalError(RuntimeError):
    """A collective failed on this rank: a mismatch between ranks, a lost peer, a timeout, or
    a shutdown with the operation pending. The message names the rank, the tensor and the cause."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod raises this in elastic mode; overlap has no elastic mode, so it is never raised."""


# Horovod's values, so scripts that compare or store them keep working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


def core_reduce_op(op):
    """The runtime's reduction code (overlap::ReduceOp) for one of Horovod's op values; Average
    when op is None. Adasum and unknown values raise ValueError naming the rank."""
    from overlap import _core
    if op is None:
        op = Average
    if op == Adasum:
        raise ValueError("rank %d: overlap does not implement Adasum; use op=hvd.Average or "
                         "hvd.Sum" % _core.rank())
    codes = {Average: _core.C_AVERAGE, Sum: _core.C_SUM, Min: _core.C_MIN, Max: _core.C_MAX,
             Product: _core.C_PRODUCT}
    if op not in codes:
        raise ValueError("rank %d: unknown reduction op %r (use hvd.Average, Sum, Min, Max or "
                         "Product)" % (_core.rank(), op))
    return codes[op]


def start_runtime(comm=None, process_sets=None, **settings):
    """The body of every adapter's init(): overlap's options (planner, staleness, ...) become
    OVERLAP_* variables of this process, then the runtime starts on every rank (collective; a
    second call is a no-op). Horovod's comm and process_sets are checked: overlap always uses
    every rank (MPI_COMM_WORLD), so a comm naming a subset, or extra process sets, raise."""
    from overlap import _core
    is_rank_list = isinstance(comm, (list, tuple))
    if comm is not None and not is_rank_list and not hasattr(comm, "Get_size"):
        raise ValueError("init(comm=...): expected an mpi4py communicator or a list of ranks")
    _core.apply_init_settings(**settings)
    _core.init()
    world = _core.size()
    if comm is not None and (sorted(comm) != list(range(world)) if is_rank_list
                             else comm.Get_size() != world):
        raise NotImplementedError("rank %d: init(comm=%r): overlap runs on all ranks "
                                  "(MPI_COMM_WORLD) only" % (_core.rank(), comm))
    for process_set in process_sets or []:
        add_process_set(process_set)


_cross = {}


def cross_topology():
    """(cross_rank, cross_size): this rank's position among the ranks with its local_rank, one
    per host. Found once with an allgather of local ranks through the core (collective on first
    call) and kept until reset_cross_topology()."""
    import ctypes
    from overlap import _core
    if "value" not in _cross:
        mine = (ctypes.c_int32 * 1)(_core.local_rank())
        buffer = _core.Buffer(ctypes.addressof(mine), 4, _core.INT32, [1], mine)
        handle = _core.allgather("__overlap.cross_topology", buffer)
        handle.wait()
        address, _, shape = handle.output()
        locals_ = list((ctypes.c_int32 * shape[0]).from_address(address))
        peers = [r for r, lr in enumerate(locals_) if lr == _core.local_rank()]
        _cross["value"] = (peers.index(_core.rank()), len(peers))
    return _cross["value"]


def reset_cross_topology():
    """Forgets the topology (after shutdown: a later init may run on other hosts)."""
    _cross.clear()


class ProcessSet:
    """A set of ranks that collectives may be restricted to.

    overlap runs every collective on all ranks; the global set is the only one it supports.
    A ProcessSet listing every rank behaves as the global set, any other raises (see
    add_process_set)."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    def size(self):
        from overlap import _core
        return _core.size() if self.ranks is None else len(self.ranks)

    def rank(self):
        from overlap import _core
        if self.ranks is None:
            return _core.rank()
        return self.ranks.index(_core.rank()) if _core.rank() in self.ranks else -1

    def included(self):
        return self.rank() >= 0


global_process_set = ProcessSet()


def _check_process_set(process_set):
    if process_set is None or process_set is global_process_set:
        return
    from overlap import _core
    if process_set.ranks is not None and process_set.ranks == list(range(_core.size())):
        return
    raise NotImplementedError(
        "rank %d: process set %r: overlap runs collectives on all ranks only; sub-communicator "
        "process sets are not implemented yet (use the global process set)" %
        (_core.rank(), process_set))


def add_process_set(process_set):
    """Registers a process set. Only one holding every rank is accepted (it is the global set)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    _check_process_set(process_set)
    process_set.process_set_id = 0
    return process_set


def remove_process_set(process_set):
    """Removing the global set is refused, as in Horovod; there are no others."""
    return False


# Build queries, answered for the core library actually loaded.
def mpi_built():
    return True


def mpi_enabled():
    return True


def mpi_threads_supported():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


# The runtime's executor is MPI; the NCCL data path is not reachable from it yet.
def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


# Horovod's Compressor interface and its no-op compressor, shared by the adapters; each adapter
# adds the fp16 cast in its framework's types. Then the compressors the runtime applies with
# error feedback (docs/compression.md).

class Compressor:
    """Interface: compress before the collective, decompress after it. `runtime_spec` names a
    compressor the runtime applies (with error feedback) instead; None for Python-side ones."""

    runtime_spec = None

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class RuntimeCompressor:
    """A runtime compressor with error feedback, named by its spec string ("topk:ratio=0.01").
    The framework tensor passes through unchanged; the runtime compresses what it sends and
    keeps the rest in a per-tensor residual. Applies to float32 gradients reduced with Sum or
    Average; the runtime checks the spec."""

    def __init__(self, spec):
        self.runtime_spec = spec

    def compress(self, tensor):
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor

    def __repr__(self):
        return "RuntimeCompressor(%r)" % self.runtime_spec


def _spec(name, **params):
    given = ",".join("%s=%s" % (k, v) for k, v in params.items() if v is not None)
    return RuntimeCompressor(name + (":" + given if given else ""))


class RuntimeCompressors:
    """overlap's compressors, as static methods of each adapter's Compression class."""

    @staticmethod
    def runtime(spec):
        return RuntimeCompressor(spec)

    @staticmethod
    def fp16_ef():
        return _spec("fp16")

    @staticmethod
    def bf16():
        return _spec("bf16")

    @staticmethod
    def topk(ratio=None, k=None, method=None):
        return _spec("topk", ratio=ratio, k=k, method=method)

    @staticmethod
    def randomk(ratio=None, k=None, seed=None):
        return _spec("randomk", ratio=ratio, k=k, seed=seed)

    @staticmethod
    def covap(R=None):
        return _spec("covap", R=R)

    @staticmethod
    def onebit():
        return _spec("efsign")

    @staticmethod
    def powersgd(rank=None):
        return _spec("powersgd", rank=rank)
