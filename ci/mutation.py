#!/usr/bin/env python3
"""Detection power of the default suite, measured by a mutation tester (mutmut 3), per file.

Index:
- ``UNITS``: what is measured: every file of ``mx/``, ``stats/``, the CPU-reachable files of
  ``reference/``, and the verdict functions of every gate and the exit-code mapping of
  ``commands/`` (``VERDICT_FUNCTIONS``: the functions that turn measurements into pass /
  regression / cannot-run).
- ``run``: mutmut on the chosen units (its mutant-name patterns), then the counts per file
  read back from ``mutants/**.meta``; ``--record`` writes them to ``ci/mutation-scores.json``
  (atomically), ``--ratchet`` fails when a file's score falls below the recorded one.
- ``--stale``: only the units whose recorded score no longer describes them (CI's ratchet
  step): the sha256 of its measured source (the file; a verdict unit: its measured functions,
  ``source_sha256``) differs from the one its score was measured on, the measured functions
  differ, or it has no record yet (held to ``FLOOR``). A fresh record costs nothing;
  ``--stale --record`` re-measures and re-records exactly those (the refresh command).
- ``--changed-since REF``: only the units whose file differs from REF (a branch's own view).
- Survivors are triaged in ``ci/mutation-triage.toml`` (``equivalent``: why; ``accepted``: why
  no test can tell); an equivalent mutant leaves the denominator, an accepted one does not.

Usage (ci/mutation.md): ``python3 ci/mutation.py [SCOPE|FILE ...] [--record] [--ratchet]
[--stale | --changed-since REF] [--budget S] [--max-children N]``; SCOPE is ``mx``, ``stats``,
``reference``, ``verdict`` or ``all`` (the default).

Exit: 0 measured and nothing fell (or nothing to do, said), 1 a file's score fell below its
recorded value, 2 could not judge (mutmut failed or ran out of its budget, a result missing, a
bad option, an input file -- a ``.meta``, the triage file, a score file -- that is not what it
should be: not a regular file, too large, not JSON/TOML, too deeply nested, a key missing or of
the wrong type), with one line naming it. Never a traceback: an exit 1 means a score fell.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from fp4moe.infra.files import atomic_write_json, quoted, read_regular_bytes  # noqa: E402

SCORES = REPO / "ci" / "mutation-scores.json"
TRIAGE = REPO / "ci" / "mutation-triage.toml"
MUTANTS = REPO / "mutants"
RUN_LOG = MUTANTS / "mutation-run.log"
#: the tests that failed where mutmut needs a green suite (its coverage pass, its clean run),
#: one per line, written by ci/mutation_pytest.py: mutmut itself drops that output
FAILURES_LOG = MUTANTS / "mutation-failures.log"
FLOOR = 0.90  # the target per file (recorded in the score file; the ratchet holds each file's own record)
SCHEMA_VERSION = 1
EXIT_OK, EXIT_FELL, EXIT_CANNOT_JUDGE = 0, 1, 2
#: the most bytes read of each input (a .meta of mutmut's for the largest measured file is
#: ~0.3 MB; a file padded to GiBs is refused by its size, never read)
META_LIMIT = 64 << 20
SCORES_LIMIT = 16 << 20
TRIAGE_LIMIT = 4 << 20
LOG_TAIL = 64 << 10  # the end of mutmut's log and the failures file, quoted in the exit-2 line
# mutmut's exit codes per mutant (mutmut.stats.status_by_exit_code), folded into our columns
KILLED_CODES = {1, 3}
SURVIVED_CODES = {0}
TIMEOUT_CODES = {36, -24, 24, 152, 255}
NO_TESTS_CODES = {5, 33}
SKIPPED_CODES = {34, 37}

# files of reference/ a plain machine runs: the GPU-bound grouped GEMM kernels are left out
REFERENCE_CPU = (
    "backend.py", "expert_weights.py", "footprint.py", "golden.py", "inputs.py", "kernel_budget.py",
    "layout.py", "moe.py", "pads.py", "quant_info.py", "reference_backend.py", "routing.py", "weight_path.py",
)
#: the functions that turn measurements into pass / regression / cannot-run (mutmut's mangled
#: names: ``x_f`` for a function, ``xǁClassǁmethod`` for a method)
#: mutmut 3 leaves properties alone: ``BudgetVerdict.exit_code``, ``ZooResult.exit_code`` and
#: the like delegate to ``exit_code_of``, measured here.
VERDICT_FUNCTIONS = {
    "fp4moe/infra/errors.py": ("x_exit_code_of",),
    "fp4moe/commands/options.py": ("x_status_of",),
    "fp4moe/commands/main.py": ("x__message", "x__main", "x__one_line"),
    "fp4moe/gates/footprint.py": ("x_check_budget", "x_require_judged"),
    "fp4moe/gates/aiter_check.py": ("x_verdict", "x_unjudged_line"),
    "fp4moe/targets/aiter/judge/registry.py": ("x_apply_registry", "x__registry_verdict"),
    "fp4moe/targets/aiter/judge/upgrade.py": ("x_compare_trees", "x__routing", "x__output"),
    "fp4moe/gates/accuracy/verdict.py": ("x_decide", "x__one_sided_tail", "x__check_fraction"),
    "fp4moe/gates/perf/workloads.py": ("x_pad_speedup_verdict", "x_equal_time_verdict"),
    "fp4moe/gates/perf/baseline.py": ("x_comparability_problems",),
    "fp4moe/gates/perf/ab.py": ("x_comparability", "x_check_loaded"),
    "fp4moe/gates/serve_bench.py": ("x_judge", "x_client_bound"),
    "fp4moe/gates/sglang_check.py": ("x_judge", "x__cannot_judge", "x_failure"),
    "fp4moe/targets/sglang/checks.py": ("x_attr_ok", "x_pad_bytes_harmful", "x_empty_batch_problems"),
    "fp4moe/gates/zoo/runner.py": ("x_judge",),
}


@dataclass(frozen=True)
class Unit:
    """One measured file: all its functions (``functions`` empty) or the named ones."""
    path: str
    scope: str
    functions: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    def patterns(self) -> list[str]:
        if not self.functions:
            return [f"{self.module}.*"]
        return [f"{self.module}.{f}__mutmut_*" for f in self.functions]

    def owns(self, mutant: str) -> bool:
        return any(fnmatch.fnmatchcase(mutant, p) for p in self.patterns())


def _files(folder: str, names=None) -> list[str]:
    """The modules of ``folder`` that define a function (a module of constants has no mutant)."""
    found = sorted(p.name for p in (REPO / folder).glob("*.py") if "def " in p.read_text())
    return [f"{folder}/{n}" for n in found if names is None or n in names]


def units() -> dict[str, list[Unit]]:
    return {
        "mx": [Unit(p, "mx") for p in _files("fp4moe/mx")],
        "stats": [Unit(p, "stats") for p in _files("fp4moe/stats")],
        "reference": [Unit(p, "reference") for p in _files("fp4moe/reference", REFERENCE_CPU)],
        "verdict": [Unit(p, "verdict", fs) for p, fs in VERDICT_FUNCTIONS.items()],
    }


@dataclass
class FileScore:
    """One file's counts; ``score`` = (killed + timeout) / (mutants - equivalent)."""
    scope: str
    functions: list[str]
    mutants: int
    killed: int
    survived: int
    timeout: int
    no_tests: int
    skipped: int
    other: int
    equivalent: int
    accepted: int
    score: float
    wall_s: float
    measured: str = ""  # UTC time of the run (``--merge`` keeps the newest entry per file)
    tests: str = "the default suite"  # or the --tests paths it was judged with (a lower bound)
    sha256: str = ""  # of the source the score was measured on (``source_sha256``; ``--stale`` compares it)
    mutant_s: float = 0.0  # mutmut's own seconds for this file's mutants, summed (one worker)
    command: str = ""  # the run that measured it


