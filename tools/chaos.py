"""Elastic training under faults on the namespace cluster (tools/chaos.sh runs this as root with
the cluster up; see docs/elastic.md).

One elastic job (overlaprun --min-np 2 --max-np 4 --host-discovery-script) trains
tests/elastic/elastic_train.py on hosts h1..h4 while faults are injected:
  kill      SIGKILL one rank's process
  link      a host's link down for 20 s (the host answers nothing, its processes keep running)
  loss      10% of a host's frames dropped for a minute
  slow      a host's link at 10 Mbit/s for a minute
  leave     a host removed from the discovery output for 30 s, then listed again
--quick injects kill, link and leave once each, in that order, at fixed points of training, and
measures the times docs/elastic.md reports: from a fault to the next completed step, how long the
runtime took to notice a lost host, and from a host's return to its first step.
The soak (default) draws a fault every 60-120 s for --minutes, then lets the job finish, and
compares its final loss with a fault-free run's (--reference, run first).

It prints one JSON line per fault, a table, and a last line
  chaos: N faults injected, N survived, 0 committed steps lost
and exits non-zero when a fault was not survived, a committed step was lost (a generation resumed
from an older commit than one that had returned, or from a state that differs from it), or the
job failed.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Cluster:
    def __init__(self, root):
        self.cluster = os.path.join(root, "tools", "cluster", "cluster.sh")
        self.faults = os.path.join(root, "tools", "cluster", "faults.sh")

    def link(self, host, state):
        subprocess.run([self.cluster, "link", host, state], check=True)

    def fault(self, *args):
        subprocess.run([self.faults] + list(args), check=True, stdout=subprocess.DEVNULL)

    def rank_pids(self, host, script):
        """The training processes on `host` (not their rank wrappers)."""
        out = subprocess.run(["ip", "netns", "pids", "ovl-%s" % host], stdout=subprocess.PIPE,
                             text=True).stdout.split()
        pids = []
        for pid in out:
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(script.encode()) for a in argv) and b"--rank-wrapper" not in argv:
                pids.append(int(pid))
        return pids


class Job:
    """The elastic job, its event log (elastic_train.py's) and its output."""

    def __init__(self, args, out_dir, name, hosts):
        self.args = args
        self.log = os.path.join(out_dir, "%s.events.jsonl" % name)
        self.out = os.path.join(out_dir, "%s.out" % name)
        self.hosts_file = os.path.join(out_dir, "%s.hosts" % name)
        self.set_hosts(hosts)
        if os.path.exists(self.log):
            os.unlink(self.log)
        root, bin_dir = args.root, args.bin or args.root
        env = dict(os.environ, ELASTIC_LOG=self.log, ELASTIC_EPOCHS=str(args.epochs),
                   ELASTIC_SAMPLES=str(args.samples), ELASTIC_STEP_S=str(args.step_s),
                   ELASTIC_COMMIT_EVERY="4", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   OVERLAP_LIBRARY=os.path.join(bin_dir, "runtime", "liboverlap.so"),
                   PYTHONPATH=os.path.join(root, "python"),
                   OVERLAP_ELASTIC_PYTHON=args.python,
                   OVERLAP_ELASTIC_STATE_DIR=os.path.join(out_dir, "%s.state" % name))
        command = [os.path.join(HERE, "cluster", "cluster.sh"), "exec",
                   os.path.join(bin_dir, "launcher", "overlaprun"),
                   "--min-np", "2", "--max-np", "4",
                   "--host-discovery-script", "cat %s" % self.hosts_file,
                   "--blacklist-cooldown-range", "5", "30", "--tcp-only",
                   "-x", "ELASTIC_LOG", "-x", "ELASTIC_EPOCHS", "-x", "ELASTIC_SAMPLES",
                   "-x", "ELASTIC_STEP_S", "-x", "ELASTIC_COMMIT_EVERY", "-x", "OMP_NUM_THREADS",
                   "-x", "PYTHONUNBUFFERED",
                   args.python, args.train]
        self.started = time.time()
        self.proc = subprocess.Popen(command, env=env, stdout=open(self.out, "w"),
                                     stderr=subprocess.STDOUT)

    def set_hosts(self, hosts):
        partial = self.hosts_file + ".partial"
        with open(partial, "w") as f:
            f.write("".join("%s:1\n" % h for h in hosts))
        os.replace(partial, self.hosts_file)

    def events(self):
        try:
            with open(self.log) as f:
                return [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def output(self):
        with open(self.out) as f:
            return f.read()

    def wait_for(self, predicate, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return None
            for e in self.events():
                if predicate(e):
                    return e
            time.sleep(0.2)
        return None

    def progress(self):
        done = [e for e in self.events() if e["event"] == "committed"]
        return done[-1]["steps"] if done else 0


def inject(kind, job, cluster, rng, live_hosts):
    """Injects one fault; returns a dict describing it (host, when it started and ended)."""
    host = rng.choice([h for h in live_hosts if h != "h1"] or live_hosts)
    fault = {"fault": kind, "host": host, "t": time.time()}
    if kind == "kill":
        pids = cluster.rank_pids(host, os.path.basename(job.args.train))
        if not pids:
            fault["skipped"] = "no rank on %s" % host
            return fault
        os.kill(rng.choice(pids), 9)
        fault["end"] = fault["t"]
    elif kind == "link":
        cluster.link(host, "down")
        # When the loss was noticed: mpirun's or a rank's report of it, read as it comes.
        seen = len(job.output())
        while time.time() < fault["t"] + 20:
            text = job.output()
            if "detected_s" not in fault and re.search(
                    r"lost (contact with |the control connection to rank \d+ \()host %s\b"
                    % host, text[seen:]):
                fault["detected_s"] = round(time.time() - fault["t"], 1)
            time.sleep(0.1)
        cluster.link(host, "up")
        fault["end"] = time.time()
    elif kind in ("loss", "slow"):
        if kind == "loss":
            cluster.fault("drop", host, "10")
        else:
            cluster.fault("rate", host, "10mbit")
        time.sleep(job.args.long_fault_s)
        cluster.fault("clear", host)
        fault["end"] = time.time()
    elif kind == "leave":
        job.set_hosts([h for h in job.args.hosts if h != host])
        time.sleep(30)
        job.set_hosts(job.args.hosts)
        fault["end"] = time.time()
    return fault


def analyse(job, faults):
    """Per fault: survived, time lost, and for the quick run's measurements the times from the
    fault to the next step and from a host's return to its first step. Also whether any
    committed step was lost across the generations."""
    events = job.events()
    committed = [e for e in events if e["event"] == "committed"]
    intervals = [b["t"] - a["t"] for a, b in zip(committed, committed[1:]) if a["gen"] == b["gen"]]
    normal = statistics.median(intervals) if intervals else 0.0
    lost_steps = 0
    problems = []
    generations = sorted({e["gen"] for e in events})
    for g in generations[1:]:
        before = [e for e in committed if e["gen"] < g]
        resumed = [e for e in events if e["event"] == "resume" and e["gen"] == g]
        if not resumed:
            continue
        seq = resumed[0]["seq"]
        last = max((e["seq"] for e in before), default=0)
        if seq < last:
            lost_steps += 1
            problems.append("generation %d resumed from commit %d, older than commit %d" %
                            (g, seq, last))
        pre = [e for e in events if e["event"] == "commit" and e["seq"] == seq and e["gen"] < g]
        if pre and any(r["digest"] != pre[-1]["digest"] for r in resumed):
            lost_steps += 1
            problems.append("generation %d's state differs from commit %d's" % (g, seq))
    output = job.output().splitlines()
    for f in faults:
        if f.get("skipped"):
            continue
        after = [e for e in events if e["t"] > f["t"]]
        first_steps = [e for e in after if e["event"] == "first_step"]
        next_commit = [e for e in after if e["event"] == "committed"]
        f["survived"] = bool(next_commit) or any(e["event"] == "done" for e in after)
        if first_steps and f["fault"] in ("kill", "link"):
            f["to_next_step_s"] = round(first_steps[0]["t"] - f["t"], 1)
        if f["fault"] == "leave":
            back = [e for e in events if e["event"] == "first_step" and e["t"] > f["end"]
                    and e["size"] == 4]
            if back:
                f["return_to_first_step_s"] = round(back[0]["t"] - f["end"], 1)
        end = f.get("end", f["t"])
        done = [e for e in next_commit if e["t"] > end]
        if done:
            window = done[0]["t"] - f["t"]
            steps = sum(1 for e in committed if f["t"] < e["t"] <= done[0]["t"])
            f["time_lost_s"] = round(max(0.0, window - steps * normal), 1)
    return lost_steps, problems


def run_reference(args):
    job = Job(args, args.out, "reference", args.hosts)
    rc = job.proc.wait(timeout=args.limit_s)
    losses = [e["loss"] for e in job.events() if e["event"] == "epoch"]
    if rc != 0 or not losses:
        sys.exit("chaos: the fault-free reference run failed (status %s); see %s" % (rc, job.out))
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the source tree (or a test's runfiles)")
    parser.add_argument("--bin", help="where launcher/overlaprun and runtime/liboverlap.so are "
                        "(default: --root)")
    parser.add_argument("--train", required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reference", action="store_true",
                        help="first run the job without faults and compare final losses")
    args = parser.parse_args()
    args.hosts = ["h1", "h2", "h3", "h4"]
    args.samples = 2048
    args.step_s = 0.05
    args.long_fault_s = 60
    if args.quick:
        args.epochs = 40
        args.limit_s = 900
    else:
        # About 3/4 of the soak at 4 ranks without faults (2.25 s an epoch on 2 cores), so that
        # training goes on while faults come and the restarts' cost still fits in the soak.
        args.epochs = int(args.minutes * 20)
        args.limit_s = args.minutes * 60 * 3 + 900
    os.makedirs(args.out, exist_ok=True)
    cluster = Cluster(args.root)
    rng = random.Random(args.seed)
    reference = run_reference(args) if args.reference else None

    job = Job(args, args.out, "chaos", args.hosts)
    faults = []
    if not job.wait_for(lambda e: e["event"] == "committed", 240):
        print(job.output()[-4000:])
        sys.exit("chaos: the job made no commit within 240 s")
    if args.quick:
        for kind, epoch in (("kill", 3), ("link", 12), ("leave", 25)):
            if not job.wait_for(lambda e, n=epoch: e["event"] == "epoch" and e["epoch"] >= n,
                                300):
                break
            fault = inject(kind, job, cluster, rng, ["h2"] if kind == "kill" else
                           ["h3"] if kind == "link" else ["h4"])
            faults.append(fault)
            print(json.dumps(fault), flush=True)
    else:
        kinds = ["kill", "link", "loss", "slow", "leave"]
        deadline = job.started + args.minutes * 60
        while time.time() < deadline and job.proc.poll() is None:
            time.sleep(rng.uniform(60, 120))
            if job.proc.poll() is not None or time.time() > deadline:
                break
            fault = inject(rng.choice(kinds), job, cluster, rng, args.hosts)
            faults.append(fault)
            print(json.dumps(fault), flush=True)
    try:
        rc = job.proc.wait(timeout=args.limit_s)
    except subprocess.TimeoutExpired:
        job.proc.kill()
        rc = "timeout"
    lost_steps, problems = analyse(job, faults)
    injected = [f for f in faults if not f.get("skipped")]
    survived = [f for f in injected if f.get("survived")]
    events = job.events()
    done = [e for e in events if e["event"] == "done"]
    print("\n%-6s %-5s %9s %14s %10s %18s" % ("fault", "host", "survived", "to next step",
                                             "detected", "time lost"))
    for f in injected:
        print("%-6s %-5s %9s %13s %10s %17s" % (
            f["fault"], f["host"], "yes" if f.get("survived") else "NO",
            "%ss" % f["to_next_step_s"] if "to_next_step_s" in f else
            ("return %ss" % f["return_to_first_step_s"]
             if "return_to_first_step_s" in f else "-"),
            "%ss" % f["detected_s"] if "detected_s" in f else "-",
            "%ss" % f["time_lost_s"] if "time_lost_s" in f else "-"))
    ok = rc == 0 and len(survived) == len(injected) and lost_steps == 0 and done and \
        done[0]["epoch"] == args.epochs
    if done:
        print("\nfinished %d epochs in %.0f s over %d generations; final loss %.4f" % (
            done[0]["epoch"], done[0]["t"] - job.started, done[0]["gen"] + 1, done[0]["loss"]))
    if reference is not None and done:
        final = [e["loss"] for e in events if e["event"] == "epoch"][-1]
        spread = (min(reference[-3:]), max(reference[-3:]))
        within = spread[0] * 0.9 <= final <= spread[1] * 1.1
        print("final epoch loss %.4f; fault-free run's last 3 epochs %.4f..%.4f (+-10%%): %s" % (
            final, spread[0], spread[1], "within" if within else "OUTSIDE"))
        ok = ok and within
    for p in problems:
        print("chaos: %s" % p)
    if rc != 0:
        print("chaos: the job ended with status %s; its output is in %s" % (rc, job.out))
        print(job.output()[-3000:])
    print("chaos: %d faults injected, %d survived, %d committed steps lost"
          % (len(injected), len(survived), lost_steps))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
