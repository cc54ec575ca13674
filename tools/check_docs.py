#!/usr/bin/env python3
"""Checks claims in docs/ that drift as the code changes (a CI step of tools/test.sh).

1. docs/architecture.md's module table: every `#include "<module>/..."` in a module's sources
   names a module listed in that module's "depends on" column (or the module itself).
2. docs/gpu.md's latest "Runs on an NVIDIA H200" entry is not older than the newest change to
   the GPU data path, unless the page says which later changes have not run on a GPU
   ("not yet run on a GPU").
3. docs/architecture.md's "no file in runtime/ over 800 lines" (issue 37's layout): every source
   file under runtime/ stays within RUNTIME_MAX_LINES.

Prints one line per finding and exits 1 if there is any; prints a summary line otherwise.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULES = ("numeric", "collectives", "runtime", "scheduler", "compression", "launcher")
SOURCES = ("*.h", "*.cc", "*.cu")
RUNTIME_MAX_LINES = 800


def module_table():
    """{module: set of modules its 'depends on' cell names}."""
    allowed = {}
    for line in (ROOT / "docs/architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5:
            continue
        match = re.fullmatch(r"`(\w+)/`", cells[1])
        if match and match.group(1) in MODULES:
            words = set(re.findall(r"\w+", cells[3]))
            allowed[match.group(1)] = {m for m in MODULES if m in words}
    return allowed


def include_findings():
    findings = []
    allowed = module_table()
    for module in MODULES:
        if module not in allowed:
            findings.append("docs/architecture.md: no row for %s/ in the module table" % module)
            continue
        for pattern in SOURCES:
            for path in sorted((ROOT / module).rglob(pattern)):
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    match = re.match(r'\s*#\s*include\s+"(\w+)/', line)
                    if not match or match.group(1) not in MODULES:
                        continue
                    used = match.group(1)
                    if used != module and used not in allowed[module]:
                        findings.append(
                            "%s:%d includes %s/ but docs/architecture.md says %s/ depends on %s" %
                            (path.relative_to(ROOT), number, used, module,
                             ", ".join(sorted(allowed[module])) or "no other module"))
    return findings


def last_commit_date(*paths):
    out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%cs", "--"] + list(paths),
                         capture_output=True, text=True, check=False).stdout.strip()
    return out or None


def gpu_findings():
    text = (ROOT / "docs/gpu.md").read_text()
    runs = re.findall(r"\*\*(\d{4}-\d{2}-\d{2})\*\*", text.split("### Runs on an NVIDIA H200", 1)[-1])
    if not runs:
        return ["docs/gpu.md: no dated run under 'Runs on an NVIDIA H200'"]
    changed = last_commit_date("collectives/cuda", "collectives/nccl_executor.cc",
                               "runtime/planes/cuda_plane.cc", "runtime/planes/cuda_compression.cc",
                               "compression/cuda", "numeric/cuda_half.cuh")
    if changed is None:  # not a git checkout (a source archive): nothing to compare
        return []
    if changed > max(runs) and "not yet run on a gpu" not in text.lower():
        return ["docs/gpu.md: the GPU data path changed on %s, after the last H200 run (%s), and "
                "the page does not say what has not yet run on a GPU" % (changed, max(runs))]
    return []


def length_findings():
    findings = []
    for pattern in SOURCES:
        for path in sorted((ROOT / "runtime").rglob(pattern)):
            lines = len(path.read_text(errors="replace").splitlines())
            if lines > RUNTIME_MAX_LINES:
                findings.append("%s: %d lines, over the %d that runtime/'s files keep to (split it "
                                "by job, as runtime/planes/planned_*.cc are)"
                                % (path.relative_to(ROOT), lines, RUNTIME_MAX_LINES))
    return findings


def main():
    findings = include_findings() + gpu_findings() + length_findings()
    for finding in findings:
        print("check_docs: " + finding)
    if findings:
        return 1
    print("check_docs: module dependencies, the GPU run date and runtime/'s file lengths agree "
          "with the docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
