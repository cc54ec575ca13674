"""The time-to-accuracy lines, table and plot from bench/time_to_accuracy.sh's raw runs.

  python3 bench/time_to_accuracy_report.py RUNS.jsonl [--lines FILE] [--doc FILE|""] [--plot FILE]
      [--command TEXT]

Per task, the target comes from the `ddp` row (synchronous DDP, default buckets): its final test
accuracy minus 0.005, or its final validation loss times 1.01. A row reaches the target at the first
evaluation point whose quality meets it (the curve's resolution: 1 / evals-per-epoch of an epoch).
Prints one line per task and row (the issue's fields, plus "row", and "error" where a run failed),
writes them to --lines, rewrites the part of --doc between the results markers with the table,
and draws quality against wall time, one curve per row and a panel per task, into --plot.
"""

import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def meets(metric, quality, target):
    return quality >= target if metric == "accuracy" else quality <= target


def lines_for(runs):
    out = []
    for task in dict.fromkeys(r["task"] for r in runs):
        rows = [r for r in runs if r["task"] == task and r.get("row") != "local"]
        sync = next((r for r in rows if r.get("row") == "ddp" and "error" not in r), None)
        metric = sync["metric"] if sync else None
        target = None
        if sync:
            q = sync["final_quality"]
            target = round(q - 0.005, 5) if metric == "accuracy" else round(q * 1.01, 5)
        for r in rows:
            line = {"task": task, "system": r["row"].split(":")[0], "row": r["row"],
                    "planner": r.get("planner_row") or r.get("planner"), "correction": r.get("correction"),
                    "metric": r.get("metric", metric), "target": target, "time_to_target_s": None,
                    "final_quality": r.get("final_quality"),
                    "sync_final_quality": sync["final_quality"] if sync else None,
                    "step_ms": r.get("step_ms"), "sim_step_ms": r.get("sim_step_ms"), "epochs": r.get("epochs")}
            if r["row"] == "overlap:covap":
                line["compression"] = "covap:R=auto"
            elif r["row"] == "overlap:topk":
                line["compression"] = "topk:ratio=0.01"
            if "error" in r:
                line["error"] = r["error"]
            elif target is not None:
                line["time_to_target_s"] = next((t for t, _, q in r["curve"] if meets(metric, q, target)), None)
            out.append(line)
    return out


def fmt(v, digits=3):
    if v is None:
        return "—"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def table(lines, runs, command):
    when = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    local = {r["task"]: r for r in runs if r.get("row") == "local" and "error" not in r}
    md = [f"Measured {when} with `{command}`.", ""]
    for task in dict.fromkeys(l["task"] for l in lines):
        rows = [l for l in lines if l["task"] == task]
        raw = {r["row"]: r for r in runs if r["task"] == task}
        metric = rows[0]["metric"]
        head = f"**{task}** ({metric}; target {fmt(rows[0]['target'], 4)}"
        if task in local:
            head += f"; compute floor {fmt(local[task]['step_ms'], 1)} ms/step without communication"
        md += [head + ")", "",
               "| row | planner | correction | time to target (s) | vs ddp-tuned | vs best horovod | final | step ms | predicted step ms | train s | CPU busy before |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        ttt = {l["row"]: l["time_to_target_s"] for l in rows}
        hvd = [ttt[k] for k in ("horovod", "horovod+yield") if ttt.get(k) is not None]
        best_hvd = min(hvd) if hvd else None

        def ratio(base, mine):
            return f"{base / mine:.2f}x" if base and mine else "—"

        for l in rows:
            r = raw.get(l["row"], {})
            if "error" in l:
                md.append(f"| {l['row']} | {fmt(l['planner'])} | {fmt(l['correction'])} | error: {l['error'][:120]} |  |  |  |  |  |  |  |")
                continue
            md.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                l["row"], fmt(l["planner"]), fmt(l["correction"]), fmt(l["time_to_target_s"], 1),
                ratio(ttt.get("ddp-tuned"), l["time_to_target_s"]), ratio(best_hvd, l["time_to_target_s"]),
                fmt(l["final_quality"], 4), fmt(l["step_ms"], 1), fmt(l["sim_step_ms"], 1),
                fmt(r.get("train_s"), 1), fmt(r.get("cpu_busy_before"), 2)))
        md.append("")
    return md


def plot(runs, lines, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in runs))
    fig, axes = plt.subplots(1, len(tasks), figsize=(7 * len(tasks), 5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
        for r in runs:
            if r["task"] != task or "error" in r or r.get("row") == "local":
                continue
            t = [p[0] for p in r["curve"]]
            q = [p[2] for p in r["curve"]]
            style = "-" if r["row"].startswith("overlap") else "--"
            ax.plot(t, q, style, marker=".", label=r["row"])
        target = next((l["target"] for l in lines if l["task"] == task), None)
        if target is not None:
            ax.axhline(target, color="grey", linewidth=0.8, linestyle=":", label="target")
        metric = next((r["metric"] for r in runs if r["task"] == task and "metric" in r), "")
        ax.set_title(f"{task}: {metric} against wall time (4 ranks)")
        ax.set_xlabel("wall time of training (s; evaluation excluded)")
        ax.set_ylabel(metric)
        if metric == "accuracy":
            ax.set_ylim(bottom=max(0.0, (target or 0.5) - 0.4))
        elif target is not None:
            ax.set_ylim(top=target * 1.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs")
    p.add_argument("--lines", default=None)
    p.add_argument("--doc", default=os.path.join(ROOT, "docs", "time_to_accuracy.md"))
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "time_to_accuracy.png"))
    p.add_argument("--command", default="bench/time_to_accuracy.sh")
    args = p.parse_args(argv)
    with open(args.runs) as f:
        runs = [json.loads(x) for x in f if x.strip()]
    lines = lines_for(runs)
    for line in lines:
        print(json.dumps(line))
    if args.lines:
        with open(args.lines, "w") as f:
            f.writelines(json.dumps(l) + "\n" for l in lines)
    md = table(lines, runs, args.command)
    if args.doc:
        text = open(args.doc).read() if os.path.exists(args.doc) else f"{BEGIN}\n{END}\n"
        if BEGIN not in text or END not in text:
            sys.exit(f"time_to_accuracy_report.py: {args.doc} lacks the markers {BEGIN} / {END}")
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        with open(args.doc, "w") as f:
            f.write(head + BEGIN + "\n" + "\n".join(md) + "\n" + END + tail)
    else:
        print("\n".join(md), file=sys.stderr)
    if args.plot:
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        plot(runs, lines, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
