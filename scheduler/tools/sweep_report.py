#!/usr/bin/python3
"""Tables and the plot for docs/simulator-results.md from run_sweep.sh's JSON lines.

Usage: /usr/bin/python3 scheduler/tools/sweep_report.py OUT_DIR PNG_PATH > tables.md
(needs numpy and matplotlib; Debian's /usr/bin/python3 has them).
"""
import collections
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PLANNERS = ["wfbp", "fusion", "mgwfbp", "bytescheduler", "usbyte", "dear", "deft", "auto"]
MODELS = ["resnet50", "resnet101", "vgg16", "bert-base", "bert-large", "gpt2-small", "gpt2-medium"]


def load(out_dir):
    data = collections.defaultdict(dict)  # (model, gbit) -> workers -> planner -> row
    for path in glob.glob(os.path.join(out_dir, "*.jsonl")):
        model, gbit = os.path.basename(path)[:-len(".jsonl")].rsplit("-", 1)
        for line in open(path):
            row = json.loads(line)
            name = "auto" if row["planner"].startswith("auto") else row["planner"]
            data[(model, int(gbit))].setdefault(row["workers"], {})[name] = row
    return data


def table(data, model, gbit):
    rows = data[(model, gbit)]
    print(f"\n#### {model}, {gbit} Gbit/s (iteration ms; deft efficiency; deft speed-up over the "
          f"better of bytescheduler and usbyte; auto's choice)\n")
    print("| workers | " + " | ".join(PLANNERS) + " | ideal | deft eff. | deft vs best(BS, US-Byte) | auto picks |")
    print("|---:|" + "---:|" * len(PLANNERS) + "---:|---:|---:|---|")
    for w in sorted(rows):
        r = rows[w]
        best = min(r["bytescheduler"]["iter_ms"], r["usbyte"]["iter_ms"])
        cells = " | ".join(f"{r[p]['iter_ms']:.1f}" for p in PLANNERS)
        print(f"| {w} | {cells} | {r['deft']['ideal_ms']:.1f} | {r['deft']['efficiency']:.3f} | "
              f"{best / r['deft']['iter_ms']:.3f}x | {r['auto']['planner'][5:]} |")


def plot(data, png):
    fig, axes = plt.subplots(2, len(MODELS), figsize=(4.5 * len(MODELS), 8), sharex=True)
    for col, model in enumerate(MODELS):
        for row, gbit in enumerate([10, 100]):
            ax = axes[row][col]
            rows = data[(model, gbit)]
            workers = sorted(rows)
            for p in PLANNERS[:-1]:
                ax.plot(workers, [rows[w][p]["iter_ms"] for w in workers], marker="o",
                        markersize=3, label=p, linewidth=2.2 if p == "deft" else 1.2)
            ax.plot(workers, [rows[w]["deft"]["ideal_ms"] for w in workers], "k--",
                    linewidth=1, label="ideal")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}, {gbit} Gbit/s ring, 10 us")
            ax.grid(True, which="both", alpha=0.3)
            if row == 1:
                ax.set_xlabel("workers")
            if col == 0:
                ax.set_ylabel("iteration time (ms)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("overlap-sim: simulated iteration time by planner (staleness 1 for deft)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    data = load(sys.argv[1])
    for model in MODELS:
        for gbit in [10, 100]:
            table(data, model, gbit)
    plot(data, sys.argv[2])


if __name__ == "__main__":
    main()
