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
    second call is a no-op). Horovod's comm is checked: overlap always uses every rank
    (MPI_COMM_WORLD), so a comm naming a subset raises. process_sets, as Horovod's: a list of
    ProcessSet objects (or rank lists) registered at once, in order (collective), or "dynamic"
    (accepted and ignored: add_process_set always works)."""
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
    global_process_set.ranks = list(range(world))
    if process_sets == "dynamic":
        return
    seen = set()
    for process_set in process_sets or []:
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        # A set registered by an earlier init of this process (a second init is a no-op).
        if process_set.process_set_id is not None:
            continue
        if process_set.ranks is not None and tuple(process_set.ranks) in seen:
            continue  # a repeat in the list stays unregistered, as Horovod invalidates it
        if process_set.ranks is not None:
            seen.add(tuple(process_set.ranks))
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
    """A set of ranks whose collectives run among themselves, concurrently with the other sets'
    (Horovod's ProcessSet). Make one from a list of global ranks, then register it with
    hvd.init(process_sets=[...]) or hvd.add_process_set(); registration sets process_set_id.
    Pass it as process_set= to a collective: "rank" then means the position in the set (rank()),
    except broadcast's root_rank, which is a global rank, as in Horovod.

    ProcessSet() with no ranks is the global set (id 0), like hvd.global_process_set."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is None:
            self.process_set_id = 0
        elif hasattr(ranks_or_comm, "Get_size") and hasattr(ranks_or_comm, "Get_group"):
            self.mpi_comm = ranks_or_comm
        else:
            try:
                ranks = sorted(ranks_or_comm)
            except TypeError:
                raise ValueError("ProcessSet should be initialized with a list of process ranks "
                                 "or an mpi4py Comm object, got %r" % (ranks_or_comm,))
            if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
                raise ValueError("ProcessSet should be initialized with a list of process ranks "
                                 "(ints), got %r" % (ranks_or_comm,))
            self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set; None while it is not registered."""
        from overlap import _core
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _core.size()
        return _core.process_set_size(self.process_set_id)

    def rank(self):
        """This process's position in the set (for reading an allgather's result, say); None
        while it is not registered; ValueError on a process that is not a member."""
        from overlap import _core
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _core.rank()
        return _core.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is a member; None when the set has no ranks yet."""
        from overlap import _core
        if self.process_set_id == 0:
            return True
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet()


def process_set_id(process_set):
    """The runtime's id of `process_set` for an operation: 0 for None and the global set.
    ValueError naming this rank for anything else that is not a registered ProcessSet."""
    from overlap import _core
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError("rank %d: process_set must be an hvd.ProcessSet, got %r" %
                         (_core.rank(), process_set))
    if process_set.process_set_id is None:
        raise ValueError("rank %d: %s is not registered: pass it to hvd.init(process_sets=...) "
                         "or hvd.add_process_set() first (a removed set is no longer "
                         "registered)" % (_core.rank(), process_set))
    return process_set.process_set_id


def add_process_set(process_set):
    """Registers a process set after init (collective: every rank calls it, in the same order)
    and returns it, its process_set_id set. `process_set` is a ProcessSet or a list of ranks.
    ValueError, the same on every rank, for bad ranks (out of range, listed twice, all of them)
    or ranks another registered set already has; NotImplementedError for an MPI communicator."""
    from overlap import _core
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None and process_set.mpi_comm is not None:
        raise NotImplementedError(
            "rank %d: adding process sets defined by an MPI communicator is not implemented; "
            "build the process set from a list of ranks" % _core.rank())
    if process_set.ranks is None:
        raise ValueError("rank %d: %s is the global process set, which is always registered" %
                         (_core.rank(), process_set))
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes a registered process set (collective, as add_process_set) and returns True; the
    object is invalidated. False, as in Horovod, for the global set and for a set that is not
    registered."""
    from overlap import _core
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    process_set._invalidate()
    # Every rank knows the same sets, so every rank takes the same branch.
    if set_id not in _core.process_set_ids():
        return False
    _core.remove_process_set(set_id)
    return True


def process_sets():
    """The registered process sets, global first, as ProcessSet objects."""
    from overlap import _core
    sets = []
    for set_id in _core.process_set_ids():
        if set_id == 0:
            sets.append(global_process_set)
            continue
        ps = ProcessSet(_core.process_set_ranks(set_id))
        ps.process_set_id = set_id
        sets.append(ps)
    return sets


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
