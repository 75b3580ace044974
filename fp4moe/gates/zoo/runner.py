"""``fp4moe-gate zoo``: run the suite against every mutant of the bug zoo.

Each mutant (``fp4moe.gates.zoo.mutants``) re-creates a known failure of a target (``--target``; the
reference weight path by default). The suite runs once clean (it must pass, else the zoo
cannot judge: exit 2) and once per mutant, in a child pytest (``fp4moe.infra.runner``: own
process group, time limit, killed with the gate on SIGINT/SIGTERM) with the mutant applied
by ``fp4moe.gates.zoo.child.plugin``. The child reports a record; the parent never trusts pytest's exit
status alone. Per mutant, one verdict:

- KILLED: the plugin confirms it applied the mutant (at least one patch, still in place at
  the end) and at least one test failed or errored -- pytest ran to its end (exit 1);
- SURVIVED: mutant applied, tests passed, none failed (exit 0);
- NOT JUDGED: anything else -- ``apply`` raised or patched nothing, a collection error, the
  child crashed, wrote no record or ran past ``--timeout``. Never counted as killed.

With ``-x`` among the pytest arguments (first failure per mutant, what CI runs) a mutant's
``first_tests`` (the tests that killed it when it was catalogued, where they lie inside the
selection) run alone first: KILLED there is the verdict (the same rule: applied, a failure, pytest
at its end); anything else and the whole selection runs, and its verdict is the mutant's. A
survivor is therefore always judged on every selected test; the shortcut saves the collection of
~1200 tests per killed mutant. Without ``-x`` (every killing test listed) the selection runs whole.

Exit: 1 if a mutant survived (a regression of the suite, measured); else 2 if any mutant was
not judged; else 0 (:attr:`ZooResult.exit_code`). A target is a named set of mutants plus the
tests that guard it (:data:`TARGETS`, :func:`register_target`). The command line is
``fp4moe.commands.zoo``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from fp4moe.infra import runner
from fp4moe.infra.deadline import Deadline
from fp4moe.infra.errors import GateCannotRun, exit_code_of
from fp4moe.infra.files import escape_controls, quoted
from fp4moe.infra.paths import CHECKOUT, REPO_ROOT
from fp4moe.infra.progress import progress

#: Default limit for the clean run, seconds (the default suite takes ~15 s on 2 CPU cores).
CLEAN_TIMEOUT_S = 1800.0
#: Default per-mutant limit: this many times the clean run's time, and at least
#: :data:`MIN_MUTANT_TIMEOUT_S` (a mutant may legitimately make tests slower, e.g. NaN paths).
MUTANT_TIMEOUT_FACTOR = 10.0
MIN_MUTANT_TIMEOUT_S = 300.0
#: Seconds allowed to import a ``--mutant-file`` and list its mutants (in a child).
LIST_TIMEOUT_S = 120.0

KILLED, SURVIVED, NOT_JUDGED = "KILLED", "SURVIVED", "NOT JUDGED"


@dataclass(frozen=True)
class Target:
    """What the zoo mutates and what must kill it."""

    name: str
    description: str
    mutants: Callable[[], list]  # -> [fp4moe.gates.zoo.mutants.Mutant]; imported lazily
    default_tests: tuple[str, ...]
    #: pytest options every child pytest of this target gets (before --pytest-args)
    pytest_args: tuple[str, ...] = ()


TARGETS: dict[str, Target] = {}


def register_target(target: Target) -> None:
    TARGETS[target.name] = target


def _reference_mutants():
    from fp4moe.gates.zoo import mutants

    return list(mutants.MUTANTS)


#: The test folders that guard the weight path, the kernel contract and the footprint: every
#: test file in them joins the zoo's default set (``--tests tests`` runs the whole suite, slower).
DEFAULT_TESTS = (
    "tests/mx",
    "tests/model",
    "tests/reference",
    "tests/gates/footprint",
    "tests/gates/perf",
)

register_target(Target("reference", "the reference MXFP4 MoE weight path (fp4moe)", _reference_mutants, DEFAULT_TESTS))


def _sglang_mutants():
    from fp4moe.gates.zoo.sglang_mutants import zoo_mutants

    return zoo_mutants()


# SGLang's own functions, mutated inside the SGLang child (fp4moe.gates.zoo.sglang_mutants); the sglang tier
# judges, and its tests that read the drive are slow-tier tests (one SGLang child a session), so --slow.
register_target(Target("sglang", "SGLang's own FP4 MoE code, driven in a child process (fp4moe.targets.sglang)", _sglang_mutants,
                       ("tests/targets/sglang",), ("--slow",)))


def _aiter_dispatch_mutants():
    from fp4moe.gates.zoo.aiter_dispatch_mutants import zoo_mutants

    return zoo_mutants()


# Edits of aiter/fused_moe.py in a copy of the tree (fp4moe.gates.zoo.aiter_dispatch_mutants); the
# killer is the default aiter-check run (its dispatch group) on the copy: a slow-tier test, so --slow.
register_target(Target("aiter-dispatch", "aiter's fused_moe dispatch (aiter/fused_moe.py), run on CPU with computing stand-ins",
                       _aiter_dispatch_mutants, ("tests/targets/aiter/dispatch/test_default_run.py",), ("--slow",)))


# --------------------------------------------------------------------------- mutants


#: the largest --mutant-file read (a list of mutants is a few KB of Python)
MAX_MUTANT_FILE_BYTES = 4 << 20


def check_mutant_file(path: str | Path) -> Path:
    """The file exists, is UTF-8 and parses as Python (checked here, without running it)."""
    from fp4moe.infra.files import read_regular_bytes

    p = Path(path)
    if not p.exists():
        raise GateCannotRun(f"--mutant-file {p}: no such file")
    try:  # a FIFO, /dev/zero or a file padded to GiBs: refused at once, unread
        source = read_regular_bytes(p, limit=MAX_MUTANT_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise GateCannotRun(f"--mutant-file {p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise GateCannotRun(f"--mutant-file {p}: cannot read: {str(e).removeprefix(f'{p}: ')}") from None
    try:
        compile(source, str(p), "exec")
    except SyntaxError as e:
        where = f"{p}:{e.lineno}" if e.lineno else str(p)
        raise GateCannotRun(f"--mutant-file {where}: syntax error: {e.msg}") from None
    except ValueError as e:  # e.g. null bytes
        raise GateCannotRun(f"--mutant-file {p}: not Python source: {e}") from None
    return p.resolve()


def load_mutants(target: str = "reference", path: str | None = None) -> list:
    """The target's mutants, or those defined as ``MUTANTS`` in a user's Python file.

    Runs the file: call it in a child (the zoo lists a user's file with :func:`list_mutants`).
    """
    from fp4moe.gates.zoo.mutants import Mutant

    if not path:
        return TARGETS[target].mutants()
    p = check_mutant_file(path)
    import importlib.util

    spec = importlib.util.spec_from_file_location("fp4moe_user_mutants", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    found = getattr(mod, "MUTANTS", None)
    if not isinstance(found, (list, tuple)) or not found or not all(isinstance(m, Mutant) for m in found):
        raise GateCannotRun(f"--mutant-file {p}: must define MUTANTS = [fp4moe.gates.zoo.mutants.Mutant(...), ...]")
    names = [m.name for m in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise GateCannotRun(f"--mutant-file {p}: mutant names used twice: {', '.join(dup)}")
    return list(found)


def list_mutants(target: str, path: str | None, timeout_s: float = LIST_TIMEOUT_S) -> list[dict]:
    """``[{name, origin, description}]``. A user's file is imported in a child (it may exit,
    hang or crash); the gate itself never runs it."""
    if not path:
        return [dict(name=m.name, origin=m.origin, description=m.description, needs_shared=m.needs_shared,
                     first_tests=list(m.first_tests)) for m in load_mutants(target)]
    p = check_mutant_file(path)
    with _scratch_tmpdir() as tmp:
        env = dict(os.environ, FP4MOE_MUTANT_FILE=str(p), FP4MOE_ZOO_TARGET=target, TMPDIR=tmp)
        res = runner.run_python(["-c", "from fp4moe.gates.zoo.child.plugin import list_main; list_main()"],
                                   timeout_s=timeout_s, env=env, cwd=CHECKOUT or tmp)
    rec = res.record
    if not isinstance(rec, dict):
        raise GateCannotRun(f"--mutant-file {p}: could not be imported: {escape_controls(res.why_no_record())}")
    if rec.get("error"):
        raise GateCannotRun(f"--mutant-file {p}: {quoted('error', rec['error'], 300)}")
    return rec["mutants"]


# --------------------------------------------------------------------------- one run


def _scratch_tmpdir():
    """A fresh folder (in the caller's ``$TMPDIR``) that is the ``$TMPDIR`` of one child run:
    what the child pytest and the tests in it leave there (``pytest-of-<user>/``, whose last
    three runs pytest keeps, a test's own ``fp4moe-child-*`` folders, torch's caches) is
    removed with it when the run ends, however it ends short of SIGKILL to the gate."""
    import tempfile

    return tempfile.TemporaryDirectory(prefix="fp4moe-zoo-", ignore_cleanup_errors=True)


def run_suite(tests, mutant: str | None, mutant_file: str | None, extra_args=(), *,
              target: str = "reference", timeout_s: float = CLEAN_TIMEOUT_S) -> runner.ChildResult:
    """One child pytest with ``fp4moe.gates.zoo.child.plugin`` (and the mutant, if any). Its record is in
    ``.record`` (None: no verdict)."""
    env = dict(os.environ, FP4MOE_ZOO_TARGET=target)
    # PYTHONOPTIMIZE: the suite's checks are assert statements; stripped, every mutant survives
    for k in ("FP4MOE_MUTANT", "FP4MOE_MUTANT_FILE", "PYTHONOPTIMIZE"):
        env.pop(k, None)
    if mutant:
        env["FP4MOE_MUTANT"] = mutant
    if mutant_file:
        env["FP4MOE_MUTANT_FILE"] = str(Path(mutant_file).resolve())
    args = ["-m", "pytest", "-p", "fp4moe.gates.zoo.child.plugin", "-q", "-p", "no:cacheprovider", "--no-header",
            "-o", "addopts=--strict-markers", *extra_args, *tests]
    with _scratch_tmpdir() as tmp:
        env["TMPDIR"] = tmp
        # a PID namespace only with its own /proc (own_proc): the suite's own gates find and end
        # their children through /proc, which a namespace with the host's /proc shows under other
        # numbers; without one, the zoo's own sweep and process group end this child
        return runner.run_python(args, timeout_s=timeout_s, env=env, cwd=CHECKOUT or tmp)


def judge(mutant: str, res: runner.ChildResult) -> tuple[str, str]:
    """(verdict, why) for one mutant run. KILLED only with the mutant confirmed applied and a
    test that failed in a pytest run that reached its end; everything unclear is NOT JUDGED."""
    if res.timed_out:
        return NOT_JUDGED, f"timed out after {res.seconds:.0f} s (child killed)"
    rec = res.record
    if not isinstance(rec, dict):
        return NOT_JUDGED, f"child pytest {res.why_no_record()}"
    if rec.get("mutant") != mutant:
        return NOT_JUDGED, f"the child reports mutant {rec.get('mutant')!r}, not {mutant!r}"
    if rec.get("apply_error"):
        return NOT_JUDGED, f"apply failed: {rec['apply_error']}"
    if not rec.get("applied") or not rec.get("patches"):
        return NOT_JUDGED, "apply patched nothing (the mutant was not applied)"
    if rec.get("collect_errors"):
        errs = rec["collect_errors"]
        return NOT_JUDGED, f"collection error under the mutant: {errs[0]}" + (f" (+{len(errs) - 1} more)" if len(errs) > 1 else "")
    if rec.get("reverted"):
        return NOT_JUDGED, f"patch undone before the run ended: {', '.join(rec['reverted'][:3])}"
    status, failed, passed = rec.get("exitstatus"), rec.get("failed") or [], rec.get("passed", 0)
    if status == 1 and failed:
        return KILLED, summarize(failed)
    if status == 0 and not failed and passed > 0:
        return SURVIVED, f"{passed} tests passed"
    return NOT_JUDGED, f"pytest ended with status {status} ({passed} passed, {len(failed)} failed): {_last_line(res)}"


def _last_line(res: runner.ChildResult) -> str:
    """The child's last line of output, quoted and escaped (text of the code under test)."""
    last = next((ln for ln in reversed(res.tail.strip().splitlines()) if ln.strip()), "")
    return quoted("last line", last, 300) if last else ""


# --------------------------------------------------------------------------- the command


def _limit(deadline, default: float | None, what: str) -> float | None:
    """A child's limit: ``default`` cut to what the run's one ``--timeout`` has left."""
    if deadline is None:
        return default
    left = deadline.remaining(what)
    return left if default is None else min(default, left)


def _run_all(jobs: int, fn, items: list) -> list:
    """``[fn(x) for x in items]`` on ``jobs`` threads. On SIGINT/SIGTERM (KeyboardInterrupt)
    or any error: no new child starts, every live child group is killed, then re-raise."""
    stop = False

    def guarded(x):
        if stop:
            raise GateCannotRun("stopped")
        return fn(x)

    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(guarded, x) for x in items]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            f.result()  # re-raise a worker's error
        return [f.result() for f in futures]
    except BaseException:
        stop = True
        for f in futures:
            f.cancel()
        while not all(f.done() for f in futures):
            runner.kill_all_children()
            wait(futures, timeout=0.2)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _validate(args) -> tuple[Target, list[str]]:
    """Every option checked before any pytest runs."""
    if args.target not in TARGETS:
        raise GateCannotRun(f"--target {args.target}: unknown; known: {', '.join(sorted(TARGETS))}")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be >= 1")
    if args.timeout is not None and not 0 < args.timeout <= runner.MAX_TIMEOUT_S:
        raise ValueError(f"--timeout {args.timeout}: must be a positive number of seconds, at most "
                         f"{runner.MAX_TIMEOUT_S:.0f}")
    target = TARGETS[args.target]
    if CHECKOUT is None:
        return target, _installed_tests(args.tests)
    tests = list(args.tests or [t for t in target.default_tests if (REPO_ROOT / t).exists()])
    if not tests:
        raise GateCannotRun(f"--target {target.name}: none of its default test paths exist under {REPO_ROOT}")
    for t in args.tests or ():
        path = Path(t.split("::")[0])
        if not (path if path.is_absolute() else REPO_ROOT / path).exists() and not path.exists():
            raise GateCannotRun(f"--tests {t}: no such file or folder")
    return target, tests


