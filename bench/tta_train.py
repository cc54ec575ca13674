"""One rank of one time-to-accuracy run (bench/time_to_accuracy.sh, issue 33): real training on
real data under horovod.torch, overlap.torch or torch DDP, with the quality of the model recorded
against wall time. Started through overlaprun like bench/torch_bench.py; the systems come from
bench/torch_systems.py, so every system runs this very loop. Rank 0 prints one JSON line.

  python3 bench/tta_train.py --system ddp --task fmnist --epochs 2
  python3 bench/tta_train.py --system overlap --task lm --corpus FILE --epochs 1

Tasks:
  fmnist  a CNN on Fashion-MNIST (gzipped IDX, /usr/share/datasets/fashion-mnist), SGD with
          momentum; quality: test accuracy (all 10,000 test images).
  lm      a small decoder-only transformer over bytes, trained on --corpus (the time_to_accuracy
          script writes the Python standard library's top-level .py files there, in name order),
          AdamW; the last 10% of the corpus is held out; quality: validation loss (nats/byte).

Data order: every epoch all ranks draw the same permutation (seeded by --seed and the epoch) and
each takes its strided share, so every system sees the same batches in the same order.

Wall time: from the first training step (after the model is broadcast and, for ddp's sweep, after
the bucket size is chosen) to each evaluation point. Evaluation is not in it: at each point every
rank clones the parameters (counted; well under 1 ms for these models) and the clones are
evaluated after training, shared out between the ranks.
"""

