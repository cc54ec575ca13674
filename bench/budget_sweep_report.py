"""The table and plot of bench/budget_sweep.sh: accuracy lost against deft's convergence budget.

  python3 bench/budget_sweep_report.py RUNS.jsonl [--doc FILE] [--plot FILE] [--command TEXT]

RUNS.jsonl holds bench/time_to_accuracy.sh's raw runs of one task, for one or more seeds: `ddp` and
`overlap:observed` (synchronous), and deft rows `overlap:deft-sS@B` (OVERLAP_BUDGET=B) or
`overlap:deft-sS` (OVERLAP_BUDGET=-1, the planner's
bound max(S, (max_period - 1) / 2)). Prints one row per row name: the budget asked for, the
plan's mean staleness (the budget it used, RuntimeStats::plan_mean_staleness) and update cycle,
the final accuracy and the points lost against ddp and against overlap's synchronous observed plan
of the same seed (means over the seeds; each seed's in brackets), the median step and how many
seeds reached ddp's accuracy minus 0.5 point. --doc rewrites the part of FILE between the budget
markers.
"""

import argparse
import datetime
import json
import math
import statistics
import sys

BEGIN, END = "<!-- budget:begin -->", "<!-- budget:end -->"


def budget_label(row):
    if not row.startswith("overlap:deft"):
        return "—"
    if "@" in row:
        return row.split("@", 1)[1].split(":", 1)[0]
    return "-1 (bound)"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs")
    p.add_argument("--doc", default="")
    p.add_argument("--plot", default="")
    p.add_argument("--command", default="")
    a = p.parse_args(argv)
    runs = [json.loads(line) for line in open(a.runs) if line.strip()]
    seeds = list(dict.fromkeys(r.get("seed", 42) for r in runs))
    ref = {}  # (seed, "ddp" | "overlap:observed") -> final accuracy
    for r in runs:
        if r["row"] in ("ddp", "overlap:observed") and "error" not in r:
            ref[(r.get("seed", 42), r["row"])] = r["final_quality"]
    if not any(k[1] == "ddp" for k in ref):
        sys.exit("budget_sweep_report.py: no ddp run: it sets the reference")

    when = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    ddp_q = [ref[(s, "ddp")] for s in seeds if (s, "ddp") in ref]
    md = [f"Measured {when} with `{a.command}`: seeds {', '.join(map(str, seeds))}; ddp's final "
          f"accuracy {', '.join(f'{q:.4f}' for q in ddp_q)}. Points are the mean over the seeds of each "
          "seed's difference (each seed's in brackets); \"at target\": the seeds whose run reached "
          "ddp's accuracy minus 0.5 point.", "",
          "| row | budget | mean staleness used | update cycle | final accuracy | vs ddp (points) "
          "| vs observed (points) | step ms | at target |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    points = []
    for row in dict.fromkeys(r["row"] for r in runs if r["row"] != "local"):
        mine = [r for r in runs if r["row"] == row]
        ok = [r for r in mine if "error" not in r]
        errors = [r["error"][:80] for r in mine if "error" in r]
        if not ok:
            md.append(f"| {row} | {budget_label(row)} | error: {errors[0]} |||||||")
            continue
        staleness = sorted({(r.get("runtime") or {}).get("plan_mean_staleness") for r in ok} - {None})
        cycles = sorted({(r.get("runtime") or {}).get("plan_update_cycle") for r in ok} - {None})

        def diffs(against):
            return [(r["final_quality"] - ref[(r.get("seed", 42), against)]) * 100
                    for r in ok if (r.get("seed", 42), against) in ref]

        def cell(values):
            if not values:
                return "—"
            text = f"{statistics.fmean(values):+.2f}"
            return text + (f" ({', '.join(f'{v:+.2f}' for v in values)})" if len(values) > 1 else "")

        vs_ddp, vs_obs = diffs("ddp"), diffs("overlap:observed")
        def target(r):  # ddp's accuracy of the same seed minus 0.5 point; unreachable without it
            return ref.get((r.get("seed", 42), "ddp"), math.inf) - 0.005

        reached = sum(1 for r in ok if any(q >= target(r) for _, _, q in r.get("curve", [])))
        md.append(f"| {row} | {budget_label(row)} | {', '.join(f'{x:.3g}' for x in staleness) or '—'} "
                  f"| {', '.join(map(str, cycles)) or '—'} "
                  f"| {statistics.fmean(r['final_quality'] for r in ok):.4f} | {cell(vs_ddp)} | {cell(vs_obs)} "
                  f"| {statistics.fmean(r['step_ms'] for r in ok):.1f} | {reached}/{len(ok)}"
                  + (f"; {len(errors)} failed" if errors else "") + " |")
        if row.startswith("overlap:deft") and vs_ddp:
            label = budget_label(row)
            # The bound: max(S, (max_period - 1) / 2) with bench/time_to_accuracy.sh's max period 4.
            asked = float(label) if label[0].isdigit() else max(float(row.split("deft-s")[1].split(":")[0]), 1.5)
            points.append((asked, statistics.fmean(vs_ddp), statistics.fmean(vs_obs) if vs_obs else None,
                           staleness))
    text = "\n".join(md)
    print(text)
    if a.doc:
        doc = open(a.doc).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"budget_sweep_report.py: {a.doc} has no {BEGIN} ... {END} markers")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        open(a.doc, "w").write(head + BEGIN + "\n" + text + "\n" + END + tail)
    if a.plot and points:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("budget_sweep_report.py: no matplotlib; no plot", file=sys.stderr)
            return
        points.sort()
        fig, ax = plt.subplots(figsize=(6.5, 4))
        ax.plot([x for x, *_ in points], [y for _, y, *_ in points], "o-", label="against ddp")
        if all(z is not None for _, _, z, _ in points):
            ax.plot([x for x, *_ in points], [z for _, _, z, _ in points], "s--", label="against overlap observed")
        ax.axhline(-0.5, color="grey", linestyle=":", label="-0.5 point")
        for x, y, _, used in points:  # what the plan spent of the budget
            ax.annotate("used " + "/".join(f"{u:.2g}" for u in used), (x, y), textcoords="offset points",
                        xytext=(4, 6), fontsize=7)
        ax.set_xlabel("OVERLAP_BUDGET (the bound, max(S, 1.5), at the right)")
        ax.set_ylabel("final test accuracy, points (mean over seeds)")
        ax.set_title(f"Fashion-MNIST CNN, 4 ranks, SGD momentum 0.9; seeds {', '.join(map(str, seeds))}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])
