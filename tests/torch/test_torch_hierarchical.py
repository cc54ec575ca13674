"""overlap.torch with Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE=1 (set by the Bazel rule), on one
machine whose ranks are placed on pretend hosts of two with OVERLAP_HOST_ID before init: the
runtime must take Horovod's setting, span the hosts, and give exact results through allreduce,
grouped allreduce and DistributedOptimizer.
"""

import os

import pytest
import torch

# Before the hvd fixture initialises the runtime: the host this rank counts as.
_RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))
os.environ["OVERLAP_HOST_ID"] = f"pretend-host-{_RANK // 2}"


def test_the_runtime_spans_the_pretend_hosts(hvd):
    assert os.environ.get("HOROVOD_HIERARCHICAL_ALLREDUCE") == "1"
    assert "OVERLAP_HIERARCHICAL_ALLREDUCE" not in os.environ
    assert hvd.stats()["hierarchy_hosts"] == hvd.size() // 2


@pytest.mark.parametrize("numel", [100, 70001, 3 * (1 << 20) + 5])
def test_allreduce_values(hvd, numel):
    # Small integers: float sums are exact whatever the summation order.
    base = torch.arange(numel, dtype=torch.float32) % 13
    mine = base * (hvd.rank() + 1)
    total = base * (hvd.size() * (hvd.size() + 1) // 2)
    assert torch.equal(hvd.allreduce(mine, op=hvd.Sum, name=f"sum.{numel}"), total)
    assert torch.equal(hvd.allreduce(mine.double(), op=hvd.Sum, name=f"sum64.{numel}"),
                       total.double())


def test_grouped_allreduce_average(hvd):
    tensors = [torch.full((n,), float(hvd.rank()), dtype=torch.float32)
               for n in (20000, 30000, 5)]
    mean = (hvd.size() - 1) / 2
    for result in hvd.grouped_allreduce(tensors, op=hvd.Average, name="grouped"):
        assert torch.equal(result, torch.full_like(result, mean))


def test_distributed_optimizer_averages_gradients(hvd):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)  # 257 KiB of gradients: hierarchical
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    weight, bias = model.weight.detach().clone(), model.bias.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    # loss = sum of outputs: d/dW[i, j] = x[j] = rank + 1, d/db = 1.
    model(torch.full((1, 256), float(hvd.rank() + 1))).sum().backward()
    opt.step()
    mean_x = (hvd.size() + 1) / 2
    assert torch.equal(model.weight.detach(), weight - 0.5 * mean_x)
    assert torch.equal(model.bias.detach(), bias - 0.5)