class CannotJudge(Exception):
    """The run could not produce a score (exit 2, one line)."""


def _text(path: Path, limit: int) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; anything else (a FIFO,
    /dev/zero, a sparse giant, bad UTF-8) is CannotJudge naming it."""
    try:
        return read_regular_bytes(path, limit=limit).decode("utf-8")
    except OSError as e:
        raise CannotJudge(f"{path}: cannot read: {str(e).removeprefix(f'{path}: ')}") from None
    except UnicodeDecodeError as e:
        raise CannotJudge(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _json(path: Path, limit: int):
    try:
        return json.loads(_text(path, limit))
    except ValueError as e:
        raise CannotJudge(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise CannotJudge(f"{path}: not JSON this tool reads (nested too deeply)") from None


def _tail(path: Path) -> str:
    """The whole lines of the last ``LOG_TAIL`` bytes of a log this run's children wrote (never
    the whole of it); "" when it is absent or unreadable."""
    try:
        with open(path, "rb") as f:
            start = max(0, os.fstat(f.fileno()).st_size - LOG_TAIL)
            f.seek(start)
            data = f.read(LOG_TAIL)
    except OSError:
        return ""
    return (data.partition(b"\n")[2] if start else data).decode("utf-8", errors="replace")


def load_triage() -> dict[str, dict]:
    if not TRIAGE.exists():
        return {}
    try:
        data = tomllib.loads(_text(TRIAGE, TRIAGE_LIMIT))
    except tomllib.TOMLDecodeError as e:
        raise CannotJudge(f"{TRIAGE}: not TOML ({e})") from None
    except RecursionError:
        raise CannotJudge(f"{TRIAGE}: not TOML this tool reads (nested too deeply)") from None
    rows = data.get("mutant", {})
    if not isinstance(rows, dict) or not all(isinstance(r, dict) for r in rows.values()):
        raise CannotJudge(f"{TRIAGE}: [mutant.NAME] tables expected")
    for name, row in rows.items():
        if row.get("verdict") not in ("equivalent", "accepted") or not str(row.get("why", "")).strip():
            raise CannotJudge(f"{TRIAGE.name}: mutant {name!r} needs verdict = equivalent|accepted and a why")
    return rows


def _meta(unit: Unit) -> dict | None:
    """mutmut's ``.meta`` of ``unit`` (None: absent), its shape checked."""
    meta = MUTANTS / (unit.path + ".meta")
    if not meta.exists() and not meta.is_symlink():
        return None
    data = _json(meta, META_LIMIT)
    codes = data.get("exit_code_by_key") if isinstance(data, dict) else None
    if not isinstance(codes, dict):
        raise CannotJudge(f"{meta}: no exit_code_by_key object (not a mutmut .meta)")
    bad = next(((k, v) for k, v in codes.items() if not (v is None or type(v) is int)), None)
    if bad:
        raise CannotJudge(f"{meta}: exit_code_by_key: {quoted('mutant', bad[0], 100)} has exit code {bad[1]!r:.40}, "
                          "not an integer or null")
    for key in ("durations_by_key", "estimated_durations_by_key"):
        d = data.get(key, {})
        if not isinstance(d, dict) or not all(v is None or type(v) in (int, float) for v in d.values()):
            raise CannotJudge(f"{meta}: {key}: an object of numbers expected")
    return data


