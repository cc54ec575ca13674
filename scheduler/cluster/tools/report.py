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


def utilization_table(rows):
    """Ada-SRSF against SRSF(1) and SRSF(2) as the per-transfer link utilization u drops."""
    def key(r):
        return (r["jobs"], r["seed"], r["link_utilization"], r["eta"], r["placement"],
                r["communication"])
    by = {key(r): r for r in rows}

    def c2(u, eta):  # Slowdown(2), the only constant two-way sharing sees
        return max(1.0, 2 * u) * (1 + eta)

    # The doc's summary: Ada-SRSF against SRSF(1) per job set, seed 1 ("-": not run).
    def vs(jobs, u, eta, p, other):
        a, b = by.get((jobs, 1, u, eta, p, "ada-srsf")), by.get((jobs, 1, u, eta, p, other))
        return pct(a["avg_jct_s"], b["avg_jct_s"]) if a and b else "-"
    print("\n| u | eta | c = Slowdown(2) | Ada-SRSF vs SRSF(1), first-fit, 80 / 160 / 480 jobs | "
          "same, lwf-4 | Ada-SRSF vs SRSF(2), 160 jobs, first-fit / lwf-4 | "
          "transfers shared by Ada-SRSF (160, first-fit) |")
    print("|---:|---:|---:|---|---|---|---:|")
    for u, eta in sorted({(r["link_utilization"], r["eta"]) for r in rows},
                         key=lambda k: (-k[0], k[1])):
        a = by[(160, 1, u, eta, "first-fit", "ada-srsf")]
        print("| %g | %g | %.2f | %s | %s | %s | %.0f%% |" % (
            u, eta, c2(u, eta),
            " / ".join(vs(j, u, eta, "first-fit", "srsf1") for j in JOBS),
            " / ".join(vs(j, u, eta, "lwf-4", "srsf1") for j in JOBS),
            " / ".join(vs(160, u, eta, p, "srsf2") for p in ("first-fit", "lwf-4")),
            100.0 * a["shared_transfers"] / a["transfers"]))

    combos = sorted({(r["jobs"], r["link_utilization"], r["eta"]) for r in rows if r["seed"] == 1},
                    key=lambda k: (k[0], -k[1], k[2]))
    print("\n| jobs | u | eta | c = Slowdown(2) | placement | srsf1 | srsf2 | ada-srsf | "
          "Ada-SRSF vs SRSF(1) | vs SRSF(2) | shared / transfers (Ada-SRSF) |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for jobs, u, eta in combos:
        for p in ("first-fit", "lwf-4"):
            r = {c: by[(jobs, 1, u, eta, p, c)] for c in ("srsf1", "srsf2", "ada-srsf")}
            a = r["ada-srsf"]
            print("| %d | %g | %g | %.2f | %s | %.0f | %.0f | %.0f | %s | %s | %.0f%% |" % (
                jobs, u, eta, c2(u, eta), p, r["srsf1"]["avg_jct_s"], r["srsf2"]["avg_jct_s"],
                a["avg_jct_s"], pct(a["avg_jct_s"], r["srsf1"]["avg_jct_s"]),
                pct(a["avg_jct_s"], r["srsf2"]["avg_jct_s"]),
                100.0 * a["shared_transfers"] / max(1, a["transfers"])))
    seeds = sorted({r["seed"] for r in rows})
    if len(seeds) < 2:
        return
    print("\n| jobs | u | eta | placement | Ada-SRSF vs SRSF(1), seeds %s | mean | "
          "vs SRSF(2), mean |" % "-".join(str(s) for s in (seeds[0], seeds[-1])))
    print("|---:|---:|---:|---|---|---:|---:|")
    multi = sorted({(r["jobs"], r["link_utilization"], r["eta"]) for r in rows
                    if r["seed"] == seeds[-1] and r["jobs"] == 160},
                   key=lambda k: (k[0], -k[1], k[2]))
    for jobs, u, eta in multi:
        for p in ("first-fit", "lwf-4"):
            def ratios(other):
                return [by[(jobs, s, u, eta, p, "ada-srsf")]["avg_jct_s"] /
                        by[(jobs, s, u, eta, p, other)]["avg_jct_s"] for s in seeds]
            v1 = ratios("srsf1")
            print("| %d | %g | %g | %s | %s | %+.1f%% | %+.1f%% |" % (
                jobs, u, eta, p, ", ".join("%+.0f%%" % (100 * (v - 1)) for v in v1),
                100 * (statistics.mean(v1) - 1), 100 * (statistics.mean(ratios("srsf2")) - 1)))


def plot(pairs, planner_names, planners_by, util_rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by = index(pairs, "jobs", "placement", "communication")
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
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
    # Ada-SRSF against SRSF(1) and SRSF(2) as sharing gets cheaper (c = Slowdown(2)), 160 jobs.
    ax = axes[3]
    ub = {(r["link_utilization"], r["eta"], r["placement"], r["communication"]): r
          for r in util_rows if r["jobs"] == 160 and r["seed"] == 1}
    cs = sorted({(max(1.0, 2 * u) * (1 + eta), u, eta) for u, eta, _, _ in ub})
    for p, style in (("first-fit", "-"), ("lwf-4", "--")):
        for other, label in (("srsf1", "SRSF(1)"), ("srsf2", "SRSF(2)")):
            ax.plot([c for c, _, _ in cs],
                    [100 * (ub[(u, e, p, "ada-srsf")]["avg_jct_s"] /
                            ub[(u, e, p, other)]["avg_jct_s"] - 1) for _, u, e in cs],
                    style, marker="o", label="vs %s, %s" % (label, p))
    ax.axhline(-20.1, color="grey", linestyle=":", label="paper vs SRSF(1)")
    ax.axhline(-36.7, color="black", linestyle=":", label="paper vs SRSF(2)")
    ax.axvline(1.5, color="grey", linewidth=0.5)
    ax.set_xlabel("c = Slowdown(2) = max(1, 2u)(1 + eta)")
    ax.set_ylabel("Ada-SRSF average JCT change (%)")
    ax.set_title("160 jobs: link utilization u and eta")
    ax.legend(fontsize=7)
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
    seeds = load(out + "/seeds.jsonl")
    load_table([r for r in seeds if r["jobs"] == 160] + load(out + "/load.jsonl"))
    print("\n## Link utilization")
    # u = 1 cases come from the other parts; only fusion at the preset's load counts.
    rows = pairs + seeds + load(out + "/eta.jsonl") + load(out + "/utilization.jsonl")
    util_rows = [r for r in rows if r["communication"] in ("srsf1", "srsf2", "ada-srsf")
                 and r["placement"] in ("first-fit", "lwf-4") and r["eta"] in (0, 0.2, 0.5)
                 and r["mean_interarrival_s"] == 5]
    utilization_table(util_rows)
    plot(pairs, names, planners_by, util_rows, png)


if __name__ == "__main__":
    main()