def _installed_tests(given) -> list[str]:
    """An installed package carries no tests: ``--tests`` names a checkout's, made absolute (each
    child runs in its own scratch folder, the installed ``fp4moe`` under test)."""
    if not given:
        raise GateCannotRun("--tests: required with an installed package (it carries no tests): point it at a "
                            "checkout's tests, e.g. --tests CHECKOUT/tests/mx CHECKOUT/tests/reference")
    out = []
    for t in given:
        path, sep, node = t.partition("::")
        if not Path(path).exists():
            raise GateCannotRun(f"--tests {t}: no such file or folder")
        out.append(str(Path(path).resolve()) + sep + node)
    return out


@dataclass
class ZooOptions:
    """What to run (the command line's options, ``fp4moe.commands.zoo``)."""

    target: str = "reference"
    mutant: list[str] | None = None  # only these mutants
    mutant_file: str | None = None
    tests: list[str] | None = None  # default: the target's guarding tests
    jobs: int = 2
    timeout: float | None = None  # each child pytest; default: see _timeouts
    pytest_args: list[str] = field(default_factory=list)
    quiet: bool = False  # no progress lines on stderr


@dataclass
class ZooResult:
    """One row per mutant (mutant, origin, description, verdict, why, killed, killed_by, seconds, rc)."""

    target: str
    tests: list[str]
    clean_seconds: float
    mutant_timeout_s: float
    rows: list[dict]

    @property
    def survivors(self) -> list[str]:
        return [r["mutant"] for r in self.rows if r["verdict"] == SURVIVED]

    @property
    def not_judged(self) -> list[str]:
        return [r["mutant"] for r in self.rows if r["verdict"] == NOT_JUDGED]

    @property
    def exit_code(self) -> int:
        return exit_code_of(regressed=bool(self.survivors), unjudged=bool(self.not_judged))

    def summary(self) -> str:
        line = f"zoo: {sum(r['killed'] for r in self.rows)}/{len(self.rows)} mutants killed"
        if self.survivors:
            line += f"; SURVIVED: {', '.join(self.survivors)}"
        if self.not_judged:
            line += f"; NOT JUDGED: {', '.join(self.not_judged)}"
        return line

    def not_judged_reason(self) -> str:
        return (f"{len(self.not_judged)} mutant(s) not judged: "
                + "; ".join(f"{r['mutant']}: {r['why']}" for r in self.rows if r["verdict"] == NOT_JUDGED))

    def to_dict(self) -> dict:
        return dict(target=self.target, clean_seconds=round(self.clean_seconds, 1), mutant_timeout_s=self.mutant_timeout_s,
                    mutants=self.rows, survivors=self.survivors, not_judged=self.not_judged)


