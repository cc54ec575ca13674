"""One rank of one side-by-side run: a torch training loop under horovod.torch, overlap.torch or
DDP, timed the same way for all three. Started by bench/torch_side_by_side.sh through overlaprun
(so every system's ranks start the same way); rank 0 prints one JSON line.

  python3 bench/torch_bench.py --system horovod|overlap|ddp --mode emulated --model vgg16
  python3 bench/torch_bench.py --system ddp --mode synthetic
  python3 bench/torch_bench.py --system overlap --mode tiny

Modes:
  emulated   a profile model of bench/torch_models.py: real parameter shapes (scaled), compute
             slept, so the step time is what the system's communication schedule makes of it.
  synthetic  a small ResNet on random 32x32 images, real CPU compute (Horovod's
             pytorch_synthetic_benchmark, smaller), so a runtime that takes CPU from compute shows.
  tiny       50 tiny tensors through DistributedOptimizer: per-step coordination cost.

step_ms is the median over the measured steps of the slowest rank's time between consecutive
step starts (a step: zero_grad, forward, backward, optimizer.step), as in bench/model_step.cc.
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402
import torch_systems  # noqa: E402


def parse_rate(text):
    """A tc rate ('1gbit', '500mbit') in bytes/s."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    for unit, mult in units.items():
        if text.lower().endswith(unit):
            return float(text[: -len(unit)]) * mult / 8
    return float(text) / 8


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, choices=["horovod", "overlap", "ddp", "local"])
    p.add_argument("--label", help="the 'system' field of the output (default: --system)")
    p.add_argument("--mode", default="emulated", choices=["emulated", "synthetic", "tiny"])
    p.add_argument("--model", default="resnet50", help="emulated: vgg16, resnet50 or bert-base")
    p.add_argument("--warmup-steps", type=int, default=25)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--link-rate", default="1gbit")
    p.add_argument("--target-step-ms", type=float, default=1000.0)
    p.add_argument("--batch", type=int, default=32, help="synthetic: images per rank")
    p.add_argument("--ddp-bucket-mb", default=None,
                   help="DDP bucket_cap_mb: a number, or 'sweep:A,B,...' to measure each briefly "
                        "and run the fastest (the 'tuned' DDP)")
    p.add_argument("--update-at-forward", default="auto", choices=["auto", "on", "off"],
                   help="overlap: DistributedOptimizer(update_at_forward=...); auto: the planner's "
                        "default")
    p.add_argument("--staleness-correction", default="auto", choices=["auto", "predict", "on", "off"],
                   help="overlap: DistributedOptimizer(staleness_correction=...)")
    p.add_argument("--sweep-steps", type=int, default=6, help="measured steps per sweep candidate")
    p.add_argument("--master-addr", default="127.0.0.1", help="DDP: rank 0's address")
    p.add_argument("--master-port", type=int, default=29500)
    return p.parse_args(argv)


class Workload:
    """A model, a way to make its optimizer, and one step's loss."""

    def __init__(self, args, rank, size):
        self.args = args
        self.size = size
        self.rank = rank
        self.extra = {}
        if args.mode == "emulated":
            profile = torch_models.load_profile(args.model)
            rate = parse_rate(args.link_rate)
            ts, s = torch_models.choose_scaling(profile, size, rate, args.target_step_ms)
            self.extra = {"time_scale": round(ts, 6), "bytes_scale": round(s, 6), "link_rate": args.link_rate}
            self.input = torch.ones(1, requires_grad=True)  # so the first layer's backward runs too
            self.batch = torch_models.BATCH[args.model]
        elif args.mode == "synthetic":
            g = torch.Generator().manual_seed(rank)
            self.data = torch.randn(args.batch, 3, 32, 32, generator=g)
            self.target = torch.randint(0, 10, (args.batch,), generator=g)
            self.batch = args.batch
        else:
            self.input = torch.randn(4, 16)
            self.batch = 4

    def new_model(self):
        args = self.args
        if args.mode == "emulated":
            model = torch_models.build_emulated(args.model, self.extra["time_scale"], self.extra["bytes_scale"])
            model.set_grad_value(float(self.rank + 1))
            return model, torch_models.sleep_optimizer(model)
        torch.manual_seed(0)
        model = torch_models.small_resnet() if args.mode == "synthetic" else torch_models.TinyTensors()
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def loss(self, model):
        if self.args.mode == "synthetic":
            return F.cross_entropy(model(self.data), self.target)
        return model(self.input).sum()

    def describe(self, model):
        """Fields of the output that depend on the model."""
        out = dict(self.extra)
        inner = getattr(model, "module", model)  # under DDP
        out["grad_bytes"] = sum(p.numel() * p.element_size() for p in inner.parameters())
        out["tensors"] = sum(1 for _ in inner.parameters())
        if self.args.mode == "emulated":
            compute = inner.compute_ms()
            comm = torch_models.ring_factor(self.size) * out["grad_bytes"] / parse_rate(self.args.link_rate) * 1e3
            out.update(compute_ms=round(compute, 3), comm_bound_ms=round(comm, 3), ideal_ms=round(max(compute, comm), 3))
        return out