def results_of(unit: Unit) -> dict[str, int | None]:
    data = _meta(unit)
    if data is None:
        raise CannotJudge(f"{(MUTANTS / (unit.path + '.meta')).relative_to(REPO)}: no mutmut result for {unit.path}")
    return {k: v for k, v in data["exit_code_by_key"].items() if unit.owns(k)}


def mutant_seconds(unit: Unit) -> float:
    """The seconds mutmut spent on this file's mutants (its ``durations_by_key``), summed. Its
    fork-server mode (ours) records 0.0 for every mutant; there the sum is mutmut's own estimate
    (``estimated_durations_by_key``: the recorded time of each mutant's covering tests), the
    figure the workflow's shards are balanced by."""
    data = _meta(unit) or {}
    for key in ("durations_by_key", "estimated_durations_by_key"):
        total = sum(float(v) for k, v in data.get(key, {}).items() if unit.owns(k) and v is not None)
        if total > 0:
            return round(total, 1)
    return 0.0


def _results_or_empty(unit: Unit) -> dict[str, int | None]:
    try:
        return results_of(unit)
    except CannotJudge:
        return {}


def score_of(unit: Unit, codes: dict[str, int | None], triage: dict[str, dict], wall_s: float) -> FileScore:
    missing = sorted(k for k, v in codes.items() if v is None)
    if missing:
        raise CannotJudge(f"{unit.path}: {len(missing)} mutant(s) not judged (first {missing[0]})")
    survivors = [k for k, v in codes.items() if v in SURVIVED_CODES | NO_TESTS_CODES]
    equivalent = sum(1 for k in survivors if triage.get(k, {}).get("verdict") == "equivalent")
    accepted = sum(1 for k in survivors if triage.get(k, {}).get("verdict") == "accepted")
    n = {name: sum(1 for v in codes.values() if v in group) for name, group in
         (("killed", KILLED_CODES), ("survived", SURVIVED_CODES), ("timeout", TIMEOUT_CODES),
          ("no_tests", NO_TESTS_CODES), ("skipped", SKIPPED_CODES))}
    other = len(codes) - sum(n.values())
    judged = len(codes) - equivalent - n["skipped"]
    score = 1.0 if judged == 0 else (n["killed"] + n["timeout"]) / judged
    return FileScore(unit.scope, list(unit.functions), len(codes), n["killed"], n["survived"], n["timeout"],
                     n["no_tests"], n["skipped"], other, equivalent, accepted, round(score, 4), round(wall_s, 1))


