"""Horovod's basic functions, the same for every framework: init and shutdown, the rank queries,
the cross-host topology and the timeline. overlap.torch and overlap.tensorflow re-export them."""

from overlap import _core
from overlap.common import cross_topology, reset_cross_topology, start_runtime

is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
stats = _core.stats
save_compression_state = _core.save_compression_state
restore_compression_state = _core.restore_compression_state


def init(comm=None, process_sets=None, planner=None, staleness=None, max_period=None,
         compression=None, profile_steps=None, timeline=None, budget=None):
    """Starts overlap on every rank (collective); a second call is a no-op.

    comm and process_sets are Horovod's: overlap always uses every rank (MPI_COMM_WORLD), so a
    comm naming a subset raises; process_sets (ProcessSet objects or rank lists) are registered
    in order, as add_process_set would (collective). overlap's options (each also an
    OVERLAP_* variable, docs/tuning.md): planner, staleness, max_period, budget (deft's
    convergence budget; here -1 by default, the bound max(staleness, (max_period - 1) / 2),
    measured under the default staleness correction's look-ahead; 0 keeps deft's plans
    synchronous, as the C++ runtime's default does), compression (the
    default error-feedback compressor spec, e.g. "fp16"), profile_steps, timeline (a path)."""
    start_runtime(comm, process_sets, planner=planner, staleness=staleness,
                  max_period=max_period, budget=budget, compression=compression,
                  profile_steps=profile_steps, timeline=timeline)


def shutdown():
    """Finishes pending operations and stops the runtime (collective)."""
    _core.shutdown()
    reset_cross_topology()


def cross_rank():
    return cross_topology()[0]


def cross_size():
    return cross_topology()[1]


def is_homogeneous():
    return _core.size() % _core.local_size() == 0


def start_timeline(file_path, mark_cycles=False):
    """Writes this rank's timeline (a Chrome trace) to file_path (rank r > 0: file_path.rank<r>)
    until stop_timeline()."""
    _core.start_timeline(file_path)


def stop_timeline():
    _core.stop_timeline()
