"""Framework-neutral pieces of the Horovod-compatible API: exceptions, reduce ops, process sets,
overlap's runtime compressors and build queries. The torch and TensorFlow adapters re-export
them."""

import ctypes
import itertools
import json
import os
import sys


class HorovodInternalError(RuntimeError):
    """A collective failed on this rank: a mismatch between ranks, a lost peer, a timeout, or
    a shutdown with the operation pending. The message names the rank, the tensor and the cause."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod raises this in elastic mode when hosts join or leave; overlap's ranks are fixed
    (overlap/elastic.py), so the runtime never raises it."""


# Horovod's values, so scripts that compare or store them keep working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


# Planners whose plans update each layer just before its forward (scheduler/plan.h,
# layerwise_update: ByteScheduler's, US-Byte's, DeAR's and DeFT's semantics), and auto, which may
# pick one of them: under them the adapters' DistributedOptimizers update at forward unless told
# otherwise, so the runtime runs the plan the simulator predicted and profiles each layer's real
# first use.
FORWARD_WINDOW_PLANNERS = ("bytescheduler", "usbyte", "dear", "deft", "auto")


def core_reduce_op(op):
    """The runtime's reduction code (overlap::ReduceOp) for one of Horovod's op values; Average
    when op is None. Unknown values raise ValueError naming the rank."""
    from overlap import _core
    if op is None:
        op = Average
    codes = {Average: _core.C_AVERAGE, Sum: _core.C_SUM, Min: _core.C_MIN, Max: _core.C_MAX,
             Product: _core.C_PRODUCT, Adasum: _core.C_ADASUM}
    if op not in codes:
        raise ValueError("rank %d: unknown reduction op %r (use hvd.Average, Sum, Min, Max, "
                         "Product or Adasum)" % (_core.rank(), op))
    return codes[op]


# Whether the running job's convergence budget is the adapters' default (start_runtime), not one
# the user gave: a staleness correction that does not look ahead then warns (overlap/staleness.py).
_budget_defaulted = False


def budget_defaulted():
    return _budget_defaulted


def start_runtime(comm=None, process_sets=None, **settings):
    """The body of every adapter's init(): the runtime starts on every rank with overlap's
    options (planner, staleness, ...) over the OVERLAP_* environment (collective; a second call
    is a no-op). Horovod's comm is checked: overlap always uses every rank
    (MPI_COMM_WORLD), so a comm naming a subset raises. process_sets, as Horovod's: a list of
    ProcessSet objects (of rank lists or mpi4py communicators) or rank lists, registered at
    once, in order, as add_process_set would (collective), or "dynamic" (accepted and ignored:
    add_process_set always works).

    deft's convergence budget defaults to its bound (-1) here, where the C++ runtime's is 0: the
    adapters' default staleness correction looks ahead, and under it the bound kept synchronous
    quality in every measured run (docs/time_to_accuracy.md, "Convergence budget"); it matters
    only with staleness > 0 or max_period > 1. budget=0 or OVERLAP_BUDGET keeps a plan
    synchronous."""
    global _budget_defaulted
    from overlap import _core
    if not _core.is_initialized():
        _budget_defaulted = (settings.get("budget") is None and
                             os.environ.get("OVERLAP_BUDGET") in (None, ""))
        if _budget_defaulted:
            settings["budget"] = -1
    is_rank_list = isinstance(comm, (list, tuple))
    if comm is not None and not is_rank_list and not hasattr(comm, "Get_size"):
        raise ValueError("init(comm=...): expected an mpi4py communicator or a list of ranks")
    _core.init(_core.init_settings(**settings))
    world = _core.size()
    if comm is not None and (sorted(comm) != list(range(world)) if is_rank_list
                             else comm.Get_size() != world):
        raise NotImplementedError("rank %d: init(comm=%r): overlap runs on all ranks "
                                  "(MPI_COMM_WORLD) only" % (_core.rank(), comm))
    global_process_set.ranks = list(range(world))
    if comm is not None and not is_rank_list:
        global_process_set.mpi_comm = comm  # as Horovod
    if process_sets == "dynamic":
        return
    # The rank lists registered so far by this call: the same on every rank, also for sets from
    # communicators (each rank's own communicator, but every rank registers all of them).
    seen = set()
    for process_set in process_sets or []:
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        # A set registered by an earlier init of this process (a second init is a no-op).
        if process_set.process_set_id is not None:
            continue
        if process_set.ranks is not None and tuple(process_set.ranks) in seen:
            continue  # a repeat in the list stays unregistered, as Horovod invalidates it
        add_process_set(process_set)
        seen.update(process_set._made_together)


_cross = {}


