"""``fp4moe-gate aiter-check``: is this aiter still the one the gate was written against?

The orchestration and the verdict. Runs on a CPU wherever aiter's Python sources exist, even
where its GPU runtime cannot load (``--aiter-src DIR``, ``--aiter-wheel WHEEL``, or the installed
aiter found without importing it: ``fp4moe.targets.aiter.source.resolve_source``). The checks
live with the target, ``fp4moe.targets.aiter``; every one runs aiter's code in a child
(``fp4moe.infra.runner``) and judges here, in a process that executes no aiter code:

(a)-(d) the source checks (``targets.aiter.judge.source_checks``: API signatures, layouts,
        capabilities, aiter's pure-torch references), child
        ``fp4moe.targets.aiter.child.source_checks`` (run once; its rows validated here);
(e)     the kernel checks (``targets.aiter.kernels``: aiter's Triton MXFP4 MoE kernels under the
        Triton interpreter, judged by ``kernels.checks``; the children: ``kernels.run``); needs
        triton>=3.8 on a CPU;
(f)     the dispatch checks (``targets.aiter.dispatch``).

``--base-src OLD`` judges both trees in full and classifies every check between them
(``judge.upgrade``: regressed, removed, fixed, still failing, appeared): :func:`upgrade_result`.

Then ONE registry applier (``judge.registry.apply_registry``) over every group's rows, and
``--require``. A function, keyword, layout, capability or file this tree lacks (a later aiter
has it) is an ``absent`` row: never a failure unless ``--require`` names it.

A child that exits, hangs past its limit (``--timeout``: ONE deadline for every child of the
run), or cannot read a file ends the command with exit 2 and one line naming the file.

Exit (:func:`verdict`): 0 when nothing fails; 1 when a check FAILs or DIFFERs, when a check
could not be made from source (``n/a``, unless ``--allow-missing``), when ``fused_moe`` takes
only ``**kwargs`` (unless ``--allow-kwargs``), on an ``absent`` row ``--require`` names, and with
``--strict`` also on warn and on every ``absent`` row; 2 when the check could not run, or when nothing failed but a kernel
component was not judged (the table is printed; one stderr line names it: :func:`unjudged_line`).

- :class:`AiterCheckOptions`, :func:`check_aiter` -- one run, from the command's options;
- :func:`run_in_child` -- (a)-(d) in their child, validated and judged here;
- :func:`run_kernel_group` -- (e) (its children: ``kernels.run.run_kernel_child``);
- :func:`run_dispatch_group` -- (f);
- :func:`apply_require`, :func:`verdict`, :func:`unjudged_line`, :func:`format_table` -- the exit code and the table.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fp4moe.infra import runner
from fp4moe.infra.deadline import Deadline
from fp4moe.infra.errors import GateCannotRun, exit_code_of
from fp4moe.targets.aiter import CHECK_TIMEOUT_S as DEFAULT_TIMEOUT_S
from fp4moe.targets.aiter import kernels as kernels_pkg
from fp4moe.targets.aiter.judge.registry import BASE_PREFIX, apply_registry, kernel_rows, project_registry_quiet
from fp4moe.targets.aiter.judge.source_checks import CHILD_SCHEMA
from fp4moe.targets.aiter.judge.upgrade import compare_trees, keyed
from fp4moe.targets.aiter.kernels import defects as known_defects
from fp4moe.targets.aiter.kernels.run import (  # noqa: F401 -- the kernel group's names, used by tests via this module
    DEFAULT_KERNEL_TIMEOUT_S,
    KERNEL_CHILD,
    KERNEL_CHILD_GROUPS,
    KERNEL_COMPONENTS,
    KERNEL_JOB_NAMES,
    KERNEL_MOE_DIR,
    kernel_notes,
    kernel_plan_args,
    run_kernel_child,
)
from fp4moe.targets.aiter.results import LACKS_MARKS, CheckResult, Result, TreeLacks
from fp4moe.targets.aiter.source import PROGRESS_ENV, AiterSource, resolve_source

#: the child entry of groups (a)-(d), started by module name (never imported by a parent)
CHILD_MODULE = "fp4moe.targets.aiter.child.source_checks"
#: the table's summary, in this order
SUMMARY_ORDER = (Result.PASS, Result.BITWISE, Result.WITHIN, Result.FIXED, Result.FAIL, Result.DIFFER, Result.KNOWN,
                 Result.WARN, Result.NA, Result.PRESENT, Result.ABSENT, Result.INFO, Result.NOT_JUDGED)


@dataclass(frozen=True)
class AiterCheckOptions:
    """What one aiter-check run judges and how (the command's options)."""

    aiter_src: str | None = None
    aiter_wheel: str | None = None
    timeout_s: float | None = None  # ONE deadline for every child; None: each child its default
    differential: bool = True
    allow_kwargs: bool = False
    strict: bool = False
    allow_missing: bool = False
    outputs: dict = field(default_factory=dict)  # option -> result path (never inside the tree)
    kernels: bool = True
    arch: str = "gfx950"
    known_defects_file: str | None = None
    base_src: str | None = None
    device: str = "cpu"
    shapes: str = "tiny"
    dispatch: bool = True
    dispatch_scope: str = "default"
    kernel_jobs: tuple[str, ...] = ()  # --kernel-jobs: only these kernel-check jobs, in one child; () all
    layout_grid: str = "dsv4"  # --layout-grid: judge.layout.LayoutGrid
    require: tuple[str, ...] = ()  # --require NAME: an absent row whose check name holds NAME fails


@dataclass
class AiterCheckResult:
    """Every check's row, where the aiter came from, and the exit code of :func:`verdict`."""

    source: str
    version: str | None
    results: list[CheckResult]
    exit_code: int
    notes: list[str] = field(default_factory=list)  # the kernel group's provenance: tree, arch, triton, stubs
    writes_confined: bool = False  # always False now: no sandbox (docs/architecture.md, threat model)
    dispatch_table: list = field(default_factory=list)  # the dispatch group's per-row facts
    upgrade: dict | None = None  # --base-src: the verdict and memo (judge.upgrade.memo)

    def to_dict(self) -> dict:
        return {"source": self.source, "version": self.version, "writes_confined": self.writes_confined,
                "results": [asdict(r) for r in self.results], "notes": self.notes, "dispatch_table": self.dispatch_table,
                **({"upgrade": self.upgrade} if self.upgrade is not None else {})}


# ---------------------------------------------------------------------- verdict and table
def verdict(results: list[CheckResult], strict: bool = False, allow_missing: bool = False) -> int:
    """1 when any judged check fails (a regression measured), else 2 when a component could not
    be judged (``not judged`` rows; :func:`unjudged_line` names it), else 0. ``absent`` (the tree
    lacks something a later aiter has) fails only with ``strict`` (the caller depends on everything:
    the gfx950 runner's gate); :func:`apply_require` turns the asked-for ones into FAIL first. Rows of the base tree under ``--base-src`` ("base: ...") are facts about
    the OLD tree: they never fail the head's verdict (the ``upgrade:`` rows compare the two)."""
    bad = {Result.FAIL, Result.DIFFER} | (set() if allow_missing else {Result.NA}) | \
        ({Result.WARN, Result.ABSENT} if strict else set())  # --strict: the caller depends on all of it
    judged = [r for r in results if not r.check.startswith(BASE_PREFIX)]
    return exit_code_of(regressed=any(r.result in bad for r in judged),
                        unjudged=any(r.result == Result.NOT_JUDGED for r in results))


def apply_require(results: list[CheckResult], require: tuple[str, ...]) -> list[CheckResult]:
    """``--require NAME``: every ``absent`` row whose check name holds NAME becomes FAIL (the
    caller depends on it). A NAME no row of this run holds is a ValueError naming it (a typo
    must not pass as a requirement met)."""
    for name in require:
        if not any(name in r.check for r in results):
            raise ValueError(f"--require {name}: no check of this run is named so (see the table's check column)")
    return [CheckResult(r.check, Result.FAIL, f"required (--require {next(n for n in require if n in r.check)}) but "
                        f"absent: {r.detail}") if r.result == Result.ABSENT and any(n in r.check for n in require) else r
            for r in results]


def unjudged_line(results: list[CheckResult]) -> str | None:
    """The one stderr line for exit 2 from :func:`verdict`: the first component not judged."""
    nj = [r for r in results if r.result == Result.NOT_JUDGED]
    if not nj:
        return None
    more = f" (+{len(nj) - 1} more not-judged row(s) in the table)" if len(nj) > 1 else ""
    return f"not judged: {nj[0].check.removesuffix(': not judged')}: {nj[0].detail}{more}"


def format_table(results: list[CheckResult], src_origin: str, version: str | None, fmt: str = "text") -> str:
    head = f"aiter-check: {src_origin}, version {version or 'unknown'}"
    if fmt == "markdown":
        lines = [f"### {head}", "", "| check | result | detail |", "| --- | --- | --- |"]
        lines += [f"| {r.check} | {r.result} | {r.detail.replace('|', '/')} |" for r in results]
        return "\n".join(lines)
    w1 = max(len("check"), *(len(r.check) for r in results))
    w2 = max(len("result"), *(len(r.result) for r in results))
    lines = [head, f"{'check':<{w1}}  {'result':<{w2}}  detail", f"{'-' * w1}  {'-' * w2}  ------"]
    lines += [f"{r.check:<{w1}}  {r.result:<{w2}}  {r.detail}" for r in results]
    counted = [r for r in results if not r.check.startswith(BASE_PREFIX)]  # the old tree's facts: no verdict
    counts = {k: sum(r.result == k for r in counted) for k in SUMMARY_ORDER}
    nbase = len(results) - len(counted)
    lines.append("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                 + (f" (+{nbase} base-tree rows, not counted)" if nbase else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------- (a)-(d): the source checks
def _source_args(src_kind: str, path: str) -> list[str]:
    path = os.path.abspath(path)
    return ["--aiter-src", path] if src_kind == "dir" else ["--aiter-wheel", path]


def run_in_child(src_kind: str, path: str, *, timeout_s: float, differential: bool, allow_kwargs: bool,
                 deadline: Deadline | None = None, layout_grid: str = "dsv4") -> dict:
    """Groups (a)-(d), run once in their child over the layout cases of ``layout_grid``
    (``judge.layout.LAYOUT_GRIDS``): the child returns its rows, this process validates them
    (``results.rows_from_child``) and the verdict is made here. Returns ``{"source", "version",
    "results", "writes_confined"}``; GateCannotRun names the aiter file that ended or hung the
    child, or the row that is malformed."""
    from fp4moe.targets.aiter.judge.layout import LayoutGrid
    from fp4moe.targets.aiter.results import rows_from_child

    grid = LayoutGrid(layout_grid)
    args = [*_source_args(src_kind, path)] + ([] if differential else ["--no-differential"]) + \
        (["--allow-kwargs"] if allow_kwargs else []) + ([] if grid is LayoutGrid.DSV4 else ["--layout-grid", grid.value])
    label = f"aiter-check ({'--aiter-src' if src_kind == 'dir' else '--aiter-wheel'} {path})"
    out = runner.run_judged(CHILD_MODULE, args, label=label, timeout_s=timeout_s, schema=CHILD_SCHEMA,
                            env={PROGRESS_ENV: ""}, deadline=deadline)
    results = rows_from_child(out.json("rows"), label)
    rec = out.record
    return {"source": rec["source"], "version": rec["version"], "results": [asdict(r) for r in results],
            "writes_confined": rec["writes_confined"] and rec["unconfined"] is None}


# ---------------------------------------------------------------------- (e): the kernel checks
def kernel_job_args(opts: AiterCheckOptions) -> tuple:
    """The kernel child's plan options of ``--kernel-jobs`` (none: every job, two children)."""
    return ("--only", ",".join(opts.kernel_jobs)) if opts.kernel_jobs else ()


def run_kernel_group(opts: AiterCheckOptions, kind: str, path: str, *, notes: list[str],
                     deadline: Deadline | None = None, keep: dict | None = None) -> list[CheckResult]:
    """(e) the kernel rows of one tree; ``keep`` (a dict) receives the kernel record (``rows``,
    ``saved`` outputs, ``unjudged``) for the upgrade's output comparison."""
    if kind != "dir":
        return [CheckResult("kernel: aiter Triton MoE", Result.NA, "a wheel source: the kernel adapter loads a source tree (--aiter-src); "
                            "the PyPI wheel's flat layout (aiter/ops/triton/moe_op_gemm_a8w4.py, no a16w4) is not supported")]
    if not (Path(path) / KERNEL_MOE_DIR).is_dir():
        return [CheckResult("kernel: aiter Triton MoE", Result.ABSENT, f"this tree has no {KERNEL_MOE_DIR}/ (aiter's Triton MoE kernels)")]
    timeout = opts.timeout_s or DEFAULT_KERNEL_TIMEOUT_S
    from fp4moe.targets.aiter.kernels.loader import tree_date

    # the date rule reads the tree before any of its code runs (nothing a child wrote)
    date = tree_date(Path(path).resolve() / "aiter")
    rec = run_kernel_child(path, arch=opts.arch, timeout_s=timeout, device=opts.device, shapes=opts.shapes, deadline=deadline,
                           extra_args=kernel_job_args(opts))
    notes += kernel_notes(rec, date)
    if opts.kernel_jobs:
        notes.append(f"kernel checks: only the jobs of --kernel-jobs {','.join(opts.kernel_jobs)} (the other kernel checks not run)")
    if keep is not None:
        keep.update(rec)
    return kernel_rows(rec["rows"])


# ---------------------------------------------------------------------- (f): the dispatch checks
def run_dispatch_group(kind, path, dispatch, scope, results, notes, deadline) -> list:
    """(f) aiter's fused_moe dispatch executed (fp4moe.targets.aiter.dispatch): rows appended to
    ``results``; returns the per-row table for --json."""
    from fp4moe.targets.aiter.dispatch import group, table

    if not dispatch:
        notes.append("dispatch checks: not run (--no-dispatch)")
        return []
    if kind != "dir" or not group.applies(path):
        notes.append("dispatch checks: not run (the source has no aiter/fused_moe.py tree; --aiter-src a checkout)")
        return []
    try:
        rows, dnotes, facts = group.run_group(path, timeout_s=DEFAULT_TIMEOUT_S, scope=table.Scope(scope), deadline=deadline)
    except (TreeLacks, GateCannotRun) as e:  # an older tree: fused_moe's imports or structure are not there
        if not isinstance(e, TreeLacks) and not any(m in str(e) for m in LACKS_MARKS):
            raise
        results.append(CheckResult("dispatch: aiter fused_moe", Result.ABSENT, f"not run: this tree lacks what the "
                                   f"dispatch checks load ({' '.join(str(e).split())[:300]})"))
        return []
    results += [CheckResult(**r) for r in rows]
    notes += dnotes
    return facts


# ---------------------------------------------------------------------- one run
def _refuse_output_inside(option: str, out: str | None, tree: str) -> None:
    """The gate's own output may not land in the tree under test (the caller's results and
    the code under test never share a folder)."""
    if not out:
        return
    o, t = Path(out).resolve(), Path(tree).resolve()
    if o == t or t in o.parents:
        raise ValueError(f"{option} {out}: inside the aiter tree under test ({tree}); write results elsewhere")


def _preflight(opts: AiterCheckOptions, src: AiterSource):
    """Every refusal that needs no child, in this order: results inside the code under test,
    a ``--kernel-jobs`` name that is no job kind or component, options that contradict, the registry file, a triton too old for the kernel checks, a csrc/
    missing a file fused_moe imports. Returns the registry (None without ``--known-defects``)."""
    kind, path = src.location
    for option, out in opts.outputs.items():  # results never land in (or on) the code under test
        if kind == "dir":
            _refuse_output_inside(option, out, path)
        elif out and Path(out).resolve() == Path(path).resolve():
            raise ValueError(f"{option} {out}: that is the aiter wheel under test")
    bad_jobs = [j for j in opts.kernel_jobs if j not in KERNEL_JOB_NAMES]
    if bad_jobs or (opts.kernel_jobs and not opts.kernels):
        raise ValueError(f"--kernel-jobs {','.join(opts.kernel_jobs)}: " + (
            f"{bad_jobs[0]!r} is none of {', '.join(KERNEL_JOB_NAMES)}" if bad_jobs else "not with --no-kernels"))
    registry = known_defects.load_registry(opts.known_defects_file) if opts.known_defects_file else None
    if opts.kernels and kind == "dir" and (Path(path) / KERNEL_MOE_DIR).is_dir():
        ok, line = kernels_pkg.triton_status_light(opts.device)
        if not ok:
            raise GateCannotRun(f"kernel checks: {line}; or pass --no-kernels")
    if opts.dispatch and kind == "dir":
        from fp4moe.targets.aiter.dispatch.group import preflight

        preflight(path)  # a csrc/ missing a file fused_moe imports: exit 2 naming it, before any child runs
    return registry


def check_aiter(opts: AiterCheckOptions) -> AiterCheckResult:
    """Resolve the aiter sources here (the options' errors name them), run every check in a
    child with a time limit, and judge. With ``--base-src`` both trees are judged in full, the
    base first (a base that cannot be judged: exit 2 naming ``--base-src``), and the verdict is
    the upgrade's (:func:`upgrade_result`). The command line is ``fp4moe.commands.aiter_check``."""
    runner.check_timeout("--timeout", opts.timeout_s)
    # --timeout: ONE deadline for the whole run: every child (the (a)-(d) child, the kernel child, the
    # --base-src side, the dispatch children) gets what is left, and the gate's own reading and judging
    # is stopped at it (Deadline.watch); without it each child has its own default limit
    deadline = Deadline(opts.timeout_s, "--timeout") if opts.timeout_s is not None else None
    with deadline.watch() if deadline is not None else contextlib.nullcontext():
        return _check_sources(opts, deadline)


def _check_sources(opts: AiterCheckOptions, deadline: Deadline | None) -> AiterCheckResult:
    base = AiterSource.from_dir(opts.base_src, "--base-src") if opts.base_src else None  # before any work: names --base-src
    src = resolve_source(opts.aiter_src, opts.aiter_wheel)
    registry = _preflight(opts, src)
    if base is None:
        return judge_tree(opts, src, registry, deadline)
    bkeep, hkeep = {}, {}
    try:
        _preflight(opts, base)
        bres = judge_tree(opts, base, registry, deadline, bkeep)
    except (GateCannotRun, ValueError) as e:
        if deadline is not None and str(e).startswith(deadline.option):
            raise  # the run's one deadline, not the base tree
        raise GateCannotRun(f"--base-src {opts.base_src}: the base tree cannot be judged: {' '.join(str(e).split())}") from e
    hres = judge_tree(opts, src, registry, deadline, hkeep)
    return upgrade_result(opts, hres, bres, hkeep, bkeep, src.location[1], base.location[1])


def judge_tree(opts: AiterCheckOptions, src: AiterSource, registry, deadline: Deadline | None,
               keep: dict | None = None) -> AiterCheckResult:
    """Every group of one tree, ONE registry applier over their rows, ``--require``, its own verdict."""
    kind, path = src.location
    rec = run_in_child(kind, path, timeout_s=DEFAULT_TIMEOUT_S, differential=opts.differential,
                       allow_kwargs=opts.allow_kwargs, deadline=deadline, layout_grid=opts.layout_grid)
    notes: list[str] = []
    if opts.layout_grid != "dsv4":
        notes.append(f"layout checks: --layout-grid {opts.layout_grid} (not the DeepSeek-V4 per-rank shapes)")
    results = [CheckResult(**r) for r in rec["results"]]
    if not opts.kernels:
        notes.append("kernel checks: not run (--no-kernels)")
    else:
        results += run_kernel_group(opts, kind, path, notes=notes, deadline=deadline, keep=keep)
    table = run_dispatch_group(kind, path, opts.dispatch, opts.dispatch_scope, results, notes, deadline)
    # without --known-defects the packaged registry only names the defects that reproduce
    results = apply_registry(results, registry if registry is not None else project_registry_quiet(),
                             accepted=registry is not None, quiet=registry is None)
    requires = opts.require + (known_defects.load_requires(opts.known_defects_file) if opts.known_defects_file else ())
    results = apply_require(results, requires)
    return AiterCheckResult(rec["source"], rec.get("version"), results, verdict(results, opts.strict, opts.allow_missing), notes,
                            writes_confined=rec.get("writes_confined") is True, dispatch_table=table)


def upgrade_result(opts: AiterCheckOptions, head: AiterCheckResult, base: AiterCheckResult, hkeep: dict, bkeep: dict,
                   head_path: str, base_path: str) -> AiterCheckResult:
    """The upgrade verdict (``judge.upgrade.classify``): every check of both trees by key --
    regressed or removed (exit 1), fixed, still failing (exit 1 only with ``--strict``), appeared,
    not judged (exit 2) -- and the outputs that changed between them (``upgrade: ...`` rows: the
    kernel outputs, ``judge.upgrade.compare_trees``; the dispatch's kernel choices,
    ``dispatch.group.diff_tables``), which are information: each tree's own rows judge them."""
    from fp4moe.targets.aiter.dispatch.group import diff_tables
    from fp4moe.targets.aiter.judge import upgrade

    changed = compare_trees(hkeep["saved"], bkeep["saved"], keyed(hkeep["rows"]), keyed(bkeep["rows"]),
                            hkeep.get("unjudged"), bkeep.get("unjudged")) if hkeep and bkeep else []
    if head.dispatch_table and base.dispatch_table:
        changed += [CheckResult(**r) for r in diff_tables(head.dispatch_table, base.dispatch_table, [], [])]
    changes = upgrade.classify(base.results, head.results, opts.strict)
    code = upgrade.upgrade_exit(changes, opts.strict)
    memo = upgrade.memo(changes, upgrade.tree_revision(head_path),
                        upgrade.tree_revision(base_path), code, opts.strict, changed)
    memo["cannot_judge"] = upgrade.cannot_judge_line(changes, base_path) or (unjudged_line(head.results) if code == 2 else None)
    notes = head.notes + [f"base tree (--base-src): {base.source}, version {base.version or 'unknown'}; its own verdict exit "
                          f"{base.exit_code}"] + [f"  base: {n}" for n in base.notes if not n.startswith("  ")]
    return AiterCheckResult(head.source, head.version, head.results + changed, code, notes,
                            writes_confined=head.writes_confined and base.writes_confined,
                            dispatch_table=head.dispatch_table, upgrade=memo)
