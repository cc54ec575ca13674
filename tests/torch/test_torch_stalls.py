"""No wait without a bound (issue 34), from overlap.torch: an operation some rank never submits.

Runs on 2 ranks with OVERLAP_STALL_WARNING_S=1 and OVERLAP_STALL_TIMEOUT_S=4 (see BUILD).
- A tensor rank 1 never submits: rank 0's coordinator warns after 1 s naming the operation and
  both rank sets, and rank 0's synchronize raises HorovodInternalError at 4 s with the stall's
  text, not a hang.
- Rank 1 blocked in a different operation (an allgather) than rank 0 (an allreduce): both stall,
  both are warned about, and both ranks raise, each naming its own operation.
- The framework side's own bound (overlap._core.wait_bound), here lowered below the stall
  timeout as a bug in the core would look: hvd.synchronize, and _core.wait_all (the optimizer's
  wait), give up at the bound with an error naming the rank, the tensor and the settings; the
  handle and its tensor are kept until the core fails the operation at 4 s, and a second
  synchronize of the same handle then raises the core's error.
Every check is of the message text (tensor name, rank lists) and of the elapsed time.
"""

import re
import time

import pytest
import torch

from stall_text import SLACK_S, TIMEOUT_S, runtime_log, stall_error, stall_warning

def check_still_working(hvd, name):
    result = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=f"after.{name}")
    assert torch.equal(result, torch.full((2,), float(hvd.size()))), f"allreduce after {name}"


def timed_error(error_type, call):
    start = time.monotonic()
    with pytest.raises(error_type) as info:
        call()
    return str(info.value), time.monotonic() - start


def test_setup(hvd):
    assert hvd.size() == 2, "the stall suite runs on 2 ranks"
    from overlap import _core
    config = _core.config()
    assert config["OVERLAP_STALL_WARNING_S"] in ("1", "1.0"), config
    assert config["OVERLAP_STALL_TIMEOUT_S"] in ("4", "4.0"), config


def test_a_tensor_one_rank_never_submits_fails_the_waiting_rank(hvd, capfd):
    name = "stall.never"
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(torch.ones(3), name=name)
        message, elapsed = timed_error(hvd.HorovodInternalError,
                                       lambda: hvd.synchronize(handle))
        assert re.search(stall_error(0, "allreduce", name, [0], [1], whole=True), message), message
        assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, f"failed after {elapsed:.1f} s"
        log = runtime_log(capfd)
        assert re.search(stall_warning("allreduce", name, [0], [1]), log), log
    else:
        time.sleep(TIMEOUT_S)  # never submits it; then meets rank 0 once its wait has failed
    check_still_working(hvd, name)


def test_ranks_blocked_in_different_operations_all_fail(hvd, capfd):
    """Rank 1 never submits rank 0's allreduce because it is itself blocked, in an allgather
    rank 0 never submits: both operations stall, and both ranks raise."""
    me = hvd.rank()
    if me == 0:
        kind, name = "allreduce", "stall.blocked.allreduce"
        handle = hvd.allreduce_async(torch.ones(3), name=name)
    else:
        kind, name = "allgather", "stall.blocked.allgather"
        handle = hvd.allgather_async(torch.ones(2, 3), name=name)
    message, elapsed = timed_error(hvd.HorovodInternalError, lambda: hvd.synchronize(handle))
    assert re.search(stall_error(me, kind, name, [me], [1 - me], whole=True), message), message
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, f"rank {me} failed after {elapsed:.1f} s"
    if me == 0:
        log = runtime_log(capfd)
        assert re.search(stall_warning("allreduce", "stall.blocked.allreduce", [0], [1]), log), log
        assert re.search(stall_warning("allgather", "stall.blocked.allgather", [1], [0]), log), log
    check_still_working(hvd, "blocked")


BOUND_S = 2.0


def backstop_error(rank, name):
    return (r"^rank %d: operation '%s' did not end within 2 s of this rank's wait: the runtime "
            r"should have failed it \(a stall after OVERLAP_STALL_TIMEOUT_S=%d, a lost peer or "
            r"stuck collective after OVERLAP_COLLECTIVE_TIMEOUT_S=300\) and did not, so the wait "
            r"gives up \(a bug in overlap: please report it with every rank's log\); the "
            r"operation may still run, so its tensors stay allocated until it ends$" % (
                rank, re.escape(name), TIMEOUT_S))


def lower_the_bound(monkeypatch):
    """The framework side's bound below the stall timeout: what a core that failed to end an
    operation would look like from Python."""
    from overlap import _core
    monkeypatch.setattr(_core, "wait_bound", lambda: (BOUND_S, float(TIMEOUT_S), 300.0))
    return _core


def test_synchronize_gives_up_at_its_bound_and_keeps_the_tensor(hvd, monkeypatch):
    name = "stall.bound.synchronize"
    if hvd.rank() == 0:
        core = lower_the_bound(monkeypatch)
        start = time.monotonic()
        handle = hvd.allreduce_async(torch.ones(3), name=name)
        message, elapsed = timed_error(hvd.HorovodInternalError,
                                       lambda: hvd.synchronize(handle))
        assert re.search(backstop_error(0, name), message), message
        assert BOUND_S <= elapsed < BOUND_S + SLACK_S, f"gave up after {elapsed:.1f} s"
        assert core.abandoned_handles() == 1
        monkeypatch.undo()
        # The same handle again: still known (its tensor kept), and the core's stall error ends it.
        message, _ = timed_error(hvd.HorovodInternalError, lambda: hvd.synchronize(handle))
        assert re.search(stall_error(0, "allreduce", name, [0], [1], whole=True), message), message
        elapsed = time.monotonic() - start
        assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, f"failed after {elapsed:.1f} s"
        assert core.abandoned_handles() == 0
    else:
        time.sleep(TIMEOUT_S)
    check_still_working(hvd, name)


def test_wait_all_gives_up_at_its_bound_naming_the_late_tensor(hvd, monkeypatch):
    """_core.wait_all, the optimizer's one call for a step's gradients: a handle that ended and
    one that never does; the error names the late one."""
    from overlap import _core
    tensors = [torch.ones(3), torch.ones(3)]
    buffers = [_core.Buffer(t.data_ptr(), 12, _core.FLOAT32, [3], t) for t in tensors]
    done = _core.allreduce("stall.bound.ended", buffers[0], buffers[0], _core.C_SUM, 1.0, 1.0,
                           None)
    if hvd.rank() == 0:
        lower_the_bound(monkeypatch)
        late = _core.allreduce("stall.bound.wait_all", buffers[1], buffers[1], _core.C_SUM, 1.0,
                               1.0, None)
        message, elapsed = timed_error(hvd.HorovodInternalError,
                                       lambda: _core.wait_all([done, late]))
        assert re.search(backstop_error(0, "stall.bound.wait_all"), message), message
        assert BOUND_S <= elapsed < BOUND_S + SLACK_S, f"gave up after {elapsed:.1f} s"
        assert torch.equal(tensors[0], torch.full((3,), 2.0))
        assert _core.abandoned_handles() == 1
        monkeypatch.undo()
        del late  # only the abandoned list holds it now
        message, _ = timed_error(hvd.HorovodInternalError, lambda: _core.wait_all([
            _core._abandoned[0]]))
        assert re.search(stall_error(0, "allreduce", "stall.bound.wait_all", [0], [1], whole=True),
                         message), message
        assert _core.abandoned_handles() == 0
    else:
        done.wait()
        time.sleep(TIMEOUT_S)
    check_still_working(hvd, "wait_all")
