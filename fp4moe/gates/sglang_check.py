"""sglang-check: drive the SGLang in front of you in a child and give the verdict.

Index:

- :func:`check` -- the whole run: options checked, SGLang resolved, one child drive
  (``fp4moe.targets.sglang.target.drive``, which first looks for fp8.py's DeepSeek-V4 FP4 aiter
  branch), every check judged, optionally (``--aiter-dispatch``) with SGLang's call run in that
  child into an aiter tree's executed ``fused_moe``, judged at the kernel stages; returns a :class:`Result`.
- :func:`judge` -- the verdict over one drive: ``drive`` per row, then the row checks of
  ``fp4moe.targets.sglang.checks.ROW_CHECKS``; or why the drive cannot be judged (exit 2).
- :func:`failure` -- why one check did not hold for one row (the tier's assertion).

The checks themselves, what each compares and its tolerance, are ``fp4moe.targets.sglang.checks``;
the child's record schema is ``fp4moe.targets.sglang.record``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

from fp4moe.infra.deadline import Deadline
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.progress import progress
from fp4moe.reference.footprint import load_budget
from fp4moe.targets.aiter import tensor_attrs
from fp4moe.targets.sglang import CHILD_TIMEOUT_S, record, router_numerics
from fp4moe.targets.sglang.checks import (
    CHECKS,  # noqa: F401 -- the tier parametrises over it
    DRIVE_CHECK,
    KERNEL_TOLERANCE,
    OUTPUT_TOLERANCE,
    Check,
    RowContext,
    judge_row,
)
from fp4moe.targets.sglang.modes import Mode
from fp4moe.targets.sglang.source import missing_module_line

GATE = "sglang-check"
DRIVEN = "SGLang create_weights -> load -> process -> quant info -> AiterRunnerCore.run -> fused_moe"


def _cannot_judge(drive) -> str | None:
    """Why the child's record as a whole cannot be judged (exit 2), or None."""
    rec = drive.record
    version = rec.get("sglang_version", drive.source.version)
    if rec.get("mutant") and not rec["mutant"].get("applied"):
        return f"sglang {version}: mutant {drive.mutant!r} was not applied: {rec['mutant'].get('why')}"
    if rec.get("stage") == "no branch":  # the patch points of the FP4 aiter branch are not in this fp8.py
        return rec["error"]
    if rec.get("missing_module"):
        return missing_module_line(rec["missing_module"], version)
    if rec.get("error"):
        return f"sglang {version}: the child failed at {rec['stage']}: {rec['error']} ({' <- '.join(reversed(rec.get('where', [])))})"
    return None


def judge(drive, require_router: bool = True) -> tuple[list[Check], str | None]:
    """All checks of one child run; second item: why the run could not be judged (exit 2).
    ``require_router=False``: router numerics that could not run (no triton) are left out
    instead (the sglang tier then skips their test with the reason)."""
    cannot = _cannot_judge(drive)
    if cannot:
        return [], cannot
    rec = drive.record
    version = rec.get("sglang_version", drive.source.version)
    budget = load_budget()
    attrs, attrs_origin = tensor_attrs.attrs_for(drive.aiter_src)
    checks: list[Check] = []
    done = {r["label"]: r for r in rec.get("rows", [])}
    for row in drive.rows:
        r = done.get(row.label)
        if r is None:
            checks.append(Check(DRIVE_CHECK, row.label, False, DRIVEN, "not driven (the child stopped before this row)"))
        elif r.get("error") and r.get("setup"):  # the harness could not set the row up: not judged
            where = " <- ".join(reversed(r.get("where", [])))
            return checks, (f"sglang {version}: could not drive {row.label} (step {r['step']}): {r['error']} at {where}")
        elif r.get("error"):
            where = " <- ".join(reversed(r.get("where", [])))
            checks.append(Check(DRIVE_CHECK, row.label, False, DRIVEN, f"{r.get('step')} raised {r['error']} at {where}"))
        else:
            checks.append(Check(DRIVE_CHECK, row.label, True, DRIVEN, "1 fused_moe call"))
            checks.extend(judge_row(RowContext(r, drive.tensors.get(row.label), drive.inputs[row.label], row, budget,
                                               rec.get("mode") or "cpu", tuple(attrs or ()), attrs_origin)))
    rn, why = router_numerics.judge(rec.get("router_numerics"))
    if why and require_router:
        return checks, f"sglang {version}: {why}"
    return checks + [Check(**c) for c in rn], None


