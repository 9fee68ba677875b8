#!/usr/bin/env python3
"""Reads SwiftPM's build plan (SCRATCH/debug.yaml) so the fuzz harnesses build with exactly the
flags and objects `swift build` used, without a target of their own in Package.swift.

  swiftargs.py flags SCRATCH MODULE   compiler flags SwiftPM passed for MODULE (search paths,
                                      module maps, defines), one per line, outputs removed
  swiftargs.py objects SCRATCH PRODUCT EXCLUDE...
                                      the object files PRODUCT links, one per line, without
                                      those of the EXCLUDEd modules (rebuilt instrumented)
  swiftargs.py linkflags SCRATCH PRODUCT
                                      the product's link flags (-l..., -L...), one per line
"""
import json
import os
import re
import sys


def commands(scratch):
    """Yields (name, args, inputs) for every command of the plan; the plan is YAML whose
    values are JSON arrays, one per line, so no YAML parser is needed."""
    name, args, inputs = None, None, None
    with open(os.path.join(scratch, "debug.yaml"), encoding="utf-8") as plan:
        for line in plan:
            m = re.match(r'^  "(.+)":\s*$', line)
            if m:
                if name is not None:
                    yield name, args or [], inputs or []
                name, args, inputs = m.group(1), None, None
                continue
            stripped = line.strip()
            if stripped.startswith("args: ["):
                args = json.loads(stripped[len("args: "):])
            elif stripped.startswith("inputs: ["):
                inputs = json.loads(stripped[len("inputs: "):])
    if name is not None:
        yield name, args or [], inputs or []


def find(scratch, pattern):
    for name, args, inputs in commands(scratch):
        if re.fullmatch(pattern, name):
            return args, inputs
    sys.exit(f"swiftargs.py: no command {pattern} in {scratch}/debug.yaml; run `swift build --scratch-path {scratch}` first")


# Flags that name SwiftPM's own outputs or drive its incremental build; each with how many values follow.
DROP = {"-module-name": 1, "-emit-dependencies": 0, "-emit-module": 0, "-emit-module-path": 1,
        "-output-file-map": 1, "-incremental": 0, "-c": 0, "-enable-batch-mode": 0,
        "-serialize-diagnostics": 0, "-index-store-path": 1, "-parseable-output": 0,
        "-emit-objc-header": 0, "-emit-objc-header-path": 1, "-Onone": 0, "-parse-as-library": 0,
        "-g": 0, "-j2": 0, "-enable-testing": 0}


def flags(scratch, module):
    args, _ = find(scratch, r"C\." + re.escape(module) + r"-.*-debug\.module")
    out, i = [], 1  # args[0] is swiftc
    while i < len(args):
        a = args[i]
        if a == "-Xcc" and i + 1 < len(args):  # a pair: keep both, never drop its value alone
            out += args[i:i + 2]
            i += 2
        elif a in DROP:
            i += 1 + DROP[a]
        elif a.startswith("@") or a.startswith("-j"):
            i += 1
        else:
            out.append(a)
            i += 1
    return out


def objects(scratch, product, exclude):
    _, inputs = find(scratch, r"C\." + re.escape(product) + r"-.*-debug\.exe")
    skip = tuple(f"/{m}.build/" for m in exclude)
    return [p for p in inputs if p.endswith(".o") and not any(s in p for s in skip)]


def linkflags(scratch, product):
    args, _ = find(scratch, r"C\." + re.escape(product) + r"-.*-debug\.exe")
    return [a for a in args if a.startswith("-l") or a.startswith("-L/")]


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    kind, scratch = sys.argv[1], sys.argv[2]
    if kind == "flags":
        result = flags(scratch, sys.argv[3])
    elif kind == "objects":
        result = objects(scratch, sys.argv[3], sys.argv[4:])
    elif kind == "linkflags":
        result = linkflags(scratch, sys.argv[3])
    else:
        sys.exit(__doc__)
    print("\n".join(result))
