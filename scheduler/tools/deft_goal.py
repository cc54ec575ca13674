#!/usr/bin/python3
"""The DeFT-goal table of docs/simulator-results.md: every bundled model at 16 workers, 10 Gbit/s
ring with 5 us latency, staleness 1 and max period 1, 2 and 4 (default budget).

Usage: scheduler/tools/deft_goal.py [path/to/overlap-sim]
"""
import json
import subprocess
import sys

MODELS = ["resnet50", "resnet101", "vgg16", "bert-base", "bert-large", "gpt2-small", "gpt2-medium"]


def main():
    sim = sys.argv[1] if len(sys.argv) > 1 else "bazel-bin/scheduler/overlap-sim"
    print("| model | max period | bytescheduler | usbyte | dear | deft | deft vs best(BS, US-Byte) "
          "| compute | buckets | max delay | budget used |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in MODELS:
        for period in [1, 2, 4]:
            out = subprocess.run(
                [sim, "--model", model, "--workers", "16", "--planners",
                 "bytescheduler,usbyte,dear,deft", "--cost", "ring", "--latency-us", "5",
                 "--bandwidth-gbit", "10", "--staleness", "1", "--max-period", str(period),
                 "--json"], capture_output=True, text=True, check=True).stdout
            rows = {json.loads(line)["planner"]: json.loads(line) for line in out.splitlines()}
            d = rows["deft"]
            best = min(rows["bytescheduler"]["iter_ms"], rows["usbyte"]["iter_ms"])
            print(f"| {model} | {period} | {rows['bytescheduler']['iter_ms']:.1f} | "
                  f"{rows['usbyte']['iter_ms']:.1f} | {rows['dear']['iter_ms']:.1f} | "
                  f"{d['iter_ms']:.1f} | {best / d['iter_ms']:.2f}x | {d['compute_ms']:.1f} | "
                  f"{d['buckets']} | {d['max_delay']} | {d['budget_used']:.2f} |")


if __name__ == "__main__":
    main()