import argparse
import gzip
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_systems  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, choices=["horovod", "overlap", "ddp", "local"],
                   help="local: no communication, each rank trains alone (the compute floor; use "
                        "with --max-steps)")
    p.add_argument("--label", help="the 'system' field of the output (default: --system)")
    p.add_argument("--task", required=True, choices=["fmnist", "lm"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=0,
                   help="use the first N training examples (images, or LM windows); 0: all")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: all epochs)")
    p.add_argument("--test-limit", type=int, default=0,
                   help="fmnist: evaluate on the first N test images (0: all 10,000)")
    p.add_argument("--evals-per-epoch", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--corpus", help="lm: the text file to train on")
    p.add_argument("--ddp-bucket-mb", default=None,
                   help="DDP bucket_cap_mb: a number, or 'sweep:A,B,...' (each measured on "
                        "--sweep-steps training steps of a throw-away model; the fastest runs)")
    p.add_argument("--sweep-steps", type=int, default=8)
    p.add_argument("--staleness-correction", default="auto", choices=["auto", "predict", "on", "off"],
                   help="overlap: DistributedOptimizer(staleness_correction=...)")
    p.add_argument("--compression", default="none", help="overlap: a runtime compressor spec, or none")
    p.add_argument("--optimizer", default=None, choices=["sgd", "adam", "adamw"],
                   help="fmnist's optimizer (default sgd: momentum 0.9, lr 0.01 x ranks); adam and "
                        "adamw take lr 0.001, adamw weight decay 0.01. lm always trains with AdamW")
    p.add_argument("--master-addr", default="127.0.0.1", help="DDP: rank 0's address")
    p.add_argument("--master-port", type=int, default=29500)
    return p.parse_args(argv)


# ---- tasks ---------------------------------------------------------------------------------------

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class FashionCNN(nn.Module):
    """Two narrow conv layers and a wide first dense layer: 1.6 MB of gradients per step against
    a few tens of ms of compute, so that on the benchmark's links communication is the larger part
    (docs/time_to_accuracy.md, "Sizes")."""

    def __init__(self, hidden=256):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Block(nn.Module):
    """A pre-norm transformer block. Every parameter sits in a module whose forward runs (no
    nn.MultiheadAttention, whose out_proj's forward is never called), so overlap.torch's updates
    at forward find them."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteLM(nn.Module):
    def __init__(self, ctx, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(256, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.ln(self.blocks(h)))


class FashionTask:
    metric = "accuracy"
    batch = 64  # per rank
    lr = 0.01   # per rank, scaled by ranks as Horovod recommends

    def __init__(self, args, size):
        def load(prefix):
            x = read_idx(os.path.join(args.data_dir, prefix + "-images-idx3-ubyte.gz"))
            y = read_idx(os.path.join(args.data_dir, prefix + "-labels-idx1-ubyte.gz"))
            x = (torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1) - 0.2860) / 0.3530
            return x, torch.from_numpy(y.astype(np.int64))
        self.x, self.y = load("train")
        if args.train_limit:
            self.x, self.y = self.x[:args.train_limit], self.y[:args.train_limit]
        self.x_test, self.y_test = load("t10k")
        if args.test_limit:
            self.x_test, self.y_test = self.x_test[:args.test_limit], self.y_test[:args.test_limit]
        self.size = size
        self.optimizer = args.optimizer or "sgd"

    def examples(self):
        return len(self.x)

    def new_model(self):
        return FashionCNN()

    def new_optimizer(self, model):
        if self.optimizer == "adam":
            return torch.optim.Adam(model.parameters(), lr=1e-3)
        if self.optimizer == "adamw":
            return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        return torch.optim.SGD(model.parameters(), lr=self.lr * self.size, momentum=0.9)

    def loss(self, model, idx):
        return F.cross_entropy(model(self.x[idx]), self.y[idx])

    def quality(self, model):
        correct = 0
        with torch.no_grad():
            for i in range(0, len(self.x_test), 1000):
                correct += (model(self.x_test[i:i + 1000]).argmax(1) == self.y_test[i:i + 1000]).sum().item()
        return correct / len(self.x_test)


class LMTask:
    metric = "val_loss"
    optimizer = "adamw"
    batch = 8   # windows per rank
    lr = 1e-3   # AdamW, not scaled
    ctx, d, layers, heads = 64, 128, 2, 4
    val_windows = 512

    def __init__(self, args, size):
        if not args.corpus:
            raise SystemExit("tta_train.py: --task lm needs --corpus")
        if args.optimizer not in (None, "adamw"):
            raise SystemExit("tta_train.py: --task lm trains with AdamW only, not --optimizer " + args.optimizer)
        with open(args.corpus, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
        split = len(data) * 9 // 10
        span = self.ctx + 1
        self.train = data[:split][:(split // span) * span].view(-1, span)
        if args.train_limit:
            self.train = self.train[:args.train_limit]
        val = data[split:][:((len(data) - split) // span) * span].view(-1, span)
        # A fixed, evenly spread subset of the held-out windows keeps evaluation short.
        self.val = val[torch.linspace(0, len(val) - 1, min(self.val_windows, len(val))).long()]

    def examples(self):
        return len(self.train)

    def new_model(self):
        return ByteLM(self.ctx, self.d, self.layers, self.heads)

    def new_optimizer(self, model):
        return torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=0.01)

    def loss(self, model, idx):
        w = self.train[idx]
        return F.cross_entropy(model(w[:, :-1]).reshape(-1, 256), w[:, 1:].reshape(-1))

    def quality(self, model):
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(self.val), 128):
                w = self.val[i:i + 128]
                total += F.cross_entropy(model(w[:, :-1]).reshape(-1, 256), w[:, 1:].reshape(-1),
                                         reduction="sum").item()
        return total / (len(self.val) * self.ctx)


# ---- the run -------------------------------------------------------------------------------------

def shard(task, args, epoch, rank, size):
    """This rank's example indices for `epoch`, in order: the same permutation on every rank."""
    order = torch.randperm(task.examples(), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
    return order[rank::size]


def new_wrapped(system, task, args, bucket):
    torch.manual_seed(args.seed)  # the same initial weights for every system (and rank 0's win)
    model = task.new_model()
    return system.wrap(model, task.new_optimizer(model), bucket_cap_mb=bucket)


def step(task, model, optimizer, idx):
    optimizer.zero_grad()  # set_to_none by default since torch 2.0; Horovod takes no argument
    loss = task.loss(model, idx)
    loss.backward()
    optimizer.step()
    return loss


def tuned_bucket(system, task, args, candidates):
    """DDP's bucket_cap_mb with the fastest median step among candidates, on real batches."""
    times = {}
    idx = shard(task, args, 0, system.rank, system.size)
    for mb in candidates:
        model, opt = new_wrapped(system, task, args, mb)
        local = []
        for s in range(args.sweep_steps + 2):  # DDP rebuilds its buckets after step 1
            start = time.perf_counter()
            step(task, model, opt, idx[s * task.batch:(s + 1) * task.batch])
            local.append((time.perf_counter() - start) * 1e3)
        times[mb] = statistics.median(system.max_over_ranks(local[2:]))
        del model, opt
    return min(times, key=times.get), times


def snapshot(model):
    inner = getattr(model, "module", model)  # under DDP
    return {k: v.detach().clone() for k, v in inner.state_dict().items()}


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)  # four ranks share two cores: one compute thread each
    update_at_forward = "auto"
    system = torch_systems.make_system(args.system, args.master_addr, args.master_port, update_at_forward)
    if args.system == "overlap":
        system.optimizer_options["staleness_correction"] = args.staleness_correction
        if args.compression != "none":
            system.optimizer_options["compression"] = system.hvd.Compression.runtime(args.compression)
    task = (FashionTask if args.task == "fmnist" else LMTask)(args, system.size)

    result = {"task": args.task, "system": args.label or args.system, "metric": task.metric, "seed": args.seed,
              "epochs": args.epochs, "ranks": system.size, "batch_per_rank": task.batch,
              "train_examples": task.examples(), "torch": torch.__version__.split("+")[0],
              "optimizer": task.optimizer}
    bucket = None
    if args.system == "ddp" and args.ddp_bucket_mb:
        if args.ddp_bucket_mb.startswith("sweep:"):
            candidates = [float(x) for x in args.ddp_bucket_mb[len("sweep:"):].split(",")]
            bucket, sweep = tuned_bucket(system, task, args, candidates)
            result["sweep_ms"] = {str(k): round(v, 3) for k, v in sweep.items()}
        else:
            bucket = float(args.ddp_bucket_mb)
    if args.system == "ddp":
        result["bucket_cap_mb"] = bucket if bucket is not None else 25.0  # torch's default

    model, optimizer = new_wrapped(system, task, args, bucket)
    inner = getattr(model, "module", model)
    result["grad_bytes"] = sum(p.numel() * p.element_size() for p in inner.parameters())
    steps_per_epoch = task.examples() // (task.batch * system.size)
    eval_every = max(1, steps_per_epoch // args.evals_per_epoch)
    points, snaps, step_times, losses = [], [], [], []
    system.max_over_ranks([0.0])  # every rank starts the clock together
    t0 = time.perf_counter()
    n = 0
    for epoch in range(args.epochs):
        mine = shard(task, args, epoch, system.rank, system.size)
        for s in range(steps_per_epoch):
            if n % eval_every == 0:
                points.append((time.perf_counter() - t0, n))
                snaps.append(snapshot(model))
            start = time.perf_counter()
            loss = step(task, model, optimizer, mine[s * task.batch:(s + 1) * task.batch])
            step_times.append((time.perf_counter() - start) * 1e3)
            n += 1
            if n % eval_every == 0:
                losses.append(loss.item())
            if n == args.max_steps:
                break
        if n == args.max_steps:
            break
    if args.system == "overlap":
        optimizer.apply_pending_updates()  # updates at forward / delayed ones still held
    points.append((time.perf_counter() - t0, n))
    snaps.append(snapshot(model))
    train_s = time.perf_counter() - t0

    # The slowest rank's time per step; then each point's time as the slowest rank saw it.
    slowest = system.max_over_ranks(step_times)
    times = system.max_over_ranks([t for t, _ in points])
    if args.system == "overlap":
        s = system.hvd.stats()
        predicted = s.get("predicted_step_ms") or 0.0
        result["planner"] = s.get("planner")
        result["sim_step_ms"] = round(predicted, 3) if predicted > 0 else None
        result["runtime"] = {k: s.get(k) for k in ("planner", "plan_adopted_step", "plans_frozen",
                                                   "plans_dropped", "plans_refused", "plan_buckets",
                                                   "plan_mean_staleness", "plan_update_cycle",
                                                   "predicted_step_ms", "plans_scheduled",
                                                   "plan_drifts_kept")}
        result["correction_bytes"] = optimizer.staleness_correction_bytes()

    # Evaluation, after training: rank r evaluates points r, r + size, ...; a max gathers them.
    evaluator = task.new_model()
    evaluator.eval()
    qualities = [-math.inf] * len(snaps)
    for i in range(system.rank, len(snaps), system.size):
        evaluator.load_state_dict(snaps[i])
        qualities[i] = task.quality(evaluator)
    qualities = system.max_over_ranks(qualities)

    median_ms = statistics.median(slowest)
    result.update(steps=n, steps_per_epoch=steps_per_epoch, train_s=round(train_s, 3),
                  step_ms=round(median_ms, 3),
                  step_ms_mean=round(statistics.fmean(slowest), 3),
                  step_ms_p90=round(statistics.quantiles(slowest, n=10)[-1], 3) if n > 1 else None,
                  first_steps_ms=[round(x, 1) for x in slowest[:12]],  # start-up cost, step by step
                  # where a mean above the median comes from: the steps over 1.5x the median
                  slow_steps=[[i, round(x, 1)] for i, x in enumerate(slowest)
                              if x > 1.5 * median_ms][:40],
                  final_quality=round(qualities[-1], 5),
                  curve=[[round(t, 3), k, round(q, 5)] for t, (_, k), q in zip(times, points, qualities)],
                  train_loss=[round(x, 4) for x in losses], loadavg_1m=round(os.getloadavg()[0], 2))
    if system.rank == 0:
        print(json.dumps(result), flush=True)
    system.shutdown(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
