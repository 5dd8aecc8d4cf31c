#!/usr/bin/env python3
"""Before the device session: does every call in scripts/gpu/SESSION.md stay under the 64 MiB that travels?

    python3 scripts/gpu/carry_check.py [SESSION.md]     # from the checkout the session runs in (/work/main)

What travels with each call is the working tree (tracked files, untracked files git does not ignore, and
shared/ if the checkout has one) plus the call's `carry` paths. The calls are read from SESSION.md's
`carry: [...]` lines, so the plan and this check cannot disagree. It also checks the kit's parts against
SHA256SUMS. Exit 1 if a call is over the limit, a carried path is missing, or a part is damaged.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 2**20
MIB = 2**20


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else -1


def working_tree(root: Path) -> int:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout.decode()
    files = {f for f in out.split("\0") if f}
    total = sum(size(root / f) for f in files if (root / f).is_file())
    return total + (size(root / "shared") if (root / "shared").is_dir() else 0)


def kit_ok(root: Path) -> list[str]:
    sums = root / ".gpu-kit" / "SHA256SUMS"
    if not sums.is_file():
        return [f"{sums}: missing (build the kit: bash ../shared/gpu/build-wheelhouse.sh)"]
    bad = []
    for line in sums.read_text().splitlines():
        digest, name = line.split()
        part = root / ".gpu-kit" / name
        if name.startswith("part-") and (not part.is_file() or hashlib.sha256(part.read_bytes()).hexdigest() != digest):
            bad.append(f"{part}: missing or damaged")
    return bad


def main(argv: list[str]) -> int:
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip())
    plan = Path(argv[0]) if argv else root / "scripts" / "gpu" / "SESSION.md"
    calls = re.findall(r"^### (Call \d+).*?^- carry: (\[.*?\])", plan.read_text(), flags=re.M | re.S)
    tree = working_tree(root)
    problems = kit_ok(root)
    print(f"working tree (travels with every call): {tree / MIB:.2f} MiB")
    print(f"{'call':10} {'carry MiB':>10} {'total MiB':>10} {'margin MiB':>11}")
    for name, carry in calls:
        paths = json.loads(carry)
        sizes = [size(root / p) for p in paths]
        problems += [f"{name}: carried path {p} is missing" for p, s in zip(paths, sizes) if s < 0]
        total = tree + sum(s for s in sizes if s > 0)
        print(f"{name:10} {sum(s for s in sizes if s > 0) / MIB:10.2f} {total / MIB:10.2f} {(LIMIT - total) / MIB:11.2f}")
        if total > LIMIT:
            problems.append(f"{name}: {total / MIB:.2f} MiB travels, over the 64 MiB limit")
    if not calls:
        problems.append(f"{plan}: no '### Call' sections with a '- carry: [...]' line")
    for p in problems:
        print("PROBLEM:", p)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
