"""Compare two ``--json`` records of one gate, modulo what differs between runs of the same
behaviour: times (``seconds`` keys, ``[N s]`` and ``N s`` in text), the checkouts' and
temporary folders' paths, and the package version and commit.

    python3 scripts/compare_records.py BEFORE.json AFTER.json [--root OLD_ROOT --root NEW_ROOT]

Prints ``identical modulo times, paths and versions`` and exits 0, or one line per difference
(its JSON path, both values) and exits 1; 2 when a file cannot be read as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

#: keys whose values differ between runs of the same behaviour
VOLATILE_KEYS = {"seconds", "judge_seconds", "child_seconds", "wall_s", "duration_s", "created", "fp4moe_version", "fp4moe_commit"}
TIMES = (re.compile(r"\[\d+(\.\d+)? s\]"), re.compile(r"\b\d+(\.\d+)? s\b"))
TMP = re.compile(r"/tmp/[^\s:,)\]]*")


def normalise(x, roots: list[str]):
    if isinstance(x, dict):
        return {k: normalise(v, roots) for k, v in x.items() if k not in VOLATILE_KEYS}
    if isinstance(x, list):
        return [normalise(v, roots) for v in x]
    if isinstance(x, str):
        for root in roots:
            x = x.replace(root, "<ROOT>")
        for t in TIMES:
            x = t.sub("<T> s", x)
        return TMP.sub("<TMP>", x)
    return x


def differences(a, b, path: str = ""):
    if type(a) is not type(b):
        yield f"{path or '/'}: {type(a).__name__} != {type(b).__name__}"
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield f"{path}/{k}: only in {'AFTER' if k not in a else 'BEFORE'}"
            else:
                yield from differences(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items != {len(b)}"
        for i, (u, v) in enumerate(zip(a, b)):
            yield from differences(u, v, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {str(a)[:160]!r} != {str(b)[:160]!r}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--root", action="append", default=[], help="a checkout path to read as <ROOT> (repeatable)")
    a = p.parse_args(argv)
    try:
        docs = [json.load(open(f)) for f in (a.before, a.after)]
    except (OSError, ValueError) as e:
        print(f"compare_records: cannot read: {e}", file=sys.stderr)
        return 2
    before, after = (normalise(d, a.root) for d in docs)
    diffs = list(differences(before, after))
    print("\n".join(diffs) if diffs else "identical modulo times, paths and versions")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