def failure(drive, results: dict, check: str, row: str) -> str | None:
    """Why ``check`` did not hold for ``row`` in a judged drive (``results``: (name, row) ->
    Check), or None when it held; a check that was never judged is a failure too."""
    c = results.get((check, row))
    version = drive.record.get("sglang_version", drive.source.version)
    if c is None:
        d = results.get((DRIVE_CHECK, row))
        return f"{check} was not judged for {row}: " + (d.line(version) if d else "row not driven")
    return None if c.ok else c.line(version)


@dataclass
class Options:
    """What one sglang-check run judges (the command's options, in its terms)."""

    sglang_wheel: str | None = None
    sglang_version: str | None = None
    sglang_root: str | None = None
    aiter_src: str | None = None
    aiter_dispatch: bool = False
    model: str | None = None
    tp: int | None = None
    tp_rank: int | None = None
    mutant: str | None = None
    timeout: float = CHILD_TIMEOUT_S
    mode: str | None = None
    quiet: bool = False
    known_defects: str | None = None  # a registry file (fp4moe/data/sglang_known_defects.json's form)


#: the keys every registry entry has, each a string (``sglang``: the releases it was recorded in)
ENTRY_KEYS = {"check": str, "row": str, "sglang": list, "signature": str, "report": str}


def load_known(path: str) -> list[dict]:
    """A known-defects registry: entries naming one check of one row, the releases they were recorded
    in and the failure text they were recorded with (``signature``, matched exactly: no pattern, so an
    entry can hide nothing else). GateCannotRun names the file and the first bad entry."""
    import json

    from fp4moe.infra.files import read_regular_bytes

    try:
        doc = json.loads(read_regular_bytes(path, limit=1 << 20))
    except (OSError, ValueError) as e:
        raise GateCannotRun(f"--known-defects {path}: {' '.join(str(e).split())[:200]}") from e
    if not isinstance(doc, dict) or doc.get("schema") != "sglang-known-defects" or doc.get("version") != 1 \
            or not isinstance(doc.get("entries"), list):
        raise GateCannotRun(f"--known-defects {path}: not an sglang-known-defects version 1 registry")
    for i, e in enumerate(doc["entries"]):
        bad = not isinstance(e, dict) or set(e) != set(ENTRY_KEYS) or any(not isinstance(e[k], t) for k, t in ENTRY_KEYS.items()) \
            or not all(isinstance(v, str) and v for v in e["sglang"]) or len(e["signature"]) < 20
        if bad:
            raise GateCannotRun(f"--known-defects {path}: entry {i} is not {{check, row, sglang: [releases], "
                                "signature (the recorded failure text, 20+ characters), report}")
    return doc["entries"]


def known_entry(c: Check, version: str, entries: list[dict]) -> dict | None:
    """The registry entry that names this failed check exactly (check, row, release, recorded text)."""
    return next((e for e in entries if not c.ok and e["check"] == c.name and e["row"] == c.row
                 and version in e["sglang"] and e["signature"] in c.detail), None)


@dataclass
class Result:
    """One judged run: the drive, every check, and the JSON result's body (no ``status``)."""

    drive: object
    checks: list
    summary: dict = field(default_factory=dict)
    known: dict = field(default_factory=dict)  # (check, row) -> the registry entry that names its failure
    not_seen: list = field(default_factory=list)  # registry entries for this release whose failure did not occur

    @property
    def failed(self) -> list:
        """The failures no registry entry names."""
        return [c for c in self.checks if not c.ok and (c.name, c.row) not in self.known]

    @property
    def version(self) -> str:
        return self.drive.record.get("sglang_version", self.drive.source.version)


