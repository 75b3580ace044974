"""``fp4moe-gate sglang-replay``: sglang-check against every SGLang release x aiter tree, as one table.

Index: :func:`run` (the cells, then the table), :func:`run_cell` (one ``sglang-check --json -``
child per release and aiter tree), :func:`releases` (``pip index versions sglang`` from ``--since``),
:func:`aiter_tree` (two files of an aiter revision, from a local clone), :func:`figures` /
:func:`markdown` (the table), :func:`replace_between_markers` (``--write-doc``), :func:`verdict`.

Each cell's verdict comes only from executing that release's own code in sglang-check's child;
this command adds no judgement of its own beyond counting the cells.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from fp4moe.commands import output
from fp4moe.commands.options import STATUS_BY_EXIT, add_command, add_outputs, bind
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun
from fp4moe.infra.files import read_text_bounded

#: the markers in a markdown file between which ``--write-doc`` puts the table
BEGIN, END = "<!-- sglang-replay:begin -->", "<!-- sglang-replay:end -->"
#: the release before SGLang's DeepSeek-V4 FP4 aiter branch (its cell says so: cannot run)
DEFAULT_SINCE = "0.5.11"
#: seconds per cell (download, unpack, one sglang-check child)
CELL_TIMEOUT_S = 600.0
#: the aiter files a cell needs: shuffle.py runs on the CPU, fused_moe.py gives the spy its signature
AITER_FILES = ("aiter/ops/shuffle.py", "aiter/fused_moe.py")

PAGE = """fp4moe-gate sglang-replay: sglang-check over every SGLang release x aiter tree, as one markdown table.

Replays sglang-check over SGLang releases x aiter trees and prints one markdown table (the one in
docs/evidence/sglang-replay.md): for each release from --since (or each --version) and each --aiter NAME=REV, one
`fp4moe-gate sglang-check --sglang-version V --aiter-src TREE` run in a child, its verdict (PASS,
FAIL with the failing checks per row and their key figures, or the line it could not run with). A
release whose sglang-check could not run (no FP4 aiter branch yet, a missing dependency) is a cell
of the table with its line, not an error of the replay.

Inputs: --aiter-git (a local clone of ROCm/aiter: each REV's shuffle.py and fused_moe.py are taken
with git archive into the wheel cache) and the package index (pip downloads each release's wheel,
~40 MB, into the wheel cache; nothing is installed). --from-results rebuilds the table from a
previous run's --results file and runs nothing (no network, no clone).

Exit 0: every cell passed. Exit 1: at least one cell failed a check (the table names them; e.g.
0.5.13-0.5.16 pad the DeepSeek-V4 intermediate to 256). Exit 2: the replay could not run (no
release listed, a bad revision, a results file unreadable, a --write-doc file without the markers)
or a cell produced no verdict at all (timed out, no result record).
"""


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]|post", v) if x != "")


def releases(since: str) -> list[str]:
    """Every sglang release on the package index from ``since`` up, oldest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True,
                         timeout=300)
    m = re.search(r"Available versions: (.*)", out.stdout)
    if not m:
        raise GateCannotRun(f"pip index versions sglang listed no release: {' '.join(out.stderr.split())[-300:]}")
    found = [v.strip() for v in m.group(1).split(",")]
    return sorted((v for v in found if _version_key(v) >= _version_key(since)), key=_version_key)