def run_zoo(args: ZooOptions) -> ZooResult:
    """The clean run, then every mutant; GateCannotRun when the zoo cannot judge at all."""
    target, tests = _validate(args)
    if args.mutant_file:
        check_mutant_file(args.mutant_file)
    deadline = Deadline(args.timeout) if args.timeout is not None else None
    with deadline.watch() if deadline is not None else contextlib.nullcontext():
        return _run_zoo(args, target, tests, deadline)


def _run_zoo(args: ZooOptions, target, tests: list[str], deadline) -> ZooResult:
    listed = list_mutants(target.name, args.mutant_file, _limit(deadline, LIST_TIMEOUT_S, "listing the mutants"))
    if args.mutant:
        known = {m["name"] for m in listed}
        unknown = [n for n in args.mutant if n not in known]
        if unknown:
            raise GateCannotRun(f"--mutant {', '.join(unknown)}: unknown; known: {', '.join(sorted(known))}")
        listed = [m for m in listed if m["name"] in args.mutant]

    pytest_args = [*target.pytest_args, *args.pytest_args]
    clean = run_suite(tests, None, None, pytest_args, target=target.name,
                      timeout_s=_limit(deadline, CLEAN_TIMEOUT_S, "the clean run"))
    rec = clean.record if isinstance(clean.record, dict) else {}
    if clean.timed_out and deadline is not None:
        raise GateCannotRun(deadline.spent_line("clean run (no mutant)"))
    if clean.timed_out or not rec:
        raise GateCannotRun(f"clean run (no mutant) {escape_controls(clean.why_no_record())}")
    if rec.get("exitstatus") != 0 or not rec.get("passed"):
        raise GateCannotRun(f"the suite does not pass without any mutant (pytest status {rec.get('exitstatus')}, "
                            f"{rec.get('passed', 0)} passed, failed: {summarize(rec.get('failed') or []) or '-'}): "
                            f"{_last_line(clean)}")
    mutant_limit = max(MIN_MUTANT_TIMEOUT_S, MUTANT_TIMEOUT_FACTOR * clean.seconds)

    # a mutant that only tests reading ../shared can kill is not judgeable without it (it would "survive")
    absent = {m["name"] for m in listed if m.get("needs_shared") and not _shared_has(m["needs_shared"])}
    say = lambda text: progress("zoo", text, quiet=args.quiet)
    say(f"clean run passed in {clean.seconds:.1f} s; judging {len(listed)} mutant(s), {args.jobs} at a time, "
        f"limit {mutant_limit:.0f} s each")
    counter = iter(range(1, len(listed) + 1))

    def one(m) -> dict:
        row = _absent_row(m) if m["name"] in absent else \
            _mutant_row(m, tests, pytest_args, args.mutant_file, target.name, mutant_limit, deadline)
        say(f"{next(counter)}/{len(listed)} {row['mutant']}: {row['verdict']} ({row['seconds']:.1f} s)")
        return row

    rows = _run_all(args.jobs, one, listed)  # the table keeps the catalogue's order
    return ZooResult(target.name, tests, clean.seconds, mutant_limit, rows)