def check(opts: Options) -> Result:
    """The whole run (see the module index); nothing is left in ``$TMPDIR``, whatever happens."""
    from fp4moe.infra.runner import check_timeout
    from fp4moe.targets.sglang import target

    check_timeout("--timeout", opts.timeout)  # the options first: a refused run costs no unpack
    rows = target.parse_rows(opts.model, opts.tp, opts.tp_rank)
    # --timeout: ONE deadline for every wait of the run (the wheel download, the SGLang child,
    # the dispatch child): each gets what is left
    deadline = Deadline(opts.timeout, "--timeout")
    with deadline.watch():  # the unpacking, the judging: the gate's own work stops at it too
        return _check(opts, rows, deadline)


def _check(opts: Options, rows: list, deadline: Deadline) -> Result:
    from fp4moe.targets.sglang import source, target

    src = source.resolve(wheel=opts.sglang_wheel, version=opts.sglang_version, root=opts.sglang_root, quiet=opts.quiet,
                         deadline=deadline)
    progress(GATE, f"driving sglang {src.version} ({src.origin}) in a child: {len(rows)} row(s), "
             f"limit {opts.timeout:.0f} s", quiet=opts.quiet)
    if opts.aiter_dispatch:
        _dispatch_preflight(opts)
    with tempfile.TemporaryDirectory(prefix="fp4moe-sglang-") as work:
        d = target.drive(src, rows, aiter_src=opts.aiter_src, mutant=opts.mutant, timeout_s=opts.timeout, mode=opts.mode,
                         work=work, deadline=deadline, aiter_dispatch=opts.aiter_dispatch)
    progress(GATE, f"child done in {d.seconds:.1f} s; judging", quiet=opts.quiet)
    results, cannot = judge(d)
    if cannot:
        raise GateCannotRun(cannot)
    if opts.aiter_dispatch:
        results += _dispatch_checks(opts, d)
    res = Result(d, results)
    if opts.known_defects:
        entries = load_known(opts.known_defects)
        res.known = {(c.name, c.row): e for c in results if (e := known_entry(c, res.version, entries))}
        res.not_seen = [e for e in entries if res.version in e["sglang"] and e not in res.known.values()]
    res.summary = _summary(opts, res, src)
    return res


def _summary(opts: Options, res: Result, src) -> dict:
    rec = res.drive.record
    return {
        "sglang_version": res.version, "sglang_origin": src.origin, "shuffle_source": rec["shuffle_source"],
        "aiter_src": opts.aiter_src, "mutant": rec["mutant"], "mode": rec["mode"], "mode_why": rec["mode_why"],
        "rows": [r.label for r in res.drive.rows], "failed_checks": sorted({c.name for c in res.failed}),
        "known_checks": sorted({name for name, _ in res.known}), "known_not_seen": [e["check"] for e in res.not_seen],
        "output_tolerance": KERNEL_TOLERANCE if rec["mode"] == Mode.GFX950 else OUTPUT_TOLERANCE,
        "child_seconds": round(res.drive.seconds, 1), "patch_points": record.patch_points(rec),
        "stubbed_modules": rec["stubbed_modules"], "checks": [c.as_dict() for c in res.checks],
    }


def _dispatch_preflight(opts: Options) -> None:
    """--aiter-dispatch needs a tree the dispatch loader can load (exit 2 naming the file otherwise)."""
    from fp4moe.targets.aiter.dispatch import group

    if not opts.aiter_src:
        raise ValueError("--aiter-dispatch needs --aiter-src (the tree whose fused_moe is executed)")
    if not group.applies(opts.aiter_src):
        raise ValueError(f"--aiter-dispatch: {opts.aiter_src} has no aiter/fused_moe.py")
    group.preflight(opts.aiter_src)


def _dispatch_checks(opts: Options, d) -> list:
    """SGLang's call into --aiter-src's executed fused_moe, judged from the SGLang child's record
    (fp4moe.targets.aiter.dispatch.sglang_call)."""
    from fp4moe.targets.aiter.dispatch import sglang_call

    rows = [sglang_call.SGLangRow(r.label, r.model, r.tp, r.ep, r.experts, r.hidden, r.ip) for r in d.rows]
    progress(GATE, f"judging SGLang's calls into {opts.aiter_src}'s executed dispatch", quiet=opts.quiet)
    return [Check(**c) for c in sglang_call.judge(d.record, rows)]
