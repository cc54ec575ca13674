"""pytest setup for the overlap.tensorflow suites, which run on every rank under overlaprun.

- `hvd` (session fixture): overlap.tensorflow, initialised once (`khvd`: the Keras module);
  shut down at the end when every test passed. A suite's tests that must run before init simply
  do not use the fixture.
- Every test has a watchdog: a test still running after OVERLAP_TEST_TIMEOUT_S (default 120)
  prints every thread's stack and ends the rank, so overlaprun stops the job instead of hanging.
- A failed rank leaves at once (os._exit) after pytest's report: the other ranks are blocked in
  a collective this one will never submit, and a collective shutdown or atexit handler would
  wait for them forever; overlaprun then stops the job and names the failed rank.
- `run` (fixture): runs a check both eagerly and inside tf.function, so every value is checked
  in both modes.
"""

import faulthandler
import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
try:
    import tensorflow as tf
except ImportError as error:  # run_pytest.sh skips before this when tensorflow is missing
    raise ImportError(
        f"the overlap.tensorflow suites need tensorflow, which {sys.executable} cannot import: "
        f"{error}") from error

TEST_TIMEOUT_S = float(os.environ.get("OVERLAP_TEST_TIMEOUT_S", "120"))
_failed = []


def _mpi_rank():
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


def pytest_report_header(config):
    import keras
    return (f"rank {_mpi_rank()} of {os.environ.get('OMPI_COMM_WORLD_SIZE', '?')}, "
            f"tensorflow {tf.__version__}, keras {keras.__version__}, "
            f"OVERLAP_LIBRARY={os.environ.get('OVERLAP_LIBRARY')}")


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
    import overlap.tensorflow as module
    if not module.is_initialized():
        module.init(**_init_options())
    yield module
    if not _failed:
        module.shutdown()


@pytest.fixture
def khvd(hvd):
    """overlap.tensorflow.keras, on the runtime `hvd` started."""
    import overlap.tensorflow.keras as module
    return module


def _init_options():
    """A suite may set TEST_OVERLAP_INIT="planner=deft,staleness=0" (see BUILD)."""
    spec = os.environ.get("TEST_OVERLAP_INIT", "")
    return dict(item.split("=", 1) for item in spec.split(",") if item)


@pytest.fixture(params=["eager", "function"])
def mode(request):
    return request.param


@pytest.fixture
def run(mode):
    """run(fn, *args): fn(*args) eagerly, or through a fresh tf.function."""
    def call(fn, *args):
        if mode == "eager":
            return fn(*args)
        return tf.function(fn)(*args)
    return call


def pytest_sessionfinish(session, exitstatus):
    if exitstatus not in (0, pytest.ExitCode.OK):
        _failed.append(f"session exit status {int(exitstatus)}")


def pytest_unconfigure(config):
    if _failed:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