def untriaged(unit: Unit, codes: dict[str, int | None], triage: dict[str, dict]) -> list[str]:
    return sorted(k for k, v in codes.items() if v in SURVIVED_CODES | NO_TESTS_CODES and k not in triage)


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise CannotJudge(f"git {' '.join(args)} failed: {' '.join(r.stderr.split())[:200]}")
    return r.stdout


def changed_files(ref: str) -> set[str]:
    """The files this change touches: the working tree against the merge base with ``ref``
    (so commits that landed on ``ref`` after the branch left it are not counted)."""
    base = _git("merge-base", ref, "HEAD").strip()
    return set(_git("diff", "--name-only", base, "--").split())


def select(targets: list[str], ref: str | None) -> list[Unit]:
    table = units()
    chosen: list[Unit] = []
    for t in targets or ["all"]:
        if t == "all":
            chosen += [u for us in table.values() for u in us]
        elif t in table:
            chosen += table[t]
        else:
            hit = [u for us in table.values() for u in us if u.path == t]
            if not hit:
                raise CannotJudge(f"{t}: not a scope ({', '.join(['all', *table])}) nor a measured file")
            chosen += hit
    chosen = list(dict.fromkeys(chosen))
    if ref is not None:
        touched = changed_files(ref)
        chosen = [u for u in chosen if u.path in touched]
    return chosen


def file_sha256(path: str) -> str:
    return hashlib.sha256((REPO / path).read_bytes()).hexdigest()


