#!/usr/bin/env python3
"""Writes compile_commands.json for overlap's own C++ sources from `bazel aquery` output.

    bazel aquery 'mnemonic("CppCompile", //...)' --output=jsonproto | \
        tools/compile_commands.py EXECROOT > compile_commands.json

Only files under overlap's directories are kept (not external/ or generated ones), and the GCC
options clang does not know are dropped, so clang-tidy (tools/clang_tidy.sh) parses each file with
the include paths and defines Bazel compiled it with.
"""
import json
import sys

OWN_DIRS = ("bench/", "collectives/", "compression/", "examples/", "launcher/", "runtime/",
            "scheduler/", "tests/")
GCC_ONLY = {"-fno-canonical-system-headers", "-Wunused-but-set-parameter",
            "-Wno-free-nonheap-object", "-Wno-error=maybe-uninitialized",
            "-Wno-error=use-after-free", "-Werror"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    execroot = sys.argv[1]
    actions = json.load(sys.stdin).get("actions", [])
    commands, seen = [], set()
    for action in actions:
        args = action["arguments"]
        source = args[args.index("-c") + 1] if "-c" in args else None
        if source is None or not source.startswith(OWN_DIRS) or source in seen:
            continue
        seen.add(source)
        keep = [a for a in args if a not in GCC_ONLY and not a.startswith("-D__DATE__")
                and not a.startswith("-D__TIME")]
        keep[0] = "clang++"
        commands.append({"directory": execroot, "file": source, "arguments": keep})
    json.dump(sorted(commands, key=lambda c: c["file"]), sys.stdout, indent=1)


if __name__ == "__main__":
    main()