def _absent_row(m: dict) -> dict:
    return dict(mutant=m["name"], origin=m["origin"], description=m["description"], verdict=NOT_JUDGED,
                why=f"only tests reading ../shared/{m['needs_shared']} can kill it, and it is absent "
                    "(set FP4MOE_SHARED or check out ../shared)", killed=False, killed_by=[], seconds=0.0, rc=None)


def _mutant_row(m: dict, tests, pytest_args, mutant_file, target: str, mutant_limit: float, deadline) -> dict:
    """One mutant judged: its first tests alone (``-x``), then the whole selection."""
    r, verdict, why, seconds = None, NOT_JUDGED, "", 0.0
    for selection in _first_then_all(m.get("first_tests") or (), tests, pytest_args):
        try:
            limit = _limit(deadline, mutant_limit, f"mutant {m['name']}")
        except GateCannotRun as e:  # the run's --timeout is spent: not judged, and said so
            r, verdict, why = None, NOT_JUDGED, str(e)
            break
        r = run_suite(selection, m["name"], mutant_file, pytest_args, target=target, timeout_s=limit)
        verdict, why = judge(m["name"], r)
        if r.timed_out and deadline is not None and deadline.spent():
            why = deadline.spent_line(f"mutant {m['name']}")
        seconds += r.seconds
        if verdict == KILLED:
            break
    return dict(mutant=m["name"], origin=m["origin"], description=m["description"], verdict=verdict, why=why,
                killed=verdict == KILLED, killed_by=(r.record or {}).get("failed", []) if verdict == KILLED else [],
                seconds=round(seconds, 1), rc=r.rc if r is not None else None)


