"""pytest setup for the overlap.torch suites, which run on every rank under overlaprun, on top
of the plugin every rank loads (tests/python_util/overlap_pytest.py: per-test watchdog, a failed
rank's quick exit).

- `hvd` (session fixture): overlap.torch, initialised once; shut down at the end when every test
  passed. A suite's tests that must run before init simply do not use the fixture.
"""

import sys

import pytest

from overlap_pytest import any_failed, report_header

try:
    import torch
except ImportError as error:  # CI installs torch: its absence is a failure, never a skip
    raise ImportError(
        f"the overlap.torch suites need torch, which {sys.executable} cannot import: {error}"
    ) from error

torch.set_num_threads(1)


def pytest_report_header(config):
    return report_header(f"torch {torch.__version__}")


@pytest.fixture(scope="session")
def hvd():
    import overlap.torch as module
    if not module.is_initialized():
        module.init()
    yield module
    if not any_failed():
        module.shutdown()
