"""pytest setup for the overlap.tensorflow suites, which run on every rank under overlaprun, on
top of the plugin every rank loads (tests/python_util/overlap_pytest.py: per-test watchdog, a
failed rank's quick exit).

- `hvd` (session fixture): overlap.tensorflow, initialised once (`khvd`: the Keras module);
  shut down at the end when every test passed. A suite's tests that must run before init simply
  do not use the fixture.
- `run` (fixture): runs a check both eagerly and inside tf.function, so every value is checked
  in both modes.
"""

import os
import sys

import pytest

from overlap_pytest import any_failed, report_header

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
try:
    import tensorflow as tf
except ImportError as error:  # run_pytest.sh skips before this when tensorflow is missing
    raise ImportError(
        f"the overlap.tensorflow suites need tensorflow, which {sys.executable} cannot import: "
        f"{error}") from error


def pytest_report_header(config):
    import keras
    return report_header(f"tensorflow {tf.__version__}, keras {keras.__version__}")


@pytest.fixture(scope="session")
def hvd():
    import overlap.tensorflow as module
    if not module.is_initialized():
        module.init(**_init_options())
    yield module
    if not any_failed():
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
