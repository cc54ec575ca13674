"""One rank of one TensorFlow side-by-side run: an emulated Keras model (bench/tf_models.py)
trained under overlap.tensorflow or tf.distribute.MultiWorkerMirroredStrategy, timed the same
way for both. Started by bench/tf_side_by_side.sh through overlaprun (so both systems' ranks
start the same way, one per host); rank 0 prints one JSON line.

  python3 bench/tf_bench.py --system overlap --model vgg16          # OVERLAP_PLANNER=deft ...
  python3 bench/tf_bench.py --system mwms --model vgg16 --workers 10.77.0.1,10.77.0.2,...

overlap: a tf.function step with the SleepOptimizer wrapped by the Keras DistributedOptimizer
(`--api optimizer`, the default: each gradient's allreduce starts when backward produces it and
every update is applied in the step; `--api forward`: the same with update_at_forward=True, each
layer's update waits until just before its next forward, docs/tensorflow.md "Updates at
forward"), or fed by DistributedGradientTape (`--api tape`). mwms: the same model and optimizer built in the
strategy's scope, the same step under strategy.run; Keras' optimizer sums the gradients with the
strategy's collective all-reduce (ring, gRPC between workers), as model.fit would. The rank and
size come from Open MPI's environment; MWMS's TF_CONFIG lists one worker per rank at
--workers (hosts), port --port.

step_ms is the median over the measured steps of the slowest rank's time per step, as
bench/torch_bench.py.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf_models  # noqa: E402
from torch_bench import parse_rate, planner_label, settle_trials  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True, choices=["overlap", "mwms", "local"])
    p.add_argument("--label", help="the 'system' field of the output (default: --system)")
    p.add_argument("--model", default="vgg16", help="vgg16, resnet50 or bert-base")
    p.add_argument("--warmup-steps", type=int, default=25)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--link-rate", default="1gbit")
    p.add_argument("--target-step-ms", type=float, default=1000.0)
    p.add_argument("--workers", default="", help="mwms: the hosts of ranks 0..n-1, comma-separated "
                                                 "(default: 127.0.0.1 for every rank)")
    p.add_argument("--port", type=int, default=23456, help="mwms: rank r listens on port + r")
    p.add_argument("--api", default="optimizer", choices=["optimizer", "forward", "tape"],
                   help="overlap: the Keras DistributedOptimizer (with update_at_forward: "
                        "forward) or DistributedGradientTape")
    p.add_argument("--staleness-correction", default="auto",
                   help="overlap: the adapters' staleness_correction under delayed plans "
                        "(auto, predict, on, off)")
    return p.parse_args(argv)


def mpi_rank_size():
    return (int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")),
            int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))


class Overlap:
    def __init__(self, api, correction):
        import overlap.tensorflow as hvd
        self.hvd = hvd
        self.api = api
        self.correction = correction
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def scope(self):
        return _NoScope()

    def make_step(self, model, optimizer, x):
        hvd = self.hvd
        if self.api != "tape":
            optimizer = hvd.DistributedOptimizer(optimizer,
                                                 update_at_forward=self.api == "forward",
                                                 staleness_correction=self.correction)
            self.update_at_forward = optimizer._overlap_deferred is not None

        @tf.function
        def step():
            if self.api == "tape":
                with hvd.DistributedGradientTape(tf.GradientTape(),
                                                 staleness_correction=self.correction) as tape:
                    loss = tf.reduce_sum(model(x))
            else:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return step

    def max_over_ranks(self, values):
        gathered = self.hvd.allgather(tf.constant([values], tf.float64), name="bench.times")
        return [float(v) for v in tf.reduce_max(gathered, axis=0)]

    def expected_gradient(self):
        return (self.size + 1) / 2.0  # averaged

    def runtime_stats(self):
        s = self.hvd.stats()
        return {k: s.get(k) for k in ("planner", "plan_adopted_step", "plans_dropped",
                                      "plans_refused", "plan_buckets", "predicted_step_ms",
                                      "delayed_bytes", "plan_trials")}

    def shutdown(self):
        self.hvd.shutdown()


class Local:
    """No communication: each rank trains its own copy of the same model (sized for the launched
    rank count), so the step is the emulation's own floor on this machine, with every rank's
    TensorFlow threads sharing its cores as in the other systems' runs. Rank 0 reports its own
    steps."""

    def __init__(self):
        self.rank, self.size = mpi_rank_size()

    def scope(self):
        return _NoScope()

    def make_step(self, model, optimizer, x):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return step

    def max_over_ranks(self, values):
        return list(values)

    def expected_gradient(self):
        return float(self.rank + 1)  # this rank's own constant, not reduced

    def runtime_stats(self):
        return None

    def shutdown(self):
        pass


class _NoScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Mwms:
    def __init__(self, workers, port):
        self.rank, self.size = mpi_rank_size()
        hosts = workers.split(",") if workers else ["127.0.0.1"] * self.size
        if len(hosts) != self.size:
            raise SystemExit(f"tf_bench.py: rank {self.rank}: --workers names {len(hosts)} hosts "
                             f"for {self.size} ranks")
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"{h}:{port + r}" for r, h in enumerate(hosts)]},
            "task": {"type": "worker", "index": self.rank}})
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING,
            timeout_seconds=120.0)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def scope(self):
        return self.strategy.scope()

    def make_step(self, model, optimizer, x):
        strategy = self.strategy

        def replica_step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        @tf.function
        def step():
            strategy.run(replica_step)
        return step

    def max_over_ranks(self, values):
        local = tf.constant([values], tf.float64)

        @tf.function
        def gather():
            return self.strategy.run(
                lambda: tf.distribute.get_replica_context().all_gather(local, axis=0))
        gathered = self.strategy.experimental_local_results(gather())[0]
        return [float(v) for v in tf.reduce_max(gathered, axis=0)]

    def expected_gradient(self):
        return self.size * (self.size + 1) / 2.0  # Keras sums under a strategy

    def runtime_stats(self):
        return None

    def shutdown(self):
        pass


def main(argv):
    args = parse_args(argv)
    if args.system == "overlap":
        system = Overlap(args.api, args.staleness_correction)
    elif args.system == "local":
        system = Local()
    else:
        system = Mwms(args.workers, args.port)
    profile = tf_models.load_profile(args.model)
    rate = parse_rate(args.link_rate)
    ts, s = tf_models.choose_scaling(profile, system.size, rate, args.target_step_ms)
    specs, update_ms = tf_models.layer_specs(args.model, ts, s)
    with system.scope():
        model = tf_models.EmulatedModel(specs, float(system.rank + 1))
        x = tf.ones([1])
        model(x)
        grad_bytes = sum(int(v.shape.num_elements()) * 4 for v in model.trainable_variables)
        optimizer = tf_models.SleepOptimizer(update_ms / max(1, grad_bytes))
        optimizer.build(model.trainable_variables)
    step = system.make_step(model, optimizer, x)

    def run(steps):
        starts = []
        for _ in range(steps + 1):
            starts.append(time.perf_counter())
            step()
        return [(b - a) * 1e3 for a, b in zip(starts, starts[1:])]

    run(args.warmup_steps)
    warmup_steps = args.warmup_steps + settle_trials(system, run)
    slowest = system.max_over_ranks(run(args.steps))
    step_ms = statistics.median(slowest)
    mean_ms = statistics.fmean(slowest)

    planner = planner_label(args.system)
    want = system.expected_gradient()
    seen = (float(optimizer.seen_min.numpy()), float(optimizer.seen_max.numpy()))
    if planner and planner.startswith("deft-s"):
        # An update period sends the sum of the steps it folded: a multiple of the average. A
        # tensor sliced over buckets of different phases may get an update in some slices and
        # zeros in the others (has_update is per tensor, runtime/planes/plan_delays.h): 0 is allowed.
        verified = all(v >= 0 and abs(v / want - round(v / want)) < 1e-6 for v in seen)
    else:
        verified = seen == (want, want)
    failures = system.max_over_ranks([0.0 if verified else 1.0])[0]
    compute = sum(f + b for _, _, f, b in specs) + update_ms
    comm = tf_models.ring_factor(system.size) * grad_bytes / rate * 1e3
    result = {"system": args.label or args.system, "planner": planner, "model": args.model,
              "step_ms": round(step_ms, 3), "step_ms_mean": round(mean_ms, 3),
              "samples_per_s": round(tf_models.BATCH[args.model] * system.size * 1e3 / mean_ms, 2),
              "step_ms_min": round(min(slowest), 3), "step_ms_max": round(max(slowest), 3),
              "verified": failures == 0, "applied_range": list(seen), "ranks": system.size, "steps": args.steps,
              "warmup_steps": warmup_steps, "tensorflow": tf.__version__,
              "loadavg_1m": round(os.getloadavg()[0], 2), "time_scale": round(ts, 6),
              "bytes_scale": round(s, 6), "link_rate": args.link_rate,
              "grad_bytes": grad_bytes, "tensors": len(model.trainable_variables),
              "compute_ms": round(compute, 3), "comm_bound_ms": round(comm, 3),
              "ideal_ms": round(max(compute, comm), 3)}
    if args.system == "overlap":
        result["api"] = args.api
        result["correction"] = args.staleness_correction
        result["update_at_forward"] = getattr(system, "update_at_forward", False)
    stats = system.runtime_stats()
    if stats is not None:
        result["runtime"] = stats
    if not verified:
        print(f"tf_bench.py: rank {system.rank}: applied gradient elements ranged {seen}, "
              f"expected {want}", file=sys.stderr, flush=True)
    if system.rank == 0:
        print(json.dumps(result), flush=True)
    system.shutdown()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
