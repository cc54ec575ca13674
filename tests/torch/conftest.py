"""pytest setup for the overlap.torch suites, which run on every rank under overlaprun.

- `hvd` (session fixture): overlap.torch, initialised once; shut down at the end when every test
  passed. A suite's tests that must run before init simply do not use the fixture.
- Every test has a watchdog: a test still running after OVERLAP_TEST_TIMEOUT_S (default 120)
  prints every thread's stack and ends the rank, so overlaprun stops the job instead of hanging.
- A failed rank leaves at once (os._exit) after pytest's report: the other ranks are blocked in
  a collective this one will never submit, and a collective shutdown or atexit handler would
  wait for them forever; overlaprun then stops the job and names the failed rank.
"""

import faulthandler
import os
import sys

import pytest

try:
    import torch
except ImportError as error:  # CI installs torch: its absence is a failure, never a skip
    raise ImportError(
        f"the overlap.torch suites need torch, which {sys.executable} cannot import: {error}"
    ) from error

TEST_TIMEOUT_S = float(os.environ.get("OVERLAP_TEST_TIMEOUT_S", "120"))
_failed = []

torch.set_num_threads(1)


def _mpi_rank():
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


def pytest_report_header(config):
    return (f"rank {_mpi_rank()} of {os.environ.get('OMPI_COMM_WORLD_SIZE', '?')}, "
            f"torch {torch.__version__}, OVERLAP_LIBRARY={os.environ.get('OVERLAP_LIBRARY')}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _failed.append(item.nodeid)
        report.sections.append(("rank", f"failed on rank {_mpi_rank()}"))


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def hvd():
    import overlap.torch as module
    if not module.is_initialized():
        module.init()
    yield module
    if not _failed:
        module.shutdown()


def pytest_sessionfinish(session, exitstatus):
    if exitstatus not in (0, pytest.ExitCode.OK):
        _failed.append(f"session exit status {int(exitstatus)}")


def pytest_unconfigure(config):
    if _failed:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
