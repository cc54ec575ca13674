#!/usr/bin/env python3
"""Tables and a plot of bench/torch_side_by_side.sh's JSON lines.

    bench/torch_side_by_side_report.py docs/data/torch_side_by_side.jsonl
        [--doc docs/torch_side_by_side.md] [--plot docs/img/torch_side_by_side.png]

Prints the markdown tables and writes them into --doc between the lines
"<!-- results:begin -->" and "<!-- results:end -->", so the page's prose stays as written.
Speed-ups are against the best of each rival (the faster Horovod variant, the faster DDP), which
is the comparison a user choosing a system would make. Speed-ups, samples/s and efficiency use
the mean step where a line has one (throughput: a plan with update periods alternates long and
short steps, whose median is neither); "step ms" is the median. Without matplotlib the plot is
skipped.
"""
import argparse
import json
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def label(r):
    text = r["system"] + (f" ({r['planner']})" if r.get("planner") else "")
    if r["system"] == "ddp-tuned" and "bucket_cap_mb" in r:
        text += f", bucket {r['bucket_cap_mb']:g} MB"
    return text


def mean_ms(r):
    return r.get("step_ms_mean", r["step_ms"])


def best(runs, prefix):
    times = [mean_ms(r) for r in runs if "error" not in r and r["system"].startswith(prefix)]
    return min(times) if times else None


def ratio(rival, r):
    return "-" if rival is None or "error" in r else f"{rival / mean_ms(r):.2f}x"


