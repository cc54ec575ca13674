"""Horovod's elastic-training API: the framework-neutral part.

Scripts written for ``hvd.elastic`` keep their structure: a State object holds what must survive
a reset (model, optimizer, counters), ``state.commit()`` marks a consistent point, and the
function wrapped by ``hvd.elastic.run`` starts by synchronising the state.

Under overlaprun's elastic flags (overlap/elastic_driver.py) a job runs in generations; MPI
cannot re-form a job around a lost rank, so a generation ends when hosts change and the next one
starts on the new set, resuming from the last commit:
 - ``commit()`` saves the state in memory, as Horovod does, and one rank per host also writes it
   to OVERLAP_ELASTIC_STATE_DIR on that host before the commit's collective, so a commit that
   returned on any rank is on every host. It then asks the driver (rank 0 does, and tells the
   others) whether hosts changed, and raises HostsUpdatedInterrupt if so.
 - ``run`` starts by finding the newest commit any host of the new generation holds and takes it
   from that rank, bit for bit; without one (the first generation) it takes rank 0's state.
 - HostsUpdatedInterrupt: every rank writes its current state as a commit, and the ranks exit
   together for the driver to start the next generation.
 - HorovodInternalError (a peer lost, a collective timed out): the state goes back to its last
   commit, which every host holds, and the rank exits with EXIT_RESTART for the driver to start
   the next generation without the failed host.

Without the driver (a plain overlaprun or mpirun job), the ranks are fixed: check_host_updates
never interrupts, and a failed collective rolls the state back to its last commit and raises the
error again, for the script to save a checkpoint and the job to be launched again.
"""

import copy
import functools
import hmac
import os
import pickle
import socket
import sys

from overlap import runner
from overlap.common import HorovodInternalError, HostsUpdatedInterrupt
from overlap.elastic_driver import EXIT_RESTART

# How long rank 0 waits for the elastic driver's answer before carrying on without it.
_DRIVER_TIMEOUT_S = 10.0


# Bound into a commit file's MAC, so that no other message signed with the job's key (the
# driver's frames, runner.py) is ever a valid commit.
_COMMIT_CONTEXT = b"overlap elastic commit v1"


class _DriverLink:
    """This rank's view of overlaprun's elastic driver (None outside an elastic job)."""

    # get()'s one link per process: the environment it is read from does not change.
    _current = None

    def __init__(self):
        self.endpoints = runner.parse_endpoints(os.environ["OVERLAP_ELASTIC_DRIVER"])
        self.key = bytes.fromhex(os.environ["OVERLAP_ELASTIC_KEY"])
        self.generation = int(os.environ.get("OVERLAP_ELASTIC_GENERATION", "0"))
        self.state_dir = os.environ["OVERLAP_ELASTIC_STATE_DIR"]

    @classmethod
    def get(cls):
        if not os.environ.get("OVERLAP_ELASTIC_DRIVER"):
            return None
        if cls._current is None:
            cls._current = cls()
        return cls._current

    def ask(self, message):
        """The driver's answer to `message`; raises OSError when no address answers in time."""
        try:
            return runner.ask_driver(self.endpoints, self.key, message, _DRIVER_TIMEOUT_S,
                                     _DRIVER_TIMEOUT_S)
        except OSError as e:
            raise OSError("the elastic driver did not answer: %s" % e) from e

    def commit_path(self):
        return os.path.join(self.state_dir, "commit-%s.pkl" % socket.gethostname())

    def write_commit(self, seq, payload):
        """This host's copy of commit `seq`: written aside and renamed, so a rank killed while
        writing leaves the previous commit whole; signed with the job's key, and in a folder
        only this user can write, so that nothing but this job's own commit is ever unpickled."""
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        data = pickle.dumps({"seq": seq, "generation": self.generation, "state": payload},
                            protocol=pickle.HIGHEST_PROTOCOL)
        path = self.commit_path()
        partial = "%s.%d.partial" % (path, os.getpid())
        with open(partial, "wb") as f:
            f.write(runner._mac(self.key, _COMMIT_CONTEXT, data))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)

    def read_commit(self):
        """(seq, payload) of this host's newest commit, or (0, None): none, or one whose
        signature does not check (said once)."""
        try:
            with open(self.commit_path(), "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return 0, None
        digest, data = blob[:32], blob[32:]
        if not hmac.compare_digest(digest, runner._mac(self.key, _COMMIT_CONTEXT, data)):
            sys.stderr.write("%s: elastic: %s is not this job's commit (its signature does not "
                             "check); ignoring it\n" % (socket.gethostname(), self.commit_path()))
            return 0, None
        saved = pickle.loads(data)
        return saved["seq"], saved["state"]


class State:
    """What a wrapped training function must be able to return to: subclasses save, restore and
    synchronise their objects, and say what a commit holds (_committed, _load_committed).
    ``commit()`` saves and then checks for host updates."""

    def __init__(self, bcast_object, get_rank, allgather_object=None, get_local_rank=None):
        from overlap import basics
        self._bcast_object = bcast_object
        self._allgather = allgather_object
        self._rank = get_rank
        self._local_rank = get_local_rank or basics.local_rank
        self._reset_callbacks = []
        self._commit_seq = 0
        # True while commit() checks for host updates: an interrupt then needs no new commit.
        self._just_committed = False

    def register_reset_callbacks(self, callbacks):
        """Callables run by on_reset(), after a reset and before the function runs again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's driver calls this when hosts change; overlap's tells rank 0 at commit."""

    def commit(self):
        """Saves the state as the point to return to (on every host, in an elastic job), then
        checks for host updates."""
        self.save()
        self._commit_seq += 1
        driver = _DriverLink.get()
        if driver is not None and self._local_rank() == 0:
            driver.write_commit(self._commit_seq, self._committed())
        self._just_committed = True
        try:
            self.check_host_updates()
        finally:
            self._just_committed = False

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the elastic driver says the hosts
        changed (rank 0 asks, and tells the others). Outside an elastic job, never."""
        driver = _DriverLink.get()
        if driver is None:
            return
        # A str on every rank: broadcast_object names its collective after the object's type.
        why = ""
        if self._rank() == 0:
            try:
                why = driver.ask(("hosts_changed", driver.generation)) or ""
            except OSError as e:
                sys.stderr.write("rank 0: %s; carrying on with the same hosts\n" % e)
        why = self._bcast_object(why)
        if why:
            error = HostsUpdatedInterrupt(why)
            error.at_commit = self._just_committed
            raise error

    def _allgather_object(self, value):
        """Every rank's `value`, by rank; through broadcasts when the State was made with
        Horovod's ObjectState(bcast_object, get_rank) signature alone."""
        if self._allgather is not None:
            return self._allgather(value)
        from overlap import basics
        return [self._bcast_object(value, root_rank=r) for r in range(basics.size())]

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self, root_rank=0):
        raise NotImplementedError()

    def _committed(self):
        """What save() kept, as plain picklable data."""
        raise NotImplementedError()

    def _load_committed(self, committed):
        """Makes `committed` (from _committed) the saved state, and restores it."""
        raise NotImplementedError()


