"""overlap.torch training on a GPU: a torchvision model (or BERT-base) on synthetic data, in the
style of Horovod's synthetic benchmark, against the same model trained with no communication in
the same process (this rank's GPU alone: the ceiling).

    overlaprun -np N python bench/torch_gpu_synthetic.py [--model resnet50|bert-base]
        [--batch-size 64] [--steps 20] [--warmup 10] [--compression none,fp16_ef,topk] [--ddp]

With OVERLAP_PLAN_AFTER_STEPS=0 every gradient is negotiated every step; by default the runtime
freezes the repeating step into a plan after 3 steps (docs/gpu.md compares the two). The
scheduler's planners run as everywhere else: OVERLAP_PLANNER=auto, or deft with
OVERLAP_STALENESS=1 (the JSON line names the planner and staleness; one process per planner).
`bert-base` is BERT-base's encoder (12 layers, 768 wide, 12 heads, 3072 feed-forward, 30,522
tokens, 110M parameters) built from torch.nn, trained to predict every token of random
sequences (--seq-len, default 128; --batch-size counts sequences).

Each phase builds the model afresh, takes --warmup steps, then times --steps steps between two
torch.cuda.synchronize() calls. Phases: `local` (plain SGD), with --ddp torch's
DistributedDataParallel (default buckets), then overlap.torch's
DistributedOptimizer under each --compression (CUDA gradients reduced on the GPU: NCCL with a GPU
per rank, MPI staged through host memory where ranks share one). Prints per phase the images/s
of this job (all ranks) and its ratio to `local` times the ranks, as text and as one JSON line;
after training, checks that every rank holds the same weights. Without a GPU it prints
"SKIPPED: no GPU" and exits 0 (--device cpu runs the same phases on the CPU, for trying it).
"""
import argparse
import json
import os
import sys
import time

import torch

import overlap.torch as hvd

COMPRESSORS = {
    "none": lambda: hvd.Compression.none,
    "fp16": lambda: hvd.Compression.fp16,
    "fp16_ef": hvd.Compression.fp16_ef,
    "bf16": hvd.Compression.bf16,
    "topk": lambda: hvd.Compression.topk(ratio=0.01),
    "covap": lambda: hvd.Compression.covap(R=4),
    "onebit": hvd.Compression.onebit,
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50",
                   help="a torchvision.models name, or bert-base")
    p.add_argument("--seq-len", type=int, default=128, help="bert-base's tokens per sequence")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--warmup-cap", type=int, default=300,
                   help="at most this many more warm-up steps while auto's trials are pending")
    p.add_argument("--compression", default="none",
                   help="comma-separated: " + ",".join(COMPRESSORS))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--ddp", action="store_true",
                   help="also train with torch's DistributedDataParallel (NCCL, or gloo where "
                   "ranks share a GPU) after `local`")
    args = p.parse_args(argv)
    for name in args.compression.split(","):
        if name not in COMPRESSORS:
            p.error("unknown compression '%s' (one of %s)" % (name, ", ".join(COMPRESSORS)))
    return args


class BertBase(torch.nn.Module):
    """BERT-base's shape: token and position embeddings, 12 post-norm encoder layers, and an
    output layer over the vocabulary."""

    VOCAB = 30522

    def __init__(self, seq_len):
        super().__init__()
        self.tokens = torch.nn.Embedding(self.VOCAB, 768)
        self.positions = torch.nn.Embedding(seq_len, 768)
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, activation="gelu",
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(768)
        self.out = torch.nn.Linear(768, self.VOCAB)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.encoder(self.tokens(ids) + self.positions(positions))
        return self.out(self.norm(x)).flatten(0, 1)


def new_model(args, device):
    torch.manual_seed(0)
    if args.model == "bert-base":
        return BertBase(args.seq_len).to(device)
    import torchvision  # imported here: only the image models need it
    return getattr(torchvision.models, args.model)(num_classes=1000).to(device)


def synthetic_batch(args, device):
    """The batch every step trains on, and its labels (one per token for bert-base)."""
    if args.model == "bert-base":
        data = torch.randint(0, BertBase.VOCAB, (args.batch_size, args.seq_len), device=device)
        return data, torch.randint(0, BertBase.VOCAB, (args.batch_size * args.seq_len,),
                                   device=device)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    return data, torch.randint(0, 1000, (args.batch_size,), device=device)


