#!/usr/bin/env python3
"""Fails when a C++ file includes from a layer above its own.

The layers (../shared/DESIGN.md, "Layers and the door for other programs"):

    launcher, ctl                  the tools on top
    worker                         engine, model, collectives, trainer
    client, fleet   |   server     siblings: neither includes the other
    proto + wire codec, common     the bottom: includes no layer above

The tools may include the layers below them that they use; ctl also
reads the server's checkpoint files (zeroshard-ctl list), so it may
include server. A file's layer is the first directory of its path; a quoted include
"x/y.h" names layer x. Test code (files under tests/, *_test.cc,
*testing.{h,cc}, *_test_util.*, *_bench.cc, *_fuzzer.cc) may also use the
fleet of real servers (fleet/) from worker/; tests/ and tools/ may include
anything.

Usage: include_layers.py [--root DIR]   (default: the repository root)
Prints every violation as "path:line: layer X includes Y (allowed: ...)"
and exits 1, or prints a one-line summary and exits 0.
"""
import argparse
import os
import re
import sys

ALLOWED = {
    "proto": {"proto", "common"},
    "common": {"common", "proto"},
    "server": {"server", "common", "proto"},
    "client": {"client", "common", "proto"},
    "fleet": {"fleet", "client", "common", "proto"},
    "worker": {"worker", "client", "common", "proto"},
    # ctl is a tool on top: `zeroshard-ctl list` reads a checkpoint
    # directory with the server's own file code (server/checkpoint).
    "ctl": {"ctl", "fleet", "worker", "client", "server", "common", "proto"},
    "launcher": {"launcher", "fleet", "worker", "client", "common", "proto"},
}
TEST_EXTRA = {"worker": {"fleet"}}
EVERYTHING = {"tests", "tools"}
LAYERS = set(ALLOWED) | EVERYTHING
SOURCE = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')


def is_test(path):
    name = os.path.basename(path)
    return (path.startswith("tests/") or name.endswith("_test.cc") or
            "testing." in name or "_test_util." in name or
            name.endswith("_bench.cc") or name.endswith("_fuzzer.cc"))


def violations(root):
    found, files = [], 0
    for layer in sorted(ALLOWED):
        top = os.path.join(root, layer)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "bazel-"))]
            for name in sorted(filenames):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                allowed = set(ALLOWED[layer])
                if is_test(path):
                    allowed |= TEST_EXTRA.get(layer, set())
                files += 1
                with open(os.path.join(root, path), encoding="utf-8",
                          errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) not in LAYERS:
                            continue  # system or third-party header
                        if m.group(1) not in allowed:
                            found.append("%s:%d: layer %s includes %s (allowed: %s)"
                                         % (path, number, layer, m.group(1),
                                            ", ".join(sorted(allowed))))
    return found, files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    found, files = violations(os.path.realpath(args.root))
    for v in found:
        print(v)
    if found:
        print("include_layers: %d upward includes (see ../shared/DESIGN.md)"
              % len(found))
        return 1
    print("include_layers: %d files, no upward include" % files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