def cross_topology():
    """(cross_rank, cross_size): this rank's position among the ranks with its local_rank, one
    per host. Found once with an allgather of local ranks through the core (collective on first
    call) and kept until reset_cross_topology()."""
    from overlap import _core
    if "value" not in _cross:
        locals_ = _allgather_int32("__overlap.cross_topology", [_core.local_rank()])
        peers = [r for r, lr in enumerate(locals_) if lr == _core.local_rank()]
        _cross["value"] = (peers.index(_core.rank()), len(peers))
    return _cross["value"]


def _allgather_int32(name, values):
    """Every rank's list of int32 `values`, concatenated in rank order (collective over every
    rank, through the core's allgather on the global set)."""
    from overlap import _core
    mine = (ctypes.c_int32 * len(values))(*values)
    buffer = _core.Buffer(ctypes.addressof(mine), 4 * len(values), _core.INT32, [len(values)],
                          mine)
    handle = _core.allgather(name, buffer)
    handle.wait()
    address, _, shape = handle.output()
    return list((ctypes.c_int32 * shape[0]).from_address(address))


def _allgather_json(name, value):
    """Every rank's JSON-serialisable `value`, as a list in rank order (collective over every
    rank: an allgather of the lengths, then of the bytes)."""
    from overlap import _core
    data = json.dumps(value).encode()
    lengths = _allgather_int32(name + ".lengths", [len(data)])
    mine = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    buffer = _core.Buffer(ctypes.addressof(mine), len(data), _core.UINT8, [len(data)], mine)
    handle = _core.allgather(name + ".bytes", buffer)
    handle.wait()
    address, _, _ = handle.output()
    everything = ctypes.string_at(address, sum(lengths))
    offsets = list(itertools.accumulate([0] + lengths))
    return [json.loads(everything[offsets[r]:offsets[r + 1]]) for r in range(len(lengths))]


def reset_cross_topology():
    """Forgets the topology (after shutdown: a later init may run on other hosts)."""
    _cross.clear()


class ProcessSet:
    """A set of ranks whose collectives run among themselves, concurrently with the other sets'
    (Horovod's ProcessSet). Make one from a list of global ranks or from an mpi4py communicator,
    then register it with hvd.init(process_sets=[...]) or hvd.add_process_set(); registration
    sets process_set_id (and, for a communicator, ranks: its members' MPI_COMM_WORLD ranks).
    Pass it as process_set= to a collective: "rank" then means the position in the set (rank()),
    except broadcast's root_rank, which is a global rank, as in Horovod.

    ProcessSet() with no ranks is the global set (id 0), like hvd.global_process_set."""

    process_set_id = None
    ranks = None
    mpi_comm = None
    # {ranks: id} of every set registered with this one, the same on every rank: this set's
    # alone for a rank list; for a communicator, every rank's communicator's (remove_process_set
    # removes them together). Never mutated, only replaced.
    _made_together = {}

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is None:
            self.process_set_id = 0
        elif _is_mpi4py_comm(ranks_or_comm):
            self.mpi_comm = ranks_or_comm
        else:
            try:
                ranks = sorted(ranks_or_comm)
            except TypeError:
                ranks = None
            if ranks is None or any(not isinstance(r, int) or isinstance(r, bool)
                                    for r in ranks):
                raise ValueError(
                    "%sProcessSet needs a list of global ranks (ints) or an mpi4py communicator "
                    "(mpi4py.MPI.Comm), got %s" % (rank_prefix(), _describe(ranks_or_comm)))
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


def _is_mpi4py_comm(obj):
    """Whether `obj` is an mpi4py communicator. mpi4py is never imported here (importing it
    initialises MPI): a program holding a communicator has imported it already."""
    module = sys.modules.get("mpi4py.MPI")
    return module is not None and isinstance(obj, module.Comm)


def _describe(obj):
    """A value for a message that reads the same on every rank (no object addresses)."""
    text = repr(obj)
    if " at 0x" not in text:
        return text
    kind = type(obj)
    text = "an object of type %s.%s" % (kind.__module__, kind.__qualname__)
    if kind.__module__.startswith("mpi4py") and kind.__name__ == "Group":
        text += " (pass the communicator itself, not its group)"
    return text


def rank_prefix():
    """'rank R: ' for a message: the runtime's rank, or before init the launcher's (Open MPI's
    environment); '' when neither is known."""
    from overlap import _core
    if _core.is_initialized():
        return "rank %d: " % _core.rank()
    for variable in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if os.environ.get(variable, "").isdigit():
            return "rank %s: " % os.environ[variable]
    return ""


