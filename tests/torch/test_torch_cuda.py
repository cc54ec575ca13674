"""overlap.torch with CUDA tensors, which the runtime takes on the GPU as they are (NCCL on a
GPU per rank, MPI staged through pinned memory where ranks share one). Values are checked against
what every rank computes on its own. Skips without a GPU; fails there when OVERLAP_REQUIRE_GPU=1.
Run under overlaprun (tests/torch/run_pytest.sh)."""
import os

import pytest
import torch

import overlap.torch as hvd

if not torch.cuda.is_available() and os.environ.get("OVERLAP_REQUIRE_GPU") == "1":
    raise RuntimeError("OVERLAP_REQUIRE_GPU=1 but torch sees no GPU")
# Collected and skipped (not a module-level skip, which pytest reports as "no tests ran").
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible to torch")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    hvd.init()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    yield
    hvd.shutdown()


def test_allreduce_average_on_device():
    x = torch.full((1000, 3), float(hvd.rank() + 1), device="cuda")
    y = hvd.allreduce(x, name="cuda.avg")
    assert y.device == x.device
    assert torch.all(y == (hvd.size() + 1) / 2.0)
    assert hvd._core.stats()["cuda_executor"] in ("nccl", "mpi+host-staging")


def test_allreduce_in_place_waits_for_the_current_stream():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(50_000_000)  # keeps the stream busy; the write below comes after
        x.fill_(hvd.rank() + 1.0)
        hvd.allreduce_(x, op=hvd.Sum, name="cuda.stream")
    torch.cuda.synchronize()
    assert torch.all(x == hvd.size() * (hvd.size() + 1) / 2.0)


def test_allgather_broadcast_reducescatter_on_device():
    rows = hvd.rank() + 1
    x = torch.full((rows, 4), float(hvd.rank()), device="cuda", dtype=torch.float16)
    g = hvd.allgather(x, name="cuda.gather")
    assert g.device.type == "cuda" and g.dtype == torch.float16
    want = torch.cat([torch.full((r + 1, 4), float(r)) for r in range(hvd.size())])
    assert torch.equal(g.cpu().float(), want)
    b = hvd.broadcast(torch.full((7,), float(hvd.rank() + 5), device="cuda"), root_rank=0,
                      name="cuda.bcast")
    assert torch.all(b == 5.0)
    r = hvd.reducescatter(torch.ones(hvd.size() * 2, 3, device="cuda"), op=hvd.Sum,
                          name="cuda.rs")
    assert r.device.type == "cuda" and r.shape == (2, 3) and torch.all(r == hvd.size())


def test_distributed_optimizer_trains_on_device():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).cuda()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    torch.manual_seed(1 + hvd.rank())
    data = torch.randn(64, 32, device="cuda")
    target = torch.randint(0, 4, (64,), device="cuda")
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # Every rank holds the same weights: the averaged gradients were applied everywhere.
    w = model[0].weight.detach().clone()
    gathered = hvd.allgather(w.unsqueeze(0), name="cuda.weights")
    assert torch.allclose(gathered[0], gathered[-1])


@pytest.mark.parametrize("compression", ["none", "fp16_ef", "topk"])
def test_distributed_optimizer_on_device_equals_the_host_path(compression):
    """The same parameter trained on the GPU and on the host, with the gradient of
    (w * x).sum(), which is x on both (no kernel rounding): every step's averaged gradient and
    the weights agree to the bit, and the GPU's gradients run on the frozen plan."""
    make = {"none": lambda: hvd.Compression.none, "fp16_ef": hvd.Compression.fp16_ef,
            "topk": lambda: hvd.Compression.topk(ratio=0.01)}
    generator = torch.Generator().manual_seed(7 + hvd.rank())
    w_host = torch.nn.Parameter(torch.zeros(10007))
    w_dev = torch.nn.Parameter(torch.zeros(10007, device="cuda"))
    # Plain SGD with lr 0.5: w - 0.5 g rounds once, on either device.
    opts = [hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.5),
                                     named_parameters=[("opt.%s.%s" % (compression, where), w)],
                                     compression=make[compression]())
            for where, w in (("host", w_host), ("cuda", w_dev))]
    for step in range(8):
        x = torch.randn(10007, generator=generator)
        for opt, w, data in ((opts[0], w_host, x), (opts[1], w_dev, x.cuda())):
            opt.zero_grad()
            (w * data).sum().backward()
            opt.step()
        assert torch.equal(w_dev.grad.cpu(), w_host.grad), "step %d" % step
        assert torch.equal(w_dev.detach().cpu(), w_host.detach()), "step %d" % step
    assert hvd._core.stats()["planned_tensors"] >= 2


@pytest.mark.parametrize("compression", ["fp16_ef", "bf16", "topk", "covap", "onebit"])
def test_runtime_compression_on_device_equals_the_host_path(compression):
    """The core compresses CUDA tensors on the GPU with the same results as host tensors."""
    make = {"fp16_ef": hvd.Compression.fp16_ef, "bf16": hvd.Compression.bf16,
            "topk": lambda: hvd.Compression.topk(ratio=0.01),
            "covap": lambda: hvd.Compression.covap(R=3), "onebit": hvd.Compression.onebit}
    assert hvd._core.cuda_compresses(make[compression]().runtime_spec)
    generator = torch.Generator().manual_seed(hvd.rank())
    for step in range(3):  # residuals carry over: step 2 depends on what 0 and 1 left unsent
        g = torch.randn(10007, generator=generator)
        host = hvd.allreduce(g, name="compressed.%s.host" % compression,
                             compression=make[compression]())
        device = hvd.allreduce(g.cuda(), name="compressed.%s.cuda" % compression,
                               compression=make[compression]())
        assert device.device.type == "cuda"
        if compression == "onebit":  # its scale is summed in another order on the GPU
            assert torch.allclose(device.cpu(), host, rtol=0,
                                  atol=2e-5 * host.abs().max().item()), "step %d" % step
        else:
            assert torch.equal(device.cpu(), host), "step %d" % step


def test_compressors_without_cuda_kernels_reduce_host_copies():
    assert not hvd._core.cuda_compresses("randomk:ratio=0.1")
    g = torch.full((1000,), float(hvd.rank() + 1), device="cuda")
    y = hvd.allreduce(g, name="compressed.randomk", compression=hvd.Compression.randomk(ratio=1.0))
    assert y.device.type == "cuda"
    assert torch.allclose(y.cpu(), torch.full((1000,), (hvd.size() + 1) / 2.0))