def init_ddp(device):
    """torch.distributed over this job's ranks, for DDP: NCCL where every rank has a GPU of its
    own, else gloo (NCCL refuses two ranks on one GPU). Rank 0 picks the port."""
    import os
    import socket
    import torch.distributed as dist
    if dist.is_initialized():
        return
    if hvd.rank() == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        host = "127.0.0.1" if hvd.size() == hvd.local_size() else socket.gethostname()
    else:
        port = host = None
    host, port = hvd.broadcast_object((host, port), root_rank=0, name="synthetic.ddp.address")
    os.environ.setdefault("MASTER_ADDR", host)
    os.environ.setdefault("MASTER_PORT", str(port))
    own_gpu = device.type == "cuda" and hvd.local_size() <= torch.cuda.device_count()
    dist.init_process_group("nccl" if own_gpu else "gloo", rank=hvd.rank(), world_size=hvd.size())


def run_phase(args, device, data, target, compression):
    """Images/s of this rank over --steps timed steps. compression: None for no communication,
    "ddp" for torch's DistributedDataParallel, else an overlap.torch compressor."""
    model = new_model(args, device)
    if compression == "ddp":
        init_ddp(device)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if compression not in (None, "ddp"):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=COMPRESSORS[compression]())

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if compression not in (None, "ddp"):
        # auto's live trials are not what it settles on: warm up until they are over (and its
        # plan adopted), so the timed steps run one plan. Every rank agrees when to stop.
        for _ in range(args.warmup_cap):
            pending = 1 if hvd._core.stats().get("plan_trials_pending") else 0
            if hvd.allreduce(torch.tensor([pending]), op=hvd.Max,
                             name="synthetic.trials").item() == 0:
                break
            step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    rate = args.batch_size * args.steps / (time.perf_counter() - start)
    if compression not in (None, "ddp"):  # every rank applied the same averaged gradients
        first = next(model.parameters()).detach()
        gathered = hvd.allgather(first.unsqueeze(0).float(), name="synthetic.check.%s" % compression)
        if not torch.allclose(gathered[0], gathered[-1], rtol=1e-4, atol=1e-6):
            raise RuntimeError("rank %d: weights differ across ranks after training with %s"
                               % (hvd.rank(), compression))
    return rate


def main(argv):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: no GPU visible to torch")
        return 0
    hvd.init()
    if args.device == "cuda":
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    data, target = synthetic_batch(args, device)
    planner = os.environ.get("OVERLAP_PLANNER", "observed")
    staleness = int(os.environ.get("OVERLAP_STALENESS", "0") or 0)
    phases = [("local", None)] + ([("ddp", "ddp")] if args.ddp else []) + [
        (c, c) for c in args.compression.split(",")]
    local = None
    for label, compression in phases:
        rate = run_phase(args, device, data, target, compression)
        total = hvd.allreduce(torch.tensor([rate]), op=hvd.Sum, name="synthetic.rate.%s" % label)
        total = float(total[0])
        if local is None:
            local = total
        if hvd.rank() == 0:
            gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
            stats = hvd._core.stats()
            overlap_phase = compression not in (None, "ddp")
            print("%-10s %9.1f samples/s on %d ranks (%.3f of local)%s"
                  % (label, total, hvd.size(), total / local,
                     "  planner %s (staleness %d, adopted: %s), executor %s, %d tensors in %d "
                     "units on the plan" % (planner, staleness, stats["planner"] or "no",
                                            stats["cuda_executor"] or "-",
                                            stats["planned_tensors"],
                                            stats.get("planned_units", -1))
                     if overlap_phase else ""))
            print(json.dumps({"bench": "torch_gpu_synthetic", "model": args.model,
                              "batch_size": args.batch_size, "ranks": hvd.size(), "phase": label,
                              "planner": planner if overlap_phase else None,
                              "staleness": staleness if overlap_phase else None,
                              "plan_adopted": stats["planner"] if overlap_phase else None,
                              "img_per_s": round(total, 1), "of_local": round(total / local, 3),
                              "planned_tensors": stats["planned_tensors"],
                              "planned_units": stats.get("planned_units", -1),
                              "device": gpu}), flush=True)
    if args.ddp:
        torch.distributed.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
