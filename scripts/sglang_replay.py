#!/usr/bin/env python3
"""Release replay: ``fp4moe-gate sglang-check`` against every SGLang release x aiter tree.

Not part of CI (it downloads ~40 MB per release). Regenerates the table in docs/sglang.md:

    python3 scripts/sglang_replay.py --aiter-git <a clone of ROCm/aiter> \\
        --aiter current=e4048607a5 --aiter pre-4130=a360328e73 --write-doc docs/sglang.md

Releases: every ``sglang`` version on the package index from ``--since`` (default 0.5.11, the
last one before the DeepSeek-V4 FP4 aiter branch) up, as ``pip index versions`` lists them.
aiter trees: ``git archive REV aiter/ops/shuffle.py aiter/fused_moe.py`` of a local aiter clone, unpacked into
``aiter-REV/`` of the wheel cache (``fp4moe.infra.paths.wheel_dir()``, outside the checkout) and passed as ``--aiter-src``. Each cell is one child
``sglang-check --json -`` run; its verdict comes only from executing that release's code.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fp4moe.infra import (
    childproc,  # noqa: E402
    files,
)
from fp4moe.targets.sglang.source import WHEEL_DIR  # noqa: E402

BEGIN, END = "<!-- sglang-replay:begin -->", "<!-- sglang-replay:end -->"


def versions(since: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", out.stdout)
    if not m:
        raise SystemExit(f"pip index versions sglang failed: {out.stderr.strip()[-300:]}")

    def key(v):
        return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]|post", v) if x != "")

    vs = [v.strip() for v in m.group(1).split(",")]
    return sorted((v for v in vs if key(v) >= key(since)), key=key)


def aiter_tree(git_dir: str, rev: str) -> Path:
    dest = WHEEL_DIR / f"aiter-{rev}"
    if not (dest / "aiter" / "ops" / "shuffle.py").is_file() or not (dest / "aiter" / "fused_moe.py").is_file():
        dest.mkdir(parents=True, exist_ok=True)
        # shuffle.py runs on the CPU; fused_moe.py only gives the spy fused_moe's signature
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", rev, "aiter/ops/shuffle.py", "aiter/fused_moe.py"],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def run_cell(version: str, aiter_dir: Path | None, timeout_s: float) -> dict:
    args = ["-m", "fp4moe.commands.main", "sglang-check", "--sglang-version", version, "--json", "-"]
    if aiter_dir:
        args += ["--aiter-src", str(aiter_dir)]
    res = childproc.run_python(args, timeout_s=timeout_s, cwd=REPO, want_record=False)
    cell = {"version": version, "rc": res.rc, "seconds": round(res.seconds, 1)}
    try:
        cell["result"] = json.loads(res.stdout)
    except ValueError:
        cell["message"] = (res.stderr.strip().splitlines() or ["timed out" if res.timed_out else "?"])[-1][:400]
    return cell


def figures(result: dict) -> str:
    """Short per-cell figures: failing checks by row with their key numbers."""
    parts = []
    for c in result["checks"]:
        if c["ok"]:
            continue
        d = c["detail"]
        if c["name"] == "footprint":
            m = re.search(r"\(([0-9.]+) of budget", d)
            d = f"{m.group(1)}x budget" if m else d
        elif c["name"] == "pad_contract":
            m = re.search(r"padded (\d+) -> (\d+) .*intermediate_pad=(\d+)", d)
            d = f"{m.group(1)}->{m.group(2)}, told {m.group(3)}" if m else d
        elif c["name"] == "processed_bytes":
            m = re.search(r"I_p (\d+) -> SGLang (\d+)", c["compared"])
            d = f"padded to {m.group(2)}" if m else d[:60]
        elif c["name"] == "layer_choices":
            d = ", ".join(f"{k} {want} told {got}" for k, want, got in
                          re.findall(r"(\w+): expected (.*?) \(.*?\), SGLang passed ([^;]+)", d)) or d[:60]
        elif c["name"] == "drive":
            d = d.split(" at ")[0].replace("raised ", "")[:70]
        parts.append(f"{c['row'].replace('dsv4-', '')}: {c['name']} ({d})")
    return "; ".join(parts)


def markdown(cells: dict, aiters: list[tuple[str, str]]) -> str:
    head = "| SGLang | " + " | ".join(f"aiter {name} ({rev[:10]})" for name, rev in aiters) + " |"
    lines = [head, "|---|" + "---|" * len(aiters)]
    for version in sorted({v for v, _ in cells}, key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.]|post", v) if x]):
        row = [version]
        for name, _ in aiters:
            c = cells[(version, name)]
            if "result" in c:
                r = c["result"]
                verdict = "PASS" if r["status"] == "pass" else "FAIL"
                row.append(f"**{verdict}** (exit {c['rc']})" + (f": {figures(r)}" if verdict == "FAIL" else ""))
            else:
                msg = c.get("message", "").split("cannot run: ", 1)[-1]
                msg = re.sub(r"^sglang [^:]*: ", "", msg).split(" (no `if")[0]
                row.append(f"cannot run (exit {c['rc']}): {msg}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aiter-git", required=True, help="git dir of an aiter clone (ROCm/aiter)")
    p.add_argument("--aiter", action="append", required=True, help="NAME=REV, repeatable")
    p.add_argument("--since", default="0.5.11")
    p.add_argument("--version", action="append", help="only these releases")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--results", default=str(WHEEL_DIR / "sglang-replay.json"), help="raw results (JSON)")
    p.add_argument("--write-doc", help="replace the table between the replay markers in this markdown file")
    p.add_argument("--from-results", action="store_true", help="rebuild the table from --results, running nothing")
    a = p.parse_args(argv)
    aiters = [tuple(x.split("=", 1)) for x in a.aiter]
    cells = {}
    if a.from_results:
        raw = json.loads(Path(a.results).read_text())
        cells = {tuple(k.split("|", 1)): c for k, c in raw.items()}
        vs = []
    else:
        dirs = {name: aiter_tree(a.aiter_git, rev) for name, rev in aiters}
        vs = a.version or versions(a.since)
    for v in vs:
        for name, _ in aiters:
            c = run_cell(v, dirs[name], a.timeout)
            cells[(v, name)] = c
            verdict = c.get("result", {}).get("verdict", "cannot run")
            print(f"{v:<14} aiter {name:<10} exit {c['rc']} {verdict} {c['seconds']} s", file=sys.stderr, flush=True)
    if not a.from_results:
        files.atomic_write_json(a.results, {f"{v}|{n}": c for (v, n), c in cells.items()}, indent=1)
    table = markdown(cells, aiters)
    print(table)
    if a.write_doc:
        doc = Path(a.write_doc)
        text = doc.read_text()
        if BEGIN not in text or END not in text:
            raise SystemExit(f"{doc}: no {BEGIN} ... {END} markers")
        pre, rest = text.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        files.atomic_write_text(doc, f"{pre}{BEGIN}\n{table}\n{END}{post}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