class ObjectState(State):
    """State of plain picklable attributes, given as keyword arguments: ``state.epoch``,
    ``state.batch``. sync() takes rank 0's values."""

    def __init__(self, bcast_object, get_rank, allgather_object=None, get_local_rank=None,
                 **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         allgather_object=allgather_object, get_local_rank=get_local_rank)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self, root_rank=0):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=root_rank)
            self._set_attrs()

    def _committed(self):
        return {"objects": self._saved_state}

    def _load_committed(self, committed):
        self._saved_state = committed["objects"]
        ObjectState.restore(self)

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def _resume(state, driver):
    """The start of a generation: every rank takes the newest commit any host holds (module
    docstring), or rank 0's state when there is none yet."""
    seq, committed = driver.read_commit() if state._local_rank() == 0 else (0, None)
    seqs = state._allgather_object(seq)
    newest = max(seqs)
    root = seqs.index(newest)
    if newest > 0 and state._rank() == root:
        state._load_committed(committed)
    if driver.generation > 0:
        # Horovod's order after a reset: restore, the reset callbacks (which may, for example,
        # scale the learning rate to the new size), then sync from the root.
        state.on_reset()
    state.sync(root_rank=root)
    state.save()
    state._commit_seq = newest
    if newest > 0 and state._rank() == 0:
        sys.stderr.write("rank 0: elastic: generation %d resumes from commit %d (rank %d's copy)\n"
                         % (driver.generation, newest, root))


def _restart(state, driver, interrupt):
    """Hosts changed: keep the current state as a commit on every host (unless the interrupt
    came from commit(), which just did), tell the driver, and end this generation on every rank
    together."""
    why = str(interrupt)
    if not getattr(interrupt, "at_commit", False):
        state.save()
        state._commit_seq += 1
        if state._local_rank() == 0:
            driver.write_commit(state._commit_seq, state._committed())
    state._allgather_object(state._commit_seq)  # every host has written before anyone exits
    told = 0
    if state._rank() == 0:
        try:
            driver.ask(("restarting", driver.generation, state._commit_seq))
            told = 1
        except OSError as e:
            sys.stderr.write("rank 0: %s\n" % e)
        sys.stderr.write("rank 0: elastic: %s; restarting at commit %d\n"
                         % (why, state._commit_seq))
    # The driver knows before any rank ends. Status 0 from every rank would read as the job's
    # end if it had not heard: then the ranks end as after a failed collective, which restarts.
    told = state._allgather_object(told)[0]
    _end_generation(0 if told else EXIT_RESTART)


def _end_generation(status):
    from overlap import basics
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        basics.shutdown()
    except Exception:  # noqa: BLE001 - a peer may be gone; the driver restarts regardless
        pass
    os._exit(status)


def run_fn(func, reset=None):
    """``func(state, ...)`` after synchronising `state` (module docstring). `reset`, Horovod's
    re-initialisation, is accepted for signature compatibility and never called: a new
    generation is a new process."""
    del reset

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        driver = _DriverLink.get()
        if driver is None:
            return _run_fixed(func, state, args, kwargs)
        _resume(state, driver)
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt as e:
            _restart(state, driver, e)
        except HorovodInternalError as e:
            state.restore()
            why = str(e) if str(e).startswith("rank ") else "rank %d: %s" % (state._rank(), e)
            sys.stderr.write("%s; elastic: the state is back at commit %d, which every host "
                             "holds; the driver restarts the job\n" % (why, state._commit_seq))
            _end_generation(EXIT_RESTART)
        if state._local_rank() == 0:
            try:
                os.unlink(driver.commit_path())
                os.rmdir(driver.state_dir)
            except OSError:
                pass  # another host's rank shares the folder, or it is gone
        return result

    return wrapper


def _run_fixed(func, state, args, kwargs):
    state.sync()
    try:
        return func(state, *args, **kwargs)
    except HostsUpdatedInterrupt:
        # Never raised by overlap itself here; a script that raises it wants a fresh sync.
        state.sync()
        return func(state, *args, **kwargs)
    except HorovodInternalError as error:
        state.restore()
        raise HorovodInternalError(
            "%s (overlap.elastic: the job's ranks are fixed, so it cannot continue without "
            "the failed rank; the state was rolled back to its last commit: save a "
            "checkpoint there and launch again to resume, or run under overlaprun's elastic "
            "flags, docs/elastic.md)" % error) from error
