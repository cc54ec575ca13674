#!/usr/bin/env python3
"""Markdown tables and a plot from scheduler/cluster/tools/run_experiment.sh's JSON lines.

    /usr/bin/python3 scheduler/cluster/tools/report.py OUT_DIR docs/img/cluster-sim.png
"""
import json
import statistics
import sys

PLACEMENTS = ["first-fit", "lwf-1", "lwf-2", "lwf-4"]
COMMS = ["srsf1", "srsf2", "adadual", "ada-srsf"]
JOBS = [80, 160, 480]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def index(rows, *keys):
    return {tuple(r[k] for k in keys): r for r in rows}


def pct(new, old):
    return "%+.1f%%" % (100.0 * (new / old - 1.0))


def pairs_tables(rows):
    by = index(rows, "jobs", "placement", "communication")
    for jobs in JOBS:
        print("\n%d jobs, average JCT in s (median / p95 / makespan / GPU util / shared "
              "transfers below):\n" % jobs)
        print("| placement | " + " | ".join(COMMS) + " |")
        print("|---|" + "---:|" * len(COMMS))
        for p in PLACEMENTS:
            print("| %s | " % p + " | ".join(
                "%.0f" % by[(jobs, p, c)]["avg_jct_s"] for c in COMMS) + " |")
        print("\n| placement | communication | avg | median | p95 | makespan | GPU util | "
              "shared / transfers |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for p in PLACEMENTS:
            for c in COMMS:
                r = by[(jobs, p, c)]
                print("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.3f | %d / %d |" % (
                    p, c, r["avg_jct_s"], r["median_jct_s"], r["p95_jct_s"], r["makespan_s"],
                    r["gpu_util"], r["shared_transfers"], r["transfers"]))


def headline(rows):
    by = index(rows, "jobs", "placement", "communication")
    print("\n| jobs | best LWF-k vs first-fit (same policy, best case) | "
          "Ada-SRSF vs SRSF(1), first-fit / lwf-4 | Ada-SRSF vs SRSF(2), first-fit / lwf-4 |")
    print("|---:|---|---|---|")
    for jobs in JOBS:
        best = max(((by[(jobs, "first-fit", c)]["avg_jct_s"] / by[(jobs, p, c)]["avg_jct_s"], p, c)
                    for p in PLACEMENTS[1:] for c in COMMS))
        cells = []
        for other in ("srsf1", "srsf2"):
            cells.append(" / ".join(
                pct(by[(jobs, p, "ada-srsf")]["avg_jct_s"], by[(jobs, p, other)]["avg_jct_s"])
                for p in ("first-fit", "lwf-4")))
        print("| %d | %.2fx (%s, %s) | %s | %s |" % (jobs, best[0], best[1], best[2], *cells))


def planners_table(rows):
    def name(r):
        return r["planner"] + (" (S=%d)" % r["staleness"] if r["planner"] == "deft" else "")
    names = []
    for r in rows:
        if name(r) not in names:
            names.append(name(r))
    by = {(r["jobs"], r["placement"], name(r)): r for r in rows}
    print("\n| jobs | placement | " + " | ".join(names) + " |")
    print("|---:|---|" + "---:|" * len(names))
    for jobs in JOBS:
        for p in ("first-fit", "lwf-4"):
            print("| %d | %s | " % (jobs, p) + " | ".join(
                "%.0f" % by[(jobs, p, n)]["avg_jct_s"] for n in names) + " |")
    return names, by


def seeds_table(rows):
    print("\n| jobs | placement | Ada-SRSF vs SRSF(1), seeds 1-5 | mean | Ada-SRSF vs SRSF(2) | "
          "mean | lwf-4 vs first-fit (SRSF(1)) | mean |")
    print("|---:|---|---|---:|---|---:|---|---:|")
    by = index(rows, "jobs", "seed", "placement", "communication")
    seeds = sorted({r["seed"] for r in rows})
    for jobs in (80, 160):
        for p in ("first-fit", "lwf-4"):
            v1 = [by[(jobs, s, p, "ada-srsf")]["avg_jct_s"] / by[(jobs, s, p, "srsf1")]["avg_jct_s"]
                  for s in seeds]
            v2 = [by[(jobs, s, p, "ada-srsf")]["avg_jct_s"] / by[(jobs, s, p, "srsf2")]["avg_jct_s"]
                  for s in seeds]
            v3 = [by[(jobs, s, "first-fit", "srsf1")]["avg_jct_s"] /
                  by[(jobs, s, "lwf-4", "srsf1")]["avg_jct_s"] for s in seeds]
            print("| %d | %s | %s | %s | %s | %s | %s | %.2fx |" % (
                jobs, p, ", ".join("%+.0f%%" % (100 * (v - 1)) for v in v1),
                "%+.1f%%" % (100 * (statistics.mean(v1) - 1)),
                ", ".join("%+.0f%%" % (100 * (v - 1)) for v in v2),
                "%+.1f%%" % (100 * (statistics.mean(v2) - 1)),
                ", ".join("%.2f" % v for v in v3), statistics.mean(v3)))


def eta_table(rows):
    by = index(rows, "eta", "placement", "communication")
    etas = sorted({r["eta"] for r in rows})
    print("\n| eta | placement | " + " | ".join(COMMS) +
          " | Ada-SRSF vs SRSF(1) | Ada-SRSF vs SRSF(2) |")
    print("|---:|---|" + "---:|" * (len(COMMS) + 2))
    for eta in etas:
        for p in ("first-fit", "lwf-4"):
            r = {c: by[(eta, p, c)]["avg_jct_s"] for c in COMMS}
            print("| %g | %s | " % (eta, p) + " | ".join("%.0f" % r[c] for c in COMMS) +
                  " | %s | %s |" % (pct(r["ada-srsf"], r["srsf1"]), pct(r["ada-srsf"], r["srsf2"])))


def load_table(rows):
    by = index(rows, "mean_interarrival_s", "seed", "placement", "communication")
    gaps = sorted({r["mean_interarrival_s"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    print("\n| mean gap (s) | makespan, first-fit SRSF(1) (s) | lwf-4 vs first-fit (SRSF(1)) | "
          "Ada-SRSF vs SRSF(1), first-fit, seeds 1-5 | mean | same, lwf-4 (mean) | "
          "Ada-SRSF vs SRSF(2), first-fit / lwf-4 (mean) |")
    print("|---:|---:|---:|---|---:|---:|---|")
    for gap in gaps:
        def ratios(p, other):
            return [by[(gap, s, p, "ada-srsf")]["avg_jct_s"] / by[(gap, s, p, other)]["avg_jct_s"]
                    for s in seeds]
        ff = [by[(gap, s, "first-fit", "srsf1")]["avg_jct_s"] /
              by[(gap, s, "lwf-4", "srsf1")]["avg_jct_s"] for s in seeds]
        span = statistics.mean(by[(gap, s, "first-fit", "srsf1")]["makespan_s"] for s in seeds)
        v1 = ratios("first-fit", "srsf1")
        print("| %g | %.0f | %.2fx | %s | %+.1f%% | %+.1f%% | %+.1f%% / %+.1f%% |" % (
            gap, span, statistics.mean(ff), ", ".join("%+.0f%%" % (100 * (v - 1)) for v in v1),
            100 * (statistics.mean(v1) - 1), 100 * (statistics.mean(ratios("lwf-4", "srsf1")) - 1),
            100 * (statistics.mean(ratios("first-fit", "srsf2")) - 1),
            100 * (statistics.mean(ratios("lwf-4", "srsf2")) - 1)))


def plot(pairs, planner_names, planners_by, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by = index(pairs, "jobs", "placement", "communication")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    width = 0.2
    for ax, jobs in zip(axes[:2], (160, 480)):
        for i, c in enumerate(COMMS):
            ax.bar([x + (i - 1.5) * width for x in range(len(PLACEMENTS))],
                   [by[(jobs, p, c)]["avg_jct_s"] for p in PLACEMENTS], width, label=c)
        ax.set_xticks(range(len(PLACEMENTS)))
        ax.set_xticklabels(PLACEMENTS)
        ax.set_ylabel("average JCT (s)")
        ax.set_title("%d jobs on 16 x 4 GPUs, 10 Gbit/s" % jobs)
        ax.legend(fontsize=8)
    ax = axes[2]
    width = 0.8 / len(planner_names)
    groups = [(j, p) for j in JOBS for p in ("first-fit", "lwf-4")]
    for i, n in enumerate(planner_names):
        base = [planners_by[(j, p, planner_names[0])]["avg_jct_s"] for j, p in groups]
        ax.bar([x + (i - (len(planner_names) - 1) / 2) * width for x in range(len(groups))],
               [planners_by[(j, p, n)]["avg_jct_s"] / b for (j, p), b in zip(groups, base)],
               width, label=n)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(["%d\n%s" % g for g in groups], fontsize=8)
    ax.set_ylim(0.8, 1.1)
    ax.set_ylabel("average JCT / fusion's")
    ax.set_title("Ada-SRSF, every job planned by ...")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    out, png = sys.argv[1], sys.argv[2]
    pairs = load(out + "/pairs.jsonl")
    print("## Headline")
    headline(pairs)
    print("\n## Every policy pair")
    pairs_tables(pairs)
    print("\n## Planners under Ada-SRSF")
    names, planners_by = planners_table(load(out + "/planners.jsonl"))
    print("\n## Seeds")
    seeds_table(load(out + "/seeds.jsonl"))
    print("\n## eta (160 jobs)")
    eta_table(load(out + "/eta.jsonl"))
    print("\n## Load (160 jobs)")
    load_table(load(out + "/load.jsonl"))
    plot(pairs, names, planners_by, png)


if __name__ == "__main__":
    main()