def _mangled_defs(tree: ast.Module) -> dict[str, ast.AST]:
    """mutmut's names for the module's functions and methods (``x_f``, ``x\u01c1Class\u01c1m``)
    -> their nodes."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"x_{node.name}"] = node
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"x\u01c1{node.name}\u01c1{m.name}"] = m
    return out


def source_sha256(unit: Unit) -> str:
    """The sha256 a unit's record is measured on: the file's content for a whole-file unit; for
    a verdict unit, the source of its measured functions only (decorators included), so an edit
    elsewhere in the file leaves the record fresh (mutmut mutates a function's body alone: the
    measured mutants are the same). A measured function the file no longer defines: "" (stale)."""
    if not unit.functions:
        return file_sha256(unit.path)
    text = (REPO / unit.path).read_text()
    defs = _mangled_defs(ast.parse(text))
    h = hashlib.sha256()
    for f in unit.functions:
        if f not in defs:
            return ""
        node = defs[f]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        h.update(f"{f}\n".encode() + "\n".join(text.splitlines()[first - 1:node.end_lineno]).encode() + b"\n")
    return h.hexdigest()


def staleness(unit: Unit, entry: dict | None) -> str | None:
    """Why ``unit``'s recorded score no longer describes it (None: the record is fresh). A score
    is a fact about one content of the file and one set of measured functions; either moving
    makes it stale. Tests and the triage file are not hashed: the weekly full run covers them.
    A record judged with a ``--tests`` list is a lower bound of the default suite's score, so it
    stays a valid bar while its content holds."""
    if entry is None:
        return "no recorded score"
    if list(entry.get("functions", [])) != list(unit.functions):
        return "its measured functions changed"
    if not entry.get("sha256"):
        return "no recorded sha256"
    if entry["sha256"] not in (file_sha256(unit.path), source_sha256(unit)):  # a file-wide record of a verdict unit holds too
        return "its content differs from the measured one" if not unit.functions else "its measured functions' source differs"
    return None  # a score judged with a --tests list is a lower bound: still a bar the suite must meet


def records_tests(chosen: list[Unit], book: dict) -> list[str] | None:
    """The test paths a ratchet re-measure of ``chosen`` runs with: the union of the ``--tests``
    lists their records were judged with, so the new score is measured with at least the
    record's tests (more tests kill no fewer mutants: a score below the record is a real fall),
    at a fraction of the default suite's cost. None (the default suite) when any of them has no
    record or a record of the default suite."""
    default = FileScore.__dataclass_fields__["tests"].default
    lists = [(book["files"].get(u.path) or {}).get("tests", default) for u in chosen]
    if not lists or any(t == default for t in lists):
        return None
    return sorted({p for t in lists for p in t.split(",") if p})


def stale_units(chosen: list[Unit], book: dict) -> list[tuple[Unit, str]]:
    return [(u, why) for u in chosen if (why := staleness(u, book["files"].get(u.path)))]


def refresh_unmutated_copies() -> int:
    """mutmut copies the package into mutants/ once and regenerates only the files it mutates;
    a changed module it does not mutate would stay stale there. Re-copy those that differ."""
    try:
        only = tomllib.loads(_text(REPO / "pyproject.toml", TRIAGE_LIMIT))["tool"]["mutmut"]["only_mutate"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise CannotJudge(f"{REPO / 'pyproject.toml'}: no [tool.mutmut] only_mutate ({e})") from None
    n = 0
    for src in (REPO / "fp4moe").rglob("*"):
        rel = src.relative_to(REPO).as_posix()
        dst = MUTANTS / rel
        if not src.is_file() or "__pycache__" in rel or any(fnmatch.fnmatch(rel, p) for p in only) or not dst.exists():
            continue
        if dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
            n += 1
    return n


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def run_in_group(cmd: list[str], env: dict, log, budget_s: float) -> int:
    """``cmd``'s exit status, run in its own process group; when ``budget_s`` runs out the whole
    group is killed (mutmut's fork server and its workers with it, not only mutmut's first
    process) and ``TimeoutExpired`` raised. A SIGTERM to this process (a CI job cancelled, a
    ``timeout``) or a Ctrl-C kills the group too before this process ends: no mutmut outlives it."""
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        before = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread: no handler of its own (the budget still holds)
        before = None
    try:
        return p.wait(timeout=budget_s)
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
        if p.poll() is None:  # the budget ran out, or this process is being stopped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_mutmut(chosen: list[Unit], max_children: int, budget_s: float, names: list[str] | None = None,
               tests: list[str] | None = None) -> float:
    env = dict(os.environ)
    env.pop("PYTHONOPTIMIZE", None)  # the suite's checks are asserts: stripped, every mutant would survive
    shared = REPO.parent / "shared"
    if "FP4MOE_SHARED" not in env and shared.is_dir():
        env["FP4MOE_SHARED"] = str(shared)  # mutants/ sits one level deeper than the checkout
    if tests:
        env["FP4MOE_MUTATION_TESTS"] = ",".join(tests)  # ci/mutation_pytest.py keeps only these
    else:
        env.pop("FP4MOE_MUTATION_TESTS", None)
    # the suite's children import the package by name: the mutated copy, as its parent does
    env["PYTHONPATH"] = os.pathsep.join([str(MUTANTS), *filter(None, [env.get("PYTHONPATH")])])
    env["FP4MOE_MUTATION_FAILURES"] = str(FAILURES_LOG)
    patterns = [p for u in chosen for p in u.patterns()] if names is None else names
    cmd = ["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *patterns]
    MUTANTS.mkdir(exist_ok=True)
    hold_mutants()
    FAILURES_LOG.unlink(missing_ok=True)
    refresh_unmutated_copies()
    t0 = time.monotonic()
    with open(RUN_LOG, "w") as log:  # mutmut's progress, for whoever watches (tail -f)
        try:
            returncode = run_in_group(cmd, env, log, budget_s)
        except subprocess.TimeoutExpired:
            raise CannotJudge(f"mutmut: the budget of {budget_s:.0f} s (--budget) ran out before "
                              f"{len(chosen)} file(s) were judged ({RUN_LOG.relative_to(REPO)})") from None
    wall = time.monotonic() - t0
    if returncode != 0 and (failed := _failed_tests()):
        raise CannotJudge(f"mutmut run exited {returncode}: the suite is not green in mutants/: "
                          f"{len(failed)} failed ({quoted('first', failed[0], 300)}) ({FAILURES_LOG.relative_to(REPO)})")
    if returncode != 0:
        lines = [ln.strip() for ln in _tail(RUN_LOG).replace("\r", "\n").split("\n")]
        tail = " | ".join(ln for ln in lines if ln and not "\u2800" <= ln[0] <= "\u28ff")  # no spinner frames
        raise CannotJudge(f"mutmut run exited {returncode}: {quoted('log tail', tail[-300:], 300)} "
                          f"({RUN_LOG.relative_to(REPO)})")
    return wall


#: mutants/ folders this process holds (path -> the locked descriptor), released when main returns
_HELD: dict[Path, int] = {}


def hold_mutants() -> None:
    """mutants/ holds one run: a second ``ci/mutation.py`` started beside it (the same checkout)
    would overwrite its mutated copies and results while the first scores them. The second
    cannot judge (exit 2, naming the lock); the first's verdict stands as it would alone. Held
    from mutmut's start until :func:`main` returns; the lock is the kernel's (flock), so a run
    that is killed leaves no stale lock."""
    import fcntl

    lock = MUTANTS / ".mutation.lock"
    if lock in _HELD:
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CannotJudge(f"{lock}: another ci/mutation.py run is using {MUTANTS} (one run at a time "
                          "in a checkout)") from None
    _HELD[lock] = fd


def release_mutants() -> None:
    while _HELD:
        os.close(_HELD.popitem()[1])


def _failed_tests() -> list[str]:
    return [ln for ln in _tail(FAILURES_LOG).split("\n") if ln.strip()]  # one record a line: a \r is text


def recorded(path: Path | None = None) -> dict:
    """A score file (default: the committed one; absent, an empty record), schema-checked."""
    if path is None:
        if not SCORES.is_file():
            return {"schema": SCHEMA_VERSION, "files": {}}
        path = SCORES
    elif not path.exists():
        raise CannotJudge(f"{path}: no such score file")
    data = _json(path, SCORES_LIMIT)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION or not isinstance(data.get("files"), dict):
        raise CannotJudge(f"{path}: not a schema-{SCHEMA_VERSION} score file")
    for f, v in data["files"].items():
        if not isinstance(v, dict) or type(v.get("score")) not in (float, int):
            raise CannotJudge(f"{path}: {quoted('file', f, 100)}: no numeric score")
        for key, kind in (("measured", str), ("sha256", str), ("tests", str), ("functions", list)):
            if key in v and not isinstance(v[key], kind):
                raise CannotJudge(f"{path}: {quoted('file', f, 100)}: {key} is {type(v[key]).__name__}, "
                                  f"not {kind.__name__}")
    return data


def merge(paths: list[str]) -> int:
    """The scheduled run's last step: the shards' score files into the committed one, the
    newest measurement of each file kept."""
    book = recorded()
    for p in paths:
        for f, entry in recorded(Path(p))["files"].items():
            if entry.get("measured", "") > book["files"].get(f, {}).get("measured", ""):
                book["files"][f] = entry
    book["files"] = dict(sorted(book["files"].items()))
    atomic_write_json(SCORES, book, indent=1)
    print(f"mutation: merged {len(paths)} score file(s) into {SCORES.relative_to(REPO)}")
    return EXIT_OK


def fell(path: str, now: FileScore, before: dict | None) -> str | None:
    """The ratchet: a file may not score below its recorded value; a file with no record yet
    is held to ``FLOOR`` (``--record`` then starts its own ratchet)."""
    bar, what = (FLOOR, "the floor") if before is None else (before["score"], "recorded")
    if now.score >= bar:
        return None
    return f"{path}: score {now.score:.4f} < {what} {bar:.4f} " \
           f"({now.survived} survived, {now.no_tests} without a test)"


def _owed_line(owed: list[str]) -> str:
    return (f"mutation: cannot judge: {len(owed)} file(s) without a record, owed to the full run "
            f"(--recorded-only): {', '.join(owed)}")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        release_mutants()


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="scopes (all, mx, stats, reference, verdict) or measured files")
    ap.add_argument("--stale", action="store_true",
                    help="only the files whose content (sha256) or measured functions differ from their record")
    ap.add_argument("--changed-since", metavar="REF", help="only the files that differ from REF (git diff REF)")
    ap.add_argument("--record", action="store_true", help=f"write the scores to {SCORES.relative_to(REPO)}")
    ap.add_argument("--ratchet", action="store_true", help="exit 1 when a file scores below its recorded value")
    ap.add_argument("--budget", type=float, default=3600.0, help="seconds for the whole mutmut run (default 3600)")
    ap.add_argument("--max-children", type=int, default=2, help="mutmut workers (default 2)")
    ap.add_argument("--no-run", action="store_true", help="score what mutants/ already holds (no mutmut run)")
    ap.add_argument("--recorded-only", action="store_true",
                    help="with --stale: re-measure only the stale files that have a record; name the others as owed "
                         "(exit 2 when nothing fell: a file never measured does not fit a CI budget)")
    ap.add_argument("--list", action="store_true", help="print the chosen files (with --stale: and why) and stop")
    ap.add_argument("--tests", type=lambda t: [p for p in t.split(",") if p], default=None, metavar="PATHS",
                    help="judge with these test paths only (comma list; default: the whole default suite). "
                         "Fewer tests can only kill fewer mutants: the scores are then lower bounds")
    ap.add_argument("--again", action="store_true",
                    help="run only the mutants not killed in mutants/ (after adding tests); the rest keep their result")
    ap.add_argument("--partial", action="store_true",
                    help="with --no-run: score the files whose mutants all ran, name the others (an interrupted run)")
    ap.add_argument("--merge", nargs="+", metavar="SCORES.json", help="merge shards' score files (no run)")
    a = ap.parse_args(argv)
    try:
        if a.merge:
            return merge(a.merge)
        if a.partial and not a.no_run:
            raise CannotJudge("--partial scores an interrupted run: use it with --no-run")
        if a.stale and a.changed_since:
            raise CannotJudge("--stale and --changed-since are two scopes: give one")
        chosen = select(a.targets, a.changed_since)
        owed: list[str] = []
        if a.recorded_only and not a.stale:
            raise CannotJudge("--recorded-only narrows --stale: give both")
        if a.stale:
            stale = stale_units(chosen, recorded())
            for u, why in stale:
                print(f"mutation: stale: {u.path}: {why}")
            chosen = [u for u, _ in stale]
            if a.recorded_only:
                book0 = recorded()["files"]
                owed = [u.path for u in chosen if u.path not in book0]
                chosen = [u for u in chosen if u.path in book0]
            if not chosen and owed:
                print(_owed_line(owed), file=sys.stderr)
                return EXIT_CANNOT_JUDGE
            if not chosen:
                print("mutation: every measured file's recorded score is fresh (sha256): nothing to do")
                return EXIT_OK
        elif not chosen:
            print(f"mutation: no measured file differs from {a.changed_since}: nothing to do")
            return EXIT_OK
        if a.list:
            print("\n".join(u.path for u in chosen))
            return EXIT_OK
        if a.stale and a.tests is None and (narrowed := records_tests(chosen, recorded())):
            a.tests = narrowed
            print(f"mutation: judged with the test paths their records were judged with: {','.join(a.tests)}")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        names = None
        if a.again:  # only what is not killed yet: a survivor, a mutant no test reached, one not run
            names = sorted(k for u in chosen for k, v in _results_or_empty(u).items()
                           if v is None or v in SURVIVED_CODES | NO_TESTS_CODES)
            names += [p for u in chosen if not _results_or_empty(u) for p in u.patterns()]  # never run yet
            if not names:
                print("mutation: every mutant of these files is killed already: nothing to run again")
        wall = 0.0 if a.no_run or names == [] else run_mutmut(chosen, a.max_children, a.budget, names, a.tests)
        triage = load_triage()
        book = recorded()
        scores, falls, loose, unfinished = {}, [], [], []
        for u in chosen:
            codes = results_of(u)
            if a.partial and any(v is None for v in codes.values()):
                unfinished.append(f"{u.path} ({sum(v is None for v in codes.values())}/{len(codes)} not run)")
                continue
            s = score_of(u, codes, triage, wall * len(codes) / max(1, sum(len(results_of(v)) for v in chosen)))
            s.measured = stamp
            s.sha256 = source_sha256(u)
            s.mutant_s = mutant_seconds(u)
            s.command = " ".join(["python3 ci/mutation.py", *(argv if argv is not None else sys.argv[1:])])
            if a.tests:
                s.tests = ",".join(a.tests)
            scores[u.path] = s
            loose += untriaged(u, codes, triage)
            if a.ratchet and (line := fell(u.path, s, book["files"].get(u.path))):
                falls.append(line)
        if a.record:
            book["files"].update({p: asdict(s) for p, s in scores.items()})
            book["files"] = dict(sorted(book["files"].items()))
            book.update(tool=f"mutmut {_mutmut_version()}", suite="the default suite (CPU tier): pytest tests",
                        floor=FLOOR)
            atomic_write_json(SCORES, book, indent=1)
    except (CannotJudge, OSError) as e:  # OSError: a write, named by fp4moe.infra.files
        print(f"mutation: cannot judge: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_CANNOT_JUDGE
    except Exception as e:  # a bug of this script or an input no check above foresaw: never exit 1
        print(f"mutation: cannot judge: internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]}",
              file=sys.stderr)
        return EXIT_CANNOT_JUDGE
    for path, s in scores.items():
        print(f"{path:45s} {s.mutants:5d} mutants {s.killed:5d} killed {s.survived:4d} survived "
              f"{s.timeout:3d} timeout {s.no_tests:3d} no-test  score {s.score:.4f}  {s.mutant_s:7.1f} s")
    print(f"mutation: {len(scores)} file(s), mutmut {wall:.0f} s; {len(loose)} survivor(s) not triaged in "
          f"{TRIAGE.name}" + (f" (first {loose[0]})" if loose else ""))
    if unfinished:
        print(f"mutation: not finished, not scored: {'; '.join(unfinished)}")
    for line in falls:
        print(f"mutation: fell: {line}", file=sys.stderr)
    if falls:
        return EXIT_FELL
    if owed:
        print(_owed_line(owed), file=sys.stderr)
        return EXIT_CANNOT_JUDGE
    return EXIT_OK


def _mutmut_version() -> str:
    from importlib.metadata import version
    return version("mutmut")


if __name__ == "__main__":
    sys.exit(main())
