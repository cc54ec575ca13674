#!/usr/bin/env python3
"""Markdown tables from tools/hetero_bench.sh's JSON lines: the 64 MiB allreduce per scenario, and
each model's step per scenario and planner, the adaptive allreduce against the ring."""
import json
import sys

SCENARIOS = ["uniform", "slow-link-0.5", "slow-link-0.25", "straggler-30", "hiccups"]


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    allreduce = {(r["scenario"], r["adaptive"]): r for r in rows if r.get("case") == "allreduce"}
    if allreduce:
        mib = next(iter(allreduce.values()))["bytes"] / (1 << 20)
        print(f"\n| {mib:g} MiB allreduce | ring (adaptive off) | adaptive | adaptive / ring "
              "| ring / uniform ring | adaptive / uniform ring | shares |")
        print("|---|---|---|---|---|---|---|")
        for scenario in SCENARIOS:
            ring, ada = allreduce.get((scenario, False)), allreduce.get((scenario, True))
            if ring and ada:
                print(f"| {scenario} | {ring['ms']:.0f} ms | {ada['ms']:.0f} ms | "
                      f"{ada['ms'] / ring['ms']:.2f} | {ring['vs_uniform']:.2f} | "
                      f"{ada['vs_uniform']:.2f} | {ada['link_rates'] or '-'} |")
    steps = {(r["model"], r["scenario"], r["planner"], r["adaptive"]): r
             for r in rows if r.get("case") == "step"}
    if steps:
        print("\n| model | scenario | planner | ring step | adaptive step | ring / adaptive "
              "| ideal | weighted allreduces | link verdict (adaptive run) |")
        print("|---|---|---|---|---|---|---|---|---|")
        keys = sorted({(m, s, p) for (m, s, p, _) in steps},
                      key=lambda k: (k[0], SCENARIOS.index(k[1]) if k[1] in SCENARIOS else 99, k[2]))
        for model, scenario, planner in keys:
            ring = steps.get((model, scenario, planner, False))
            ada = steps.get((model, scenario, planner, True))
            if not ring or not ada:
                continue
            print(f"| {model} | {scenario} | {planner} | {ring['step_ms']:.0f} ms | "
                  f"{ada['step_ms']:.0f} ms | {ring['step_ms'] / ada['step_ms']:.2f}x | "
                  f"{ada['ideal_ms']:.0f} ms | {ada['weighted_allreduces']} | "
                  f"{ada['link_rates'] or '-'} |")


if __name__ == "__main__":
    main(sys.argv[1])
