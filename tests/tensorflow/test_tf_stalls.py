"""No wait without a bound (issue 34), from overlap.tensorflow: an operation some rank never
submits, waited on by a kernel's waiter thread (native/waiter.h), eagerly and in tf.function.

Runs on 2 ranks with OVERLAP_STALL_WARNING_S=1 and OVERLAP_STALL_TIMEOUT_S=4 (see BUILD).
- Eager: a tensor rank 1 never submits; rank 0's coordinator warns after 1 s naming the
  operation and both rank sets, and rank 0's allreduce raises FailedPreconditionError at 4 s.
- tf.function: each rank blocked in an operation the other never submits (an allreduce on rank
  0, an allgather on rank 1): both raise, each naming its own operation and the rank sets.
- The kernel's own bound, lowered below the stall timeout as a bug in the core would look: the
  kernel in a tf.function fails with DeadlineExceededError naming the rank, the tensor and the
  settings; its handle and tensors go to the reaper, which frees them once the core has failed
  the operation (at 4 s).
Every check is of the message text (tensor name, rank lists) and of the elapsed time.
"""

import re
import time

import pytest
import tensorflow as tf

from stall_text import SLACK_S, TIMEOUT_S, WARNING_S, runtime_log, stall_error, stall_warning

def check_still_working(hvd, name):
    out = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after." + name)
    assert out.numpy().tolist() == [float(hvd.size())] * 2, "allreduce after " + name


def timed_error(error_type, call):
    start = time.monotonic()
    with pytest.raises(error_type) as info:
        out = call()
        if isinstance(out, tf.Tensor):
            out.numpy()
    return str(info.value.message), time.monotonic() - start


def test_setup(hvd):
    from overlap import _core
    assert hvd.size() == 2, "the stall suite runs on 2 ranks"
    assert float(_core.config()["OVERLAP_STALL_TIMEOUT_S"]) == TIMEOUT_S
    assert float(_core.config()["OVERLAP_STALL_WARNING_S"]) == WARNING_S


def test_eager_tensor_one_rank_never_submits(hvd, capfd):
    name = "stall.tf.eager"
    if hvd.rank() == 0:
        message, elapsed = timed_error(tf.errors.FailedPreconditionError,
                                       lambda: hvd.allreduce(tf.ones([3]), name=name))
        assert re.search(stall_error(0, "allreduce", name, [0], [1]), message), message
        assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, f"failed after {elapsed:.1f} s"
        log = runtime_log(capfd)
        assert re.search(stall_warning("allreduce", name, [0], [1]), log), log
    else:
        time.sleep(TIMEOUT_S)  # never submits it; then meets rank 0 once its kernel has failed
    check_still_working(hvd, name)


def test_function_ranks_blocked_in_different_operations_all_fail(hvd, capfd):
    """Inside tf.function, where the kernel waits on a waiter thread: rank 1 never submits rank
    0's allreduce because it is blocked in an allgather rank 0 never submits; both ranks raise."""
    me = hvd.rank()
    if me == 0:
        kind, name = "allreduce", "stall.tf.function.allreduce"
        step = tf.function(lambda x: hvd.allreduce(x, name=name))
    else:
        kind, name = "allgather", "stall.tf.function.allgather"
        step = tf.function(lambda x: hvd.allgather(x, name=name))
    x = tf.ones([3])
    step.get_concrete_function(x)  # traced before the clock starts
    message, elapsed = timed_error(tf.errors.FailedPreconditionError, lambda: step(x))
    assert re.search(stall_error(me, kind, name, [me], [1 - me]), message), message
    # A stall counts from the first rank's submission: the peer's allgather may have gone in a
    # little before this rank's call, so the error may come a little under TIMEOUT_S after it.
    assert TIMEOUT_S - 1 <= elapsed < TIMEOUT_S + SLACK_S, (
        f"rank {me} failed after {elapsed:.3f} s")
    if me == 0:
        log = runtime_log(capfd)
        assert re.search(stall_warning("allreduce", "stall.tf.function.allreduce", [0], [1]),
                         log), log
        assert re.search(stall_warning("allgather", "stall.tf.function.allgather", [1], [0]),
                         log), log
    check_still_working(hvd, "function.blocked")


BOUND_S = 2.0


def test_function_kernel_gives_up_at_its_bound_and_the_reaper_frees_the_handle(hvd):
    from overlap.tensorflow import op_library
    name = "stall.tf.bound"
    if hvd.rank() == 0:
        step = tf.function(lambda x: hvd.allreduce(x, name=name))
        x = tf.ones([3])
        step.get_concrete_function(x)
        # What a core that failed to end the operation would look like from the kernel.
        op_library.override_wait_bound(BOUND_S)
        try:
            start = time.monotonic()
            message, elapsed = timed_error(tf.errors.DeadlineExceededError, lambda: step(x))
            assert op_library.abandoned_waits() == 1
        finally:
            op_library.override_wait_bound(0)
        assert re.search(
            r"rank 0: allreduce '%s' did not end within 2 s of this rank's wait: the runtime "
            r"should have failed it \(a stall after OVERLAP_STALL_TIMEOUT_S=%d, a lost peer or "
            r"stuck collective after OVERLAP_COLLECTIVE_TIMEOUT_S=300\) and did not, so the "
            r"wait gives up \(a bug in overlap: please report it with every rank's log\); the "
            r"operation may still run, so its tensors stay allocated until it ends" % (
                re.escape(name), TIMEOUT_S), message), message
        assert BOUND_S <= elapsed < BOUND_S + SLACK_S, f"gave up after {elapsed:.1f} s"
        # The core fails the operation at 4 s; the reaper looks once a second.
        while op_library.abandoned_waits() and time.monotonic() - start < TIMEOUT_S + SLACK_S:
            time.sleep(0.1)
        elapsed = time.monotonic() - start
        assert op_library.abandoned_waits() == 0, f"still held after {elapsed:.1f} s"
        assert elapsed >= TIMEOUT_S, f"freed after {elapsed:.1f} s, before the core failed it"
    else:
        time.sleep(TIMEOUT_S)
    check_still_working(hvd, name)


def test_the_default_bound_follows_the_settings(hvd):
    from overlap import _core
    bound, stall, collective = _core.wait_bound()
    assert (stall, collective) == (TIMEOUT_S, float(_core.config()["OVERLAP_COLLECTIVE_TIMEOUT_S"]))
    assert bound == stall + collective + 30.0  # the core's grace (runtime/api/handle_state.h)
