#!/usr/bin/env python3
"""Holds ktune's layering and its size limits (DESIGN.md, "Layout and
dependency direction"; STYLE.md).

  scripts/check_layers.py [--root DIR] [--pretend 'FILE:#include "X"']...

Every quoted #include of a source file under tuner/, strategies/ and
server/ must point at a part its own part may use (the matrix below):
downward, or within its own part. gRPC stays out of tuner/ and
strategies/. No hand-written source file is over 800 lines. Exits 1,
listing each violation as FILE:LINE, when anything is out of place.

--pretend adds an include line to a file, as if it were there: the way to
show that a wrong include fails the check without writing one.
"""
import argparse
import os
import re
import subprocess
import sys

# What each part may include, besides itself. Parts are folders; a file
# belongs to the deepest part that contains it. The generated protobuf
# messages ("ktune/v1/*.pb.h") may be used from every part but strategies;
# the gRPC service stubs only from server/.
ALLOWED = {
    "tuner/base": [],
    "tuner/expr": ["tuner/base"],
    "tuner/space": ["tuner/base", "tuner/expr"],
    "tuner/ipc": ["tuner/base"],
    "tuner/compile": ["tuner/base", "tuner/ipc"],
    "tuner/cuda": ["tuner/base"],
    "tuner/device": ["tuner/base", "tuner/expr", "tuner/space", "tuner/ipc", "tuner/compile",
                     "tuner/cuda"],
    "tuner/measure": ["tuner/base", "tuner/space", "tuner/ipc", "tuner/compile", "tuner/cuda"],
    "tuner/store": ["tuner/base", "tuner/expr", "tuner/space"],
    "tuner/session": ["tuner/base", "tuner/expr", "tuner/space", "tuner/device", "tuner/store"],
    "strategies": ["tuner/base", "tuner/space"],
    "server/common": ["tuner", "strategies"],
    "server/runner": ["tuner", "strategies", "server/common"],
    "server/web": ["tuner/base"],
    "server/worker": ["tuner/base", "tuner/ipc", "tuner/compile", "tuner/measure"],
    "server/daemon": ["tuner", "strategies", "server/common", "server/runner", "server/web",
                      "server/worker"],
    "server/cli": ["tuner", "strategies", "server/common", "server/runner", "server/web",
                   "server/worker"],
    "server/client": ["tuner/base", "tuner/expr", "tuner/space", "tuner/store", "server/common"],
}
CHECKED_ROOTS = ("tuner/", "strategies/", "server/")
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".py", ".sh")
MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def part_of(path):
    """The part a repository path belongs to, or None (outside the matrix)."""
    best = None
    for part in ALLOWED:
        if path == part or path.startswith(part + "/"):
            if best is None or len(part) > len(best):
                best = part
    return best


def target_of(include):
    """The repository path an include names, and whether it is generated."""
    if include.startswith("ktune/v1/"):
        return include, True
    if include.startswith("ktune/"):  # the client library's public header
        return "server/client/include/" + include, False
    return include, False


def allows(part, target_path):
    target = part_of(target_path)
    if target is None or target == part:
        return True
    for allowed in ALLOWED[part]:
        if target == allowed or target.startswith(allowed + "/"):
            return True
    return False


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard"], check=True, capture_output=True, text=True)
    return sorted(set(p for p in out.stdout.splitlines() if p))


def check_includes(path, lines, problems):
    part = part_of(path)
    if part is None:
        return
    for number, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        quote, include = m.groups()
        engine = part.startswith("tuner/") or part == "strategies"
        if engine and ("grpc" in include.split("/")[0] or include.endswith(".grpc.pb.h")):
            problems.append(f"{path}:{number}: {include}: gRPC stays out of the engine "
                            f"({part} may not use it)")
            continue
        if quote != '"':
            continue
        target, generated = target_of(include)
        if generated:
            if part == "strategies":
                problems.append(f"{path}:{number}: {include}: strategies see configurations "
                                f"only, not the API's messages")
            continue
        if not allows(part, target):
            problems.append(f"{path}:{number}: {include}: {part} may not include "
                            f"{part_of(target)} (it may use: "
                            f"{', '.join(ALLOWED[part]) or 'nothing but itself'})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--pretend", action="append", default=[],
                        help='FILE:LINE, e.g. \'tuner/store/store.h:#include "tuner/device/device.h"\'')
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    extra = {}
    for p in args.pretend:
        path, _, line = p.partition(":")
        extra.setdefault(path, []).append(line)

    problems = []
    files = tracked_files(root)
    for path in files + [p for p in extra if p not in files]:
        if not path.endswith(SOURCE_SUFFIXES) or path.startswith("kernels/recorded/"):
            continue
        full = os.path.join(root, path)
        if not os.path.isfile(full) and path not in extra:
            continue
        lines = []
        if os.path.isfile(full):
            with open(full, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        lines += extra.get(path, [])
        if len(lines) > MAX_LINES:
            problems.append(f"{path}: {len(lines)} lines, over the limit of {MAX_LINES}: split it "
                            f"by concern")
        if path.startswith(CHECKED_ROOTS):
            check_includes(path, lines, problems)

    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(files)} files, layering and sizes hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
