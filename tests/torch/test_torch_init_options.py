"""hvd.init()'s overlap options reach the core through the C API's settings, over the
environment's, without writing OVERLAP_* into os.environ (overlap/_core.py init_settings,
runtime/c_api.h overlap_init_with_settings).

tests/torch/BUILD runs this file twice, choosing the case by INIT_OPTIONS_CASE:
  given    OVERLAP_PLANNER=observed in the environment; init(planner="deft", staleness=1,
           max_period=2, budget=0.25, compression="fp16", profile_steps=3) must win over it:
           the core reports them, an optimizer made afterwards updates at forward (deft's
           default), and an allreduce is compressed to fp16.
  refused  init(staleness=-1) raises ValueError on every rank, naming the rank, the setting and
           that it was given in code.
  defaulted  init(planner="deft", staleness=1) with no budget anywhere: the adapters' default,
           the bound (-1), reaches the core; a DistributedOptimizer whose correction does not
           look ahead warns on every rank, naming it; one with the default does not (a budget
           given, as in `given`, is kept as given).
"""

import os

import pytest
import torch

CASE = os.environ["INIT_OPTIONS_CASE"]


def given_case():
    import overlap.torch as hvd
    from overlap import _core
    assert os.environ["OVERLAP_PLANNER"] == "observed"
    hvd.init(planner="deft", staleness=1, max_period=2, budget=0.25, compression="fp16",
             profile_steps=3)
    try:
        config = _core.config()
        assert config["OVERLAP_PLANNER"] == "deft"
        assert config["OVERLAP_STALENESS"] == "1"
        assert config["OVERLAP_MAX_PERIOD"] == "2"
        assert config["OVERLAP_BUDGET"] == "0.25"
        assert config["OVERLAP_COMPRESSION"] == "fp16"
        assert config["OVERLAP_PROFILE_STEPS"] == "3"
        # Not given in code: the environment's value (the test runner sets one), else the
        # default, as text.
        assert config["OVERLAP_STALL_TIMEOUT_S"] == os.environ.get("OVERLAP_STALL_TIMEOUT_S",
                                                                   "300")
        assert config["OVERLAP_NUM_CHANNELS"] == os.environ.get("OVERLAP_NUM_CHANNELS", "1")
        # The process's environment is as the launcher set it.
        assert os.environ["OVERLAP_PLANNER"] == "observed"
        for name in ("OVERLAP_STALENESS", "OVERLAP_MAX_PERIOD", "OVERLAP_BUDGET",
                     "OVERLAP_COMPRESSION", "OVERLAP_PROFILE_STEPS"):
            assert name not in os.environ, name

        model = torch.nn.Linear(3, 2)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        assert optimizer._deferred is not None  # deft updates each layer at its next forward

        # The default compressor applies: 0.1 travels as fp16.
        out = hvd.allreduce(torch.full((4,), 0.1), name="init_options.fp16", op=hvd.Average)
        fp16 = torch.tensor(0.1).half().float()
        assert torch.equal(out, torch.full((4,), fp16.item())), out
        assert fp16.item() != torch.tensor(0.1).item()
    finally:
        hvd.shutdown()
    assert _core.config() == {}


def refused_case():
    import overlap.torch as hvd
    with pytest.raises(ValueError) as error:
        hvd.init(staleness=-1)
    message = str(error.value)
    rank = os.environ["OMPI_COMM_WORLD_RANK"]
    assert message.startswith("rank %s: " % rank), message
    assert "OVERLAP_STALENESS='-1' is not valid" in message, message
    assert "(given in code)" in message, message
    assert not hvd.is_initialized()


def defaulted_case():
    import warnings
    import overlap.torch as hvd
    from overlap import _core
    assert "OVERLAP_BUDGET" not in os.environ
    hvd.init(planner="deft", staleness=1)
    try:
        assert _core.config()["OVERLAP_BUDGET"] == "-1"
        model = torch.nn.Linear(3, 2)
        with pytest.warns(UserWarning, match=r"rank %s: DistributedOptimizer: "
                          r"staleness_correction='predict' does not look ahead"
                          % os.environ["OMPI_COMM_WORLD_RANK"]):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters(),
                                     staleness_correction="predict")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    finally:
        hvd.shutdown()


def test_init_options():
    {"given": given_case, "refused": refused_case, "defaulted": defaulted_case}[CASE]()