def _comm_members(comm):
    """(ranks, None): the MPI_COMM_WORLD ranks of `comm`'s members, sorted; or (None, why) when
    `comm` cannot make a process set. Local: no communication."""
    from mpi4py import MPI  # imported already: `comm` is one of its objects
    if comm == MPI.COMM_NULL:
        return None, ("its communicator is MPI.COMM_NULL, so this rank is in none (Split with "
                      "color MPI.UNDEFINED gives that); every rank must pass a communicator it "
                      "is a member of")
    if comm.Is_inter():
        return None, ("its communicator is an intercommunicator; a process set needs an "
                      "intracommunicator (Intercomm.Merge() makes one)")
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        # Translate_ranks is a class method in mpi4py 3 and a method in mpi4py 4: this call
        # reads the same in both.
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
    finally:
        group.Free()
        world.Free()
    outside = [i for i, r in enumerate(ranks) if r == MPI.UNDEFINED]
    if outside:
        return None, ("its communicator is not a sub-communicator of MPI_COMM_WORLD: its ranks "
                      "%s are not processes of this job (processes from MPI_Comm_spawn or "
                      "MPI_Comm_connect cannot be in a process set)" % outside)
    return sorted(ranks), None


_comm_registrations = itertools.count()


def _add_comm_process_sets(process_set):
    """Registers the sets that every rank's communicator makes (collective over every rank, each
    passing its own communicator, e.g. from COMM_WORLD.Split): the ranks agree on every rank's
    members (an allgather), refuse together if any rank's communicator cannot make a set, then
    register each distinct member list, in sorted order, as add_process_set would. As Horovod's
    horovod_init_multi_comm. `process_set` gets its own communicator's set."""
    from overlap import _core
    try:
        members, why = _comm_members(process_set.mpi_comm)
    except Exception as error:  # every rank must reach the allgather, to refuse together
        members, why = None, "reading its communicator failed: %s: %s" % (
            type(error).__name__, error)
    everyone = _allgather_json("__overlap.comm_process_set.%d" % next(_comm_registrations),
                               {"ranks": members, "why": why})
    refused = "rank %d: process set from an mpi4py communicator refused: " % _core.rank()
    reasons = ["rank %d: %s" % (r, e["why"]) for r, e in enumerate(everyone) if e["why"]]
    if reasons:
        raise ValueError(refused + "; ".join(reasons))
    made = sorted({tuple(e["ranks"]) for e in everyone})
    # Checked before adding any, so that a refusal leaves nothing half-registered; the texts are
    # the runtime's (AddProcessSet), and every rank knows the same registered sets.
    registered = {tuple(_core.process_set_ranks(i)): i for i in _core.process_set_ids() if i}
    for ranks in made:
        if len(ranks) == _core.size():
            raise ValueError(refused + "AddProcessSet(%s): these are all the ranks, which the "
                             "global process set 0 already has" % list(ranks))
        if ranks in registered:
            raise ValueError(refused + "AddProcessSet(%s): process set %d already has these "
                             "ranks" % (list(ranks), registered[ranks]))
    ids = {ranks: _core.add_process_set(list(ranks)) for ranks in made}
    process_set.ranks = members
    process_set.process_set_id = ids[tuple(members)]
    process_set._made_together = ids


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
    or ranks another registered set already has.

    A ProcessSet of an mpi4py communicator: every rank passes its own (the members of each
    rank's communicator make a set, as after COMM_WORLD.Split), and every distinct set is
    registered on every rank; this rank's object gets its communicator's set. Horovod 0.28
    takes these in init(comm=MPI.COMM_WORLD, process_sets=[...]) only; overlap also here and
    with init(process_sets=[...]). ValueError on every rank, naming each rank whose
    communicator cannot make a set (MPI.COMM_NULL, an intercommunicator, members outside
    MPI_COMM_WORLD) and why."""
    from overlap import _core
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id == 0 or (process_set.ranks is None and
                                           process_set.mpi_comm is None):
        raise ValueError("rank %d: %s is the global process set, which is always registered" %
                         (_core.rank(), process_set))
    if process_set.mpi_comm is not None:
        _add_comm_process_sets(process_set)
        return process_set
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    process_set._made_together = {tuple(process_set.ranks): process_set.process_set_id}
    return process_set


def remove_process_set(process_set):
    """Removes a registered process set (collective, as add_process_set) and returns True; the
    object is invalidated. False, as in Horovod, for the global set and for a set that is not
    registered. A set from an mpi4py communicator goes with every set registered with it (each
    rank removes its own communicator's set, and so all of them)."""
    from overlap import _core
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    process_set._invalidate()
    # Every rank knows the same sets, and _made_together is the same on every rank, so every
    # rank takes the same branch and removes the same sets in the same order.
    registered = _core.process_set_ids()
    if process_set.mpi_comm is None:
        if set_id not in registered:
            return False
        _core.remove_process_set(set_id)
        return True
    ids = sorted(i for i in process_set._made_together.values() if i in registered)
    for each in ids:
        _core.remove_process_set(each)
    return bool(ids)


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


# The TensorFlow op library's kernels are CPU ones; overlap.torch answers these two for the core
# library's CUDA path instead (overlap/torch/mpi_ops.py).
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


def sycl_built():
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
