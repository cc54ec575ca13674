#!/usr/bin/env python3
"""Markdown table (and, with matplotlib, a plot) of tools/cluster_bench.sh's JSON lines.

    tools/cluster_bench_report.py docs/data/cluster_bench.jsonl [--plot docs/img/cluster_bench.png]

The plot shows, per model, the measured step time of each planner next to the simulator's
prediction, with the ideal step as a line. "of sync bound" is sync_bound_ms / step_ms, for
synchronous plans only (bench/model_step.cc, docs/benchmarks.md). Without matplotlib the plot is skipped with a note.
"""
import argparse
import json
import sys


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(runs):
    lines = [
        "| model | planner | plan | buckets | update | step ms | mean ms | predicted ms | error "
        "| ideal ms | efficiency | sync bound ms | of sync bound |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['planner']} | failed: {r['error']} | | | | | | | | | | |")
            continue
        error = r.get("sim_error")
        plan = (r.get("plan") or "-") + ("" if r.get("plan_held", True) else " (changed while measured)")
        lines.append(
            f"| {r['model']} | {r['planner']} | {plan} | {r.get('buckets', '-')} "
            f"| {r.get('update', '-')} | {fmt(r['step_ms'], '.1f')} | {fmt(r.get('step_ms_mean'), '.1f')} "
            f"| {fmt(r.get('sim_step_ms'), '.1f')} "
            f"| {'-' if error is None else format(100 * error, '+.1f') + '%'} "
            f"| {fmt(r['ideal_ms'], '.1f')} | {fmt(r['efficiency'], '.2f')} "
            f"| {fmt(r.get('sync_bound_ms'), '.1f')} | {fmt(r.get('sync_efficiency'), '.2f')} |")
    return "\n".join(lines)


def plot(runs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no matplotlib: {path} not drawn)", file=sys.stderr)
        return
    ok = [r for r in runs if "error" not in r]
    models = list(dict.fromkeys(r["model"] for r in ok))
    if not models:
        return
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rows = [r for r in ok if r["model"] == model]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["step_ms"] for r in rows], 0.4, label="measured")
        ax.bar([i + 0.2 for i in x], [r.get("sim_step_ms") or 0 for r in rows], 0.4,
               label="predicted")
        ax.axhline(rows[0]["ideal_ms"], color="gray", linestyle="--", label="ideal")
        if rows[0].get("sync_bound_ms"):
            ax.axhline(rows[0]["sync_bound_ms"], color="black", linestyle=":",
                       label="synchronous bound")
        ax.set_xticks(list(x))
        ax.set_xticklabels([r["planner"] for r in rows], rotation=45, ha="right")
        ax.set_title(model)
        ax.set_ylabel("step ms")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"(plot: {path})", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl")
    parser.add_argument("--plot", help="PNG to draw (needs matplotlib)")
    args = parser.parse_args()
    with open(args.jsonl) as f:
        runs = [json.loads(line) for line in f if line.startswith("{")]
    print(table(runs))
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
