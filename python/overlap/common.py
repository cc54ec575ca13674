"""Framework-neutral pieces of the Horovod-compatible API: exceptions, reduce ops, process sets
and build queries. The torch and TensorFlow adapters re-export them."""


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
