"""Horovod's elastic-training API on a fixed set of ranks: the framework-neutral part.

Scripts written for ``hvd.elastic`` keep their structure: a State object holds what must survive
a reset (model, optimizer, counters), ``state.commit()`` marks a consistent point, and the
function wrapped by ``hvd.elastic.run`` starts by synchronising the state from rank 0.

overlap's ranks are the MPI job's, fixed for its lifetime: no worker joins, and MPI cannot
re-form a job around a lost rank. So ``check_host_updates`` never interrupts, and when a
collective fails inside the wrapped function (``HorovodInternalError``: a lost peer, a timeout)
the state is rolled back to its last commit and the error is raised again, with the reason,
instead of Horovod's re-initialisation and retry. A job launched again (overlaprun, or a
scheduler's restart) resumes from the checkpoint the script saved.
"""

import copy
import functools

from overlap.common import HorovodInternalError, HostsUpdatedInterrupt


class State:
    """What a wrapped training function must be able to return to: subclasses save, restore and
    synchronise their objects. ``commit()`` saves and then checks for host updates."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Callables run by on_reset(), after a reset and before the function runs again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's driver calls this when hosts change; overlap has no such driver."""

    def commit(self):
        """Saves the state as the point to return to, then checks for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt in Horovod when hosts were added or removed. overlap's
        ranks are fixed, so there is never an update to act on."""

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()


class ObjectState(State):
    """State of plain picklable attributes, given as keyword arguments: ``state.epoch``,
    ``state.batch``. sync() takes rank 0's values."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def run_fn(func, reset=None):
    """``func(state, ...)`` after synchronising `state` from rank 0. A failed collective inside
    it rolls the state back to its last commit and is raised again (module docstring); `reset`,
    Horovod's re-initialisation, is accepted for signature compatibility and never called."""
    del reset

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            # Never raised by overlap itself; a script that raises it wants a fresh sync.
            state.sync()
            return func(state, *args, **kwargs)
        except HorovodInternalError as error:
            state.restore()
            raise HorovodInternalError(
                "%s (overlap.elastic: the job's ranks are fixed, so it cannot continue without "
                "the failed rank; the state was rolled back to its last commit: save a "
                "checkpoint there and launch again to resume)" % error) from error

    return wrapper