def emulated_table(runs):
    lines = ["| model | system (planner) | step ms | mean ms | samples/s | ideal ms | efficiency | vs Horovod | vs DDP |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(r["model"] for r in runs):
        rows = [r for r in runs if r["model"] == model]
        hvd, ddp = best(rows, "horovod"), best(rows, "ddp")
        for r in rows:
            if "error" in r:
                lines.append(f"| {model} | {label(r)} | failed: {r['error']} | | | | | | |")
                continue
            lines.append(f"| {model} | {label(r)} | {r['step_ms']:.1f} | {mean_ms(r):.1f} | {r['samples_per_s']:.1f} "
                         f"| {r['ideal_ms']:.1f} | {r['ideal_ms'] / mean_ms(r):.2f} | {ratio(hvd, r)} | {ratio(ddp, r)} |")
    return "\n".join(lines)


def synthetic_table(runs):
    lines = ["| system (planner) | step ms | img/s (4 ranks) | vs Horovod | vs DDP |", "|---|---:|---:|---:|---:|"]
    hvd, ddp = best(runs, "horovod"), best(runs, "ddp")
    for r in runs:
        if "error" in r:
            lines.append(f"| {label(r)} | failed: {r['error']} | | | |")
            continue
        lines.append(f"| {label(r)} | {r['step_ms']:.1f} | {r['samples_per_s']:.1f} | {ratio(hvd, r)} | {ratio(ddp, r)} |")
    return "\n".join(lines)


def floor_system(system):
    """The no-communication run on the same torch as `system`: local-torch2.0 for Horovod and
    anything labelled torch2.0 (Horovod's 2.0.1), local otherwise."""
    old_torch = system.startswith("horovod") or system.endswith("torch2.0")
    return "local-torch2.0" if old_torch else "local"


def tiny_table(runs):
    """Step times, overlap's best against each system, and each system's coordination overhead:
    its step minus the step with no communication on the same torch (local runs on the newest
    torch, local-torch2.0 on Horovod's 2.0.1; DDP on torch 2.0.1 too when labelled so)."""
    ok = [r for r in runs if "error" not in r]
    floors = {r["system"]: r["step_ms"] for r in ok if r["system"] in ("local", "local-torch2.0")}

    def overhead(r):
        floor = floors.get(floor_system(r["system"]))
        return None if floor is None or r["system"].startswith("local") else r["step_ms"] - floor

    lines = ["| system (planner) | step ms | overlap / this | overhead ms | overlap's / this |",
             "|---|---:|---:|---:|---:|"]
    mine = [r for r in ok if r["system"] == "overlap"]
    best = min(mine, key=lambda r: r["step_ms"]) if mine else None
    for r in runs:
        if "error" in r:
            lines.append(f"| {label(r)} | failed: {r['error']} | | | |")
            continue
        other = best is not None and r["system"] != "overlap" and not r["system"].startswith("local")
        rel = f"{best['step_ms'] / r['step_ms']:.2f}" if other else "-"
        over = overhead(r)
        over_text = "-" if over is None else f"{over:.2f}"
        over_rel = "-"
        if other and over is not None and overhead(best) is not None and over > 0:
            over_rel = f"{overhead(best) / over:.2f}"
        lines.append(f"| {label(r)} | {r['step_ms']:.2f} | {rel} | {over_text} | {over_rel} |")
    return "\n".join(lines)


def tiny_rounds_table(runs):
    """--tiny-rounds: per round, each system's step and overhead above its own torch's floor of
    that round, overlap's overhead over each other system's, and the medians over rounds."""
    ok = [r for r in runs if "error" not in r]
    rounds = sorted({r["round"] for r in ok})
    others = sorted({r["system"] for r in ok} - {"overlap", "local", "local-torch2.0"})

    def step(k, system):
        found = [r["step_ms"] for r in ok if r["round"] == k and r["system"] == system]
        return found[0] if found else None

    def overhead(k, system):
        floor, mine = step(k, floor_system(system)), step(k, system)
        return None if floor is None or mine is None else mine - floor

    head = ["round", "overlap ms"] + [f"{o} ms" for o in others] + ["local ms", "local-torch2.0 ms",
                                                                   "overlap overhead"]
    head += [f"{o} overhead" for o in others] + [f"overlap's / {o}'s" for o in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    rows = []

    def text(v):
        return "-" if v is None else f"{v:.2f}"

    for k in rounds:
        mine = overhead(k, "overlap")
        theirs = [overhead(k, o) for o in others]
        row = [step(k, "overlap")] + [step(k, o) for o in others]
        row += [step(k, "local"), step(k, "local-torch2.0"), mine] + theirs
        row += [None if mine is None or t is None or t <= 0 else mine / t for t in theirs]
        rows.append(row)
        lines.append(f"| {k} | " + " | ".join(text(v) for v in row) + " |")
    medians = []
    for i in range(len(rows[0]) if rows else 0):
        values = [row[i] for row in rows if row[i] is not None]
        medians.append(statistics.median(values) if values else None)
    lines.append("| median | " + " | ".join(text(v) for v in medians) + " |")
    return "\n".join(lines)


def tables(runs):
    parts = []
    emulated = [r for r in runs if r.get("mode", "emulated") == "emulated" and r.get("model") not in ("small-resnet", "tiny50")]
    synthetic = [r for r in runs if r.get("mode") == "synthetic" or r.get("model") == "small-resnet"]
    tiny = [r for r in runs if r.get("mode") == "tiny" or r.get("model") == "tiny50"]
    if emulated:
        parts.append("### Emulated models (compute slept, 4 hosts)\n\n" + emulated_table(emulated))
    if synthetic:
        parts.append("### Real CPU compute: small ResNet, 4 ranks\n\n" + synthetic_table(synthetic))
    if tiny and any("round" in r for r in tiny):
        parts.append("### Coordination overhead: 50 tiny tensors per step, by round\n\n" +
                     tiny_rounds_table([r for r in tiny if "round" in r]))
    elif tiny:
        parts.append("### Coordination overhead: 50 tiny tensors per step\n\n" + tiny_table(tiny))
    return "\n\n".join(parts)


def write_doc(path, text, plot_rel):
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        print(f"{path} has no '{BEGIN}' ... '{END}' section; not written", file=sys.stderr)
        return
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = text + (f"\n\n![step time per system]({plot_rel})" if plot_rel else "")
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{body}\n{END}{tail}")


def plot(runs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no matplotlib: {path} not drawn)", file=sys.stderr)
        return False
    ok = [r for r in runs if "error" not in r]
    panels = [(m, [r for r in ok if r["model"] == m]) for m in dict.fromkeys(r["model"] for r in ok)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2), squeeze=False)
    colors = {"horovod": "tab:red", "ddp": "tab:blue", "overlap": "tab:green"}
    for ax, (model, rows) in zip(axes[0], panels):
        x = range(len(rows))
        ax.bar(x, [mean_ms(r) for r in rows], color=[colors.get(r["system"].split("+")[0].split("-")[0], "gray") for r in rows])
        if rows[0].get("ideal_ms"):
            ax.axhline(rows[0]["ideal_ms"], color="black", linestyle="--", linewidth=1, label="ideal")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_xticks(list(x))
        ax.set_xticklabels([r.get("planner") or r["system"] for r in rows], rotation=60, ha="right", fontsize=8)
        ax.set_title(model)
        ax.set_ylabel("step ms (slowest rank, mean)")
    fig.suptitle("horovod.torch (red), torch DDP (blue), overlap.torch by planner (green)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsonl")
    p.add_argument("--doc", default=os.path.join(REPO, "docs", "torch_side_by_side.md"))
    p.add_argument("--plot", default=os.path.join(REPO, "docs", "img", "torch_side_by_side.png"))
    args = p.parse_args()
    with open(args.jsonl) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    text = tables(runs)
    print(text)
    drawn = plot(runs, args.plot)
    if args.doc and os.path.exists(args.doc):
        write_doc(args.doc, text, os.path.relpath(args.plot, os.path.dirname(args.doc)) if drawn else None)


if __name__ == "__main__":
    main()
