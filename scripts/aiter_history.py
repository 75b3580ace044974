"""Run ``fp4moe-gate aiter-check`` over ROCm/aiter's history: N first-parent commits of main,
evenly spread over a date window, each archived from a git clone of aiter into a scratch folder.

    python scripts/aiter_history.py --aiter-git /path/to/aiter/.git [--since 2026-01-01]
        [--until e4048607a5] [--count 12 | --rev REV ...] [--write-doc docs/evidence/aiter-history.md]
        [-- EXTRA aiter-check OPTIONS]

Prints one markdown row per commit: rev, commit date, exit, wall seconds, the row counts per
result word, and the FAIL rows' checks (or the exit-2 line). Exits 1 when a commit exits 2 (a
tree the gate could not judge), else 0. Needs git and this checkout on PYTHONPATH; no GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: what aiter-check reads of a tree: the package and the csrc files its dispatch may import
PATHS = ("aiter", "csrc/opus_moe/opus_moe_common.py", "csrc/include/aiter_enum.h")


def git(d: str, *args: str, text: bool = True):
    return subprocess.run(["git", "-C", d, *args], capture_output=True, text=text, check=True).stdout


def revisions(d: str, since: str, until: str, count: int) -> list[tuple[str, str]]:
    log = [ln.split("\t") for ln in git(d, "log", "--first-parent", f"--since={since}", "--format=%h\t%cs", until).splitlines()]
    log.reverse()
    if count >= len(log):
        return [tuple(x) for x in log]
    return [tuple(log[round(i * (len(log) - 1) / (count - 1))]) for i in range(count)]


def archive(d: str, rev: str, dest: Path) -> None:
    have = git(d, "ls-tree", "-r", "--name-only", rev, "--", *PATHS[1:]).split()
    data = git(d, "archive", "--format=tar", rev, "--", PATHS[0], *have, text=False)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True)


def judge(d: str, rev: str, extra: list[str], keep: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"aiter-{rev}-") as tmp:
        tree, out = Path(tmp) / "tree", Path(tmp) / "out.json"
        tree.mkdir()
        archive(d, rev, tree)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "fp4moe.commands", "aiter-check", "--aiter-src", str(tree), "--json", str(out),
                            *extra], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        rows = json.loads(out.read_text())["results"] if p.returncode in (0, 1) and out.is_file() else []
        if keep and out.is_file():
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / f"{rev}.json").write_bytes(out.read_bytes())
    counts = collections.Counter(r["result"] for r in rows)
    fails = [r["check"] for r in rows if r["result"] in ("FAIL", "DIFFER")]
    why = (p.stderr.strip().splitlines() or ["?"])[-1] if p.returncode not in (0, 1) else ""
    return {"rc": p.returncode, "wall": wall, "counts": dict(counts), "fails": fails, "why": why}


def row(rev: str, date: str, r: dict) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in sorted(r["counts"].items(), key=lambda kv: -kv[1]))
    fails = "; ".join(r["fails"][:4]) + (f"; +{len(r['fails']) - 4} more" if len(r["fails"]) > 4 else "")
    return f"| {rev} | {date} | {r['rc']} | {r['wall']:.0f} | {counts or '-'} | {(fails or r['why'] or '-').replace('|', '/')} |"


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aiter-git", required=True, help="a git clone (or bare repository) of ROCm/aiter")
    ap.add_argument("--since", default="2026-01-01")
    ap.add_argument("--until", default="main", help="the newest revision (default main)")
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--rev", action="append", default=[], help="these revisions instead (repeatable)")
    ap.add_argument("--write-doc", metavar="MD", help="append the table, with the command and the date, to this file")
    ap.add_argument("--records", metavar="DIR", help="keep each commit's --json record here (REV.json)")
    a = ap.parse_args(argv)
    revs = [(r, git(a.aiter_git, "log", "-1", "--format=%cs", r).strip()) for r in a.rev] or \
        revisions(a.aiter_git, a.since, a.until, a.count)
    lines = ["| rev | date | exit | wall s | rows | FAIL rows (or the exit-2 line) |", "| --- | --- | --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    worst = 0
    for rev, date in revs:
        r = judge(a.aiter_git, rev, extra, a.records)
        worst = max(worst, r["rc"])
        lines.append(row(rev, date, r))
        print(lines[-1], flush=True)
    if a.write_doc:
        head = (f"\n### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(revs)} commits, "
                f"`aiter-check {' '.join(extra)}`, load {os.getloadavg()[0]:.1f}\n\n")
        with open(a.write_doc, "a", encoding="utf-8") as f:
            f.write(head + "\n".join(lines) + "\n")
    return 1 if worst >= 2 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