def run_steps(system, workload, model, optimizer, steps):
    """Per-step time of the slowest rank, for `steps` steps."""
    starts = []
    for _ in range(steps + 1):
        starts.append(time.perf_counter())
        optimizer.zero_grad()  # set_to_none by default since torch 2.0; Horovod takes no argument
        workload.loss(model).backward()
        optimizer.step()
    local = [(b - a) * 1e3 for a, b in zip(starts, starts[1:])]
    return system.max_over_ranks(local)


def check_averaged(model, size):
    """After a step every gradient of the emulated model must be the average of rank + 1 over
    ranks, (n + 1) / 2, in every element we look at. Returns an error text or None."""
    want = (size + 1) / 2.0
    inner = getattr(model, "module", model)
    for name, p in inner.named_parameters():
        if p.grad is None:
            return f"gradient of {name} is missing after the step"
        flat = p.grad.reshape(-1)
        for i in (0, flat.numel() // 2, flat.numel() - 1):
            if flat[i].item() != want:
                return f"gradient of {name} holds {flat[i].item()} at element {i}, expected the average {want}"
    return None


def tuned_bucket(system, workload, candidates, args):
    """DDP's bucket_cap_mb that gave the fastest step among candidates, and each one's time."""
    times = {}
    for mb in candidates:
        model, opt = workload.new_model()
        model, opt = system.wrap(model, opt, bucket_cap_mb=mb)
        run_steps(system, workload, model, opt, 2)  # DDP rebuilds its buckets after step 1
        times[mb] = statistics.median(run_steps(system, workload, model, opt, args.sweep_steps))
        del model, opt
        gc.collect()  # drop the reducer's hooks and buckets before the next one
    return min(times, key=times.get), times


def settle_trials(system, run, chunk=5, limit=80):
    """overlap's auto tries its candidate plans on live steps (OVERLAP_AUTO_TRIALS): warm up
    further, `chunk` steps at a time, until no rank is still trying, nor, under auto, still
    without the plan it keeps (before its first trial nothing is pending yet: a short warm-up
    ended there and measured the trials). Returns the extra steps."""
    stats = getattr(getattr(system, "hvd", None), "stats", None)
    auto = (os.environ.get("OVERLAP_PLANNER") or "") == "auto"
    extra = 0
    while stats is not None and extra < limit:
        now = stats()
        unsettled = now.get("plan_trials_pending") or (
            auto and not str(now.get("planner", "")).startswith("auto"))
        pending = 1.0 if unsettled else 0.0
        if system.max_over_ranks([pending])[0] == 0.0:
            break
        run(chunk)
        extra += chunk
    return extra


def planner_label(system):
    """OVERLAP_PLANNER, with "-sN" for deft with staleness bound N > 0 (delayed updates), and
    "pK" where its update periods are bounded by K other than the benches' 4."""
    if system != "overlap":
        return None
    planner = os.environ.get("OVERLAP_PLANNER") or "observed"
    staleness = int(os.environ.get("OVERLAP_STALENESS") or 0)
    if planner != "deft" or staleness <= 0:
        return planner
    period = os.environ.get("OVERLAP_MAX_PERIOD") or "4"
    return f"deft-s{staleness}" + ("" if period == "4" else f"p{period}")


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)  # four ranks share two cores: one compute thread each
    system = torch_systems.make_system(args.system, args.master_addr, args.master_port,
                                       args.update_at_forward)
    if args.system == "overlap" and args.staleness_correction != "auto":
        system.optimizer_options["staleness_correction"] = args.staleness_correction
    workload = Workload(args, system.rank, system.size)

    result = {"system": args.label or args.system,
              "planner": planner_label(args.system),
              "model": args.model if args.mode == "emulated" else ("small-resnet" if args.mode == "synthetic" else "tiny50"),
              "mode": args.mode}
    bucket = None
    if args.system == "ddp" and args.ddp_bucket_mb:
        if args.ddp_bucket_mb.startswith("sweep:"):
            candidates = [float(x) for x in args.ddp_bucket_mb[len("sweep:"):].split(",")]
            bucket, sweep = tuned_bucket(system, workload, candidates, args)
            result["sweep_ms"] = {str(k): round(v, 3) for k, v in sweep.items()}
        else:
            bucket = float(args.ddp_bucket_mb)
    if args.system == "ddp":
        result["bucket_cap_mb"] = bucket if bucket is not None else 25.0  # torch's default

    model, optimizer = workload.new_model()
    model, optimizer = system.wrap(model, optimizer, bucket_cap_mb=bucket)
    run_steps(system, workload, model, optimizer, args.warmup_steps)
    warmup_steps = args.warmup_steps + settle_trials(system, lambda n: run_steps(
        system, workload, model, optimizer, n))
    slowest = run_steps(system, workload, model, optimizer, args.steps)
    step_ms = statistics.median(slowest)

    error = None
    if args.system == "overlap":
        # With updates at forward the last step's averages are still in flight: apply them.
        result["update_at_forward"] = getattr(optimizer, "_deferred", None) is not None
        result["staleness_correction"] = args.staleness_correction
        result["correction_bytes"] = optimizer.staleness_correction_bytes()
        optimizer.apply_pending_updates()
    if args.mode == "emulated":
        # A delayed deft plan (staleness > 0) applies an earlier step's averages; the others
        # have every gradient averaged once the step's updates are applied.
        if (result["planner"] or "").startswith("deft-s"):
            result["verified"] = None
        else:
            error = check_averaged(model, system.size)
            result["verified"] = error is None
    errors = system.max_over_ranks([1.0 if error else 0.0])[0]

    # Throughput from the mean step: a plan with update periods alternates long and short steps,
    # whose median is neither (the step time stays the median, as issue 11 defines it).
    mean_ms = statistics.fmean(slowest)
    result.update(step_ms=round(step_ms, 3), step_ms_mean=round(mean_ms, 3),
                  samples_per_s=round(workload.batch * system.size * 1e3 / mean_ms, 2),
                  step_ms_min=round(min(slowest), 3), step_ms_max=round(max(slowest), 3),
                  ranks=system.size, steps=args.steps, warmup_steps=warmup_steps,
                  torch=torch.__version__.split("+")[0], loadavg_1m=round(os.getloadavg()[0], 2),
                  **workload.describe(model))
    stats = getattr(getattr(system, "hvd", None), "stats", None)
    if args.system == "overlap" and stats is not None:
        # Which plan the measured steps ran under: the planner may have refused or dropped it.
        s = stats()
        result["runtime"] = {k: s.get(k) for k in ("planner", "plan_adopted_step", "plans_frozen", "plans_dropped",
                                                   "plans_refused", "plan_buckets", "planned_tensors",
                                                   "planned_units", "predicted_step_ms",
                                                   "plan_update_cycle", "plan_trials")}
    if error:
        print(f"torch_bench.py: rank {system.rank}: {error}", file=sys.stderr, flush=True)
    if errors and system.rank == 0:
        result["error"] = "gradients were not averaged correctly on some rank (see its stderr)"
    if system.rank == 0:
        print(json.dumps(result), flush=True)
    system.shutdown(1 if errors else 0)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