def _first_then_all(first_tests, tests: list[str], pytest_args: list[str]) -> list[list[str]]:
    """The selections one mutant runs, in order: its ``first_tests`` that lie inside ``tests``
    (only with ``-x``/``--exitfirst``: the run stops at its first failure anyway), then ``tests``."""
    if not ({"-x", "--exitfirst"} & set(pytest_args)) or CHECKOUT is None:
        return [tests]
    inside = [t for t in first_tests if isinstance(t, str) and _inside(t, tests)]
    return [inside, tests] if inside and inside != tests else [tests]


def _inside(node: str, tests: list[str]) -> bool:
    """Whether the test file (or node id) ``node`` is one of ``tests`` or lies under one of them."""
    path = (REPO_ROOT / node.split("::")[0]).resolve()
    if not path.is_file():
        return False
    for t in tests:
        root, _, sub = t.partition("::")
        base = (REPO_ROOT / root).resolve()
        if sub:  # a node id selects only itself and its parametrisations (test_a: test_a[1], not test_ab)
            rest = (node.split("::", 1)[1:] or [""])[0]
            if path == base and (rest == sub or rest.startswith((sub + "[", sub + "::"))):
                return True
        elif path == base or base in path.parents:
            return True
    return False


def _shared_has(sub: str) -> bool:
    from fp4moe.infra.paths import shared_dir

    s = shared_dir()
    return s is not None and (s / sub).is_dir()


def summarize(nodeids: list[str], most: int = 4) -> str:
    """'file.py::test_a[p1]', 'file.py::test_a[p2]' -> 'test_a (2)' for the table."""
    counts: dict[str, int] = {}
    for n in nodeids:
        fn = n.split("::")[-1].split("[")[0]
        counts[fn] = counts.get(fn, 0) + 1
    parts = [f"{fn} ({c})" if c > 1 else fn for fn, c in sorted(counts.items(), key=lambda kv: -kv[1])]
    extra = len(parts) - most
    return ", ".join(parts[:most]) + (f", +{extra} more tests" if extra > 0 else "")
