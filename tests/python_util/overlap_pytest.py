"""The pytest plugin every rank of an overlap.torch or overlap.tensorflow suite loads
(run_pytest.sh passes `-p overlap_pytest`); each suite's conftest.py adds its framework's
fixtures (`hvd` and the like) on top.

- Every test has a watchdog: a test still running after OVERLAP_TEST_TIMEOUT_S (default 120)
  prints every thread's stack and ends the rank, so overlaprun stops the job instead of hanging.
- A failed rank leaves at once (os._exit) after pytest's report: the other ranks are blocked in
  a collective this one will never submit, and a collective shutdown or atexit handler would
  wait for them forever; overlaprun then stops the job and names the failed rank. A conftest's
  session fixture shuts the runtime down only when any_failed() is false.
"""

import faulthandler
import os
import sys

import pytest

TEST_TIMEOUT_S = float(os.environ.get("OVERLAP_TEST_TIMEOUT_S", "120"))
_failed = []
# The watchdog's stacks go to the rank's own stderr, duplicated now, before pytest captures fd 2:
# written to sys.stderr inside a test they went to pytest's capture file, which the exit drops,
# and a hung rank left no trace of where it hung.
_WATCHDOG_OUT = os.fdopen(os.dup(2), "w")


def mpi_rank():
    """This rank, from Open MPI's environment (known before the runtime starts)."""
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


def report_header(versions):
    """The first line of each rank's report: rank, size, the framework's `versions`, library."""
    return (f"rank {mpi_rank()} of {os.environ.get('OMPI_COMM_WORLD_SIZE', '?')}, {versions}, "
            f"OVERLAP_LIBRARY={os.environ.get('OVERLAP_LIBRARY')}")


def any_failed():
    """Whether a test (or the session) failed on this rank so far."""
    return bool(_failed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _failed.append(item.nodeid)
        report.sections.append(("rank", f"failed on rank {mpi_rank()}"))


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True, file=_WATCHDOG_OUT)
    yield
    faulthandler.cancel_dump_traceback_later()


def pytest_sessionfinish(session, exitstatus):
    if exitstatus not in (0, pytest.ExitCode.OK):
        _failed.append(f"session exit status {int(exitstatus)}")


def pytest_unconfigure(config):
    if _failed:
        # Say why this rank leaves with status 1, even when pytest's summary names no failed test
        # (a session fixture's teardown, an internal error).
        print(f"overlap_pytest: rank {mpi_rank()} exits with status 1 after: {', '.join(_failed)}",
              file=sys.stderr)
        # pytest's report (the errors and the summary line) goes through its own writer, whose
        # buffer os._exit would drop: a session fixture's teardown error was lost that way.
        config.get_terminal_writer().flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