def aiter_tree(git_dir: str, rev: str, cache: Path) -> Path:
    """``AITER_FILES`` of ``rev`` unpacked into ``cache/aiter-REV`` (kept for the next run)."""
    dest = cache / f"aiter-{rev}"
    if all((dest / f).is_file() for f in AITER_FILES):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", rev, *AITER_FILES], capture_output=True, timeout=300)
    if archive.returncode != 0:
        raise GateCannotRun(f"--aiter-git {git_dir}: git archive {rev}: {' '.join(archive.stderr.decode(errors='replace').split())[:300]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=300)
    return dest


def run_cell(version: str, aiter_dir: Path | None, timeout_s: float) -> dict:
    """One ``sglang-check --json -`` child: {"version", "rc", "seconds", "result" | "message"}."""
    from fp4moe.infra import runner
    from fp4moe.infra.paths import REPO_ROOT

    args = ["-m", "fp4moe.commands.main", "sglang-check", "--sglang-version", version, "--quiet", "--json", "-"]
    if aiter_dir:
        args += ["--aiter-src", str(aiter_dir)]
    res = runner.run_python(args, timeout_s=timeout_s, cwd=REPO_ROOT, want_record=False)
    cell = {"version": version, "rc": res.rc, "seconds": round(res.seconds, 1)}
    try:
        cell["result"] = json.loads(res.stdout)
    except ValueError:
        cell["message"] = (res.stderr.strip().splitlines() or ["timed out" if res.timed_out else "no output"])[-1][:400]
    return cell


def _figure(c: dict) -> str:
    """The key number of one failed check, short."""
    d, name = c["detail"], c["name"]
    if name == "footprint":
        m = re.search(r"\(([0-9.]+) of budget", d)
        return f"{m.group(1)}x budget" if m else d
    if name == "pad_contract":
        m = re.search(r"padded (\d+) -> (\d+) .*intermediate_pad=(\d+)", d)
        return f"{m.group(1)}->{m.group(2)}, told {m.group(3)}" if m else d
    if name == "processed_bytes":
        m = re.search(r"I_p (\d+) -> SGLang (\d+)", c["compared"])
        return f"padded to {m.group(2)}" if m else d[:60]
    if name == "layer_choices":
        return ", ".join(f"{k} {want} told {got}" for k, want, got in
                         re.findall(r"(\w+): expected (.*?) \(.*?\), SGLang passed ([^;]+)", d)) or d[:60]
    if name == "drive":
        return d.split(" at ")[0].replace("raised ", "")[:70]
    return d


def figures(result: dict) -> str:
    """The failing checks of one cell, by row, with their key figures."""
    return "; ".join(f"{c['row'].replace('dsv4-', '')}: {c['name']} ({_figure(c)})" for c in result["checks"] if not c["ok"])


def _reason(c: dict) -> str:
    """Why a cell's sglang-check could not run: its cannot-run record's reason, or its last line."""
    return (c.get("result") or {}).get("reason") or c.get("message") or ""


def _cell_text(c: dict) -> str:
    if "result" in c:
        r = c["result"]
        if r.get("status") == "pass":
            return f"**PASS** (exit {c['rc']})"
        if r.get("status") == "regression":
            return f"**FAIL** (exit {c['rc']}): {figures(r)}"
    msg = _reason(c).split("cannot run: ", 1)[-1]
    msg = re.sub(r"^sglang [^:]*: ", "", msg).split(" (no `if")[0]
    return f"cannot run (exit {c['rc']}): {msg}"


def markdown(cells: dict, aiters: list[tuple[str, str]]) -> str:
    """The table: one row per release, one column per aiter tree."""
    lines = ["| SGLang | " + " | ".join(f"aiter {name} ({rev[:10]})" for name, rev in aiters) + " |",
             "|---|" + "---|" * len(aiters)]
    for version in sorted({v for v, _ in cells}, key=_version_key):
        lines.append("| " + " | ".join([version] + [_cell_text(cells[(version, name)]) for name, _ in aiters]) + " |")
    return "\n".join(lines)


def verdict(cells: dict) -> int:
    """2 when a cell has no verdict (neither a pass/fail result nor sglang-check's exit 2 with its
    line: a timeout, a crash), else 1 when a cell failed, else 0."""
    def status(c):
        return (c.get("result") or {}).get("status")

    if any(status(c) not in ("pass", "regression") and (c.get("rc") != EXIT_CANNOT_RUN or not _reason(c))
           for c in cells.values()):
        return EXIT_CANNOT_RUN
    return EXIT_REGRESSION if any(status(c) == "regression" for c in cells.values()) else EXIT_OK


def replace_between_markers(doc: Path, table: str) -> None:
    from fp4moe.infra import files

    text = files.read_text_bounded(doc)
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        raise GateCannotRun(f"--write-doc {doc}: no {BEGIN} ... {END} markers")
    pre, rest = text.split(BEGIN, 1)
    _, post = rest.split(END, 1)
    files.atomic_write_text(doc, f"{pre}{BEGIN}\n{table}\n{END}{post}")


def _aiters(values: list[str]) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, rev = v.partition("=")
        if not sep or not name or not rev:
            raise ValueError(f"--aiter {v}: NAME=REV (e.g. current=e4048607a5)")
        out.append((name, rev))
    return out


def _read_results(path: str) -> dict:
    try:
        raw = json.loads(read_text_bounded(path))
        return {tuple(k.split("|", 1)): c for k, c in raw.items()}
    except (OSError, ValueError, AttributeError) as e:
        raise GateCannotRun(f"--results {path}: not a results file of sglang-replay: {' '.join(str(e).split())[:200]}") from e


def _run_cells(a, aiters, cache: Path) -> dict:
    from fp4moe.infra import files

    if not a.aiter_git:
        raise ValueError("--aiter-git: needed to replay (or --from-results to rebuild the table)")
    dirs = {name: aiter_tree(a.aiter_git, rev, cache) for name, rev in aiters}
    cells = {}
    for v in a.version or releases(a.since):
        for name, _ in aiters:
            c = cells[(v, name)] = run_cell(v, dirs[name], a.timeout)
            if not a.quiet:
                status = c.get("result", {}).get("status", "cannot run")
                print(f"[sglang-replay] {v:<14} aiter {name:<10} exit {c['rc']} {status} {c['seconds']} s", file=sys.stderr, flush=True)
    if not cells:
        raise GateCannotRun(f"no SGLang release from {a.since} on the package index")
    files.atomic_write_json(a.results, {f"{v}|{n}": c for (v, n), c in cells.items()}, indent=1)
    return cells


def run(a) -> int:
    from fp4moe.infra.paths import wheel_dir

    aiters = _aiters(a.aiter)
    cells = _read_results(a.results) if a.from_results else _run_cells(a, aiters, wheel_dir())
    missing = sorted({f"{v}|{n}" for v in {v for v, _ in cells} for n, _ in aiters} - {f"{v}|{n}" for v, n in cells})
    if missing:
        raise GateCannotRun(f"--results {a.results}: no cell for {missing[:4]} (the --aiter names of that run?)")
    cells = {k: c for k, c in cells.items() if k[1] in {n for n, _ in aiters}}
    table = markdown(cells, aiters)
    if a.write_doc:
        replace_between_markers(Path(a.write_doc), table)
    print(table)
    code = verdict(cells)
    output.write_json(a, {"status": STATUS_BY_EXIT[code], "aiter": dict(aiters), "table": table,
                          "cells": [{"aiter": n, **c} for (v, n), c in sorted(cells.items(), key=lambda kv: _version_key(kv[0][0]))]})
    sys.stdout.flush()
    return code


def register(sub) -> None:
    from fp4moe.infra.paths import wheel_dir

    p = add_command(sub, "sglang-replay", PAGE)
    p.add_argument("--aiter", action="append", required=True, metavar="NAME=REV",
                   help="an aiter revision to replay against (a column; repeatable), e.g. current=e4048607a5")
    p.add_argument("--aiter-git", help="git dir of a local ROCm/aiter clone holding the --aiter revisions")
    p.add_argument("--since", default=DEFAULT_SINCE, help=f"the oldest release replayed (default {DEFAULT_SINCE})")
    p.add_argument("--version", action="append", help="only this release (repeatable; default: every one from --since)")
    p.add_argument("--timeout", type=float, default=CELL_TIMEOUT_S, help=f"seconds per cell (default {CELL_TIMEOUT_S:.0f})")
    p.add_argument("--results", default=str(wheel_dir() / "sglang-replay.json"),
                   help="every cell's raw sglang-check result (written by a replay, read by --from-results; default: "
                        "in the wheel cache)")
    p.add_argument("--from-results", action="store_true", help="rebuild the table from --results, running nothing")
    p.add_argument("--write-doc", metavar="FILE.md", help="put the table between the sglang-replay markers of this file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line per cell on stderr")
    add_outputs(p, json="the table and every cell's result")
    bind(p, run, inputs=lambda a: [x for x in (a.results if a.from_results else None, a.write_doc) if x])
