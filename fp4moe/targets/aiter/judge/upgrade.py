"""The upgrade (``--base-src OLD``): the same kernel inputs through two trees, per output, and the verdict.

- :func:`compare_trees` -- per saved output: ``bitwise`` / ``within`` the kernel budget /
  ``DIFFER``; routing on its own (``fixed`` where only the head matches the tie-proof top-k);
  an output only one tree produced is ``not judged`` or ``info``;
- :func:`keyed` -- routing rows under their saved key;
- :func:`classify` -- every check of the two trees by key: :class:`Change` (regressed, removed,
  fixed, still failing, appeared, not judged, unchanged); :func:`upgrade_exit` its exit code;
- :func:`memo`, :func:`format_memo`, :func:`verdict_line` -- the verdict (Accepted / Rejected)
  and the memo, with both revisions (:func:`tree_revision`).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

import torch

from fp4moe.infra.errors import exit_code_of
from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2
from fp4moe.targets.aiter.results import CheckResult, Result

#: routing weights of the same expert sets in both trees: equal to fp32 precision
ROUTING_WEIGHT_BOUND = 1e-6
#: the suffix of a routing row's label after its saved key
ROUTING_ROW_SUFFIX = ": vs the reference top-k"


def _one_side(name: str, key: str, head: dict, head_unjudged: dict | None, base_unjudged: dict | None) -> CheckResult:
    side, other = ("head", "base") if key in head else ("base", "head")
    unj = (base_unjudged if key in head else head_unjudged) or {}
    comp = next((c for c in unj if key.startswith(c)), None)
    if comp:
        return CheckResult(name, Result.NOT_JUDGED, f"only the {side} tree ran it: the {other} tree's {comp} was not judged ({unj[comp]})")
    # e.g. CDNA4_SCALE where the base has no utils/shuffle.py: each tree's own rows judge it
    return CheckResult(name, Result.INFO, f"not compared: only the {side} tree's run has it (the {other} tree "
                       "cannot take this case; see its info rows)")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a, b) or (a.dtype.is_floating_point and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(), b.nan_to_num()))


def _routing(name: str, key: str, a: torch.Tensor, b: torch.Tensor, hres: dict, bres: dict) -> CheckResult:
    bad = (a[0].sort(-1).values != b[0].sort(-1).values).any(-1)
    if bool(bad.any()):
        det = f"{int(bad.sum())}/{bad.numel()} tokens routed to different experts (first: token {int(bad.nonzero()[0])})"
        h, bs = hres.get(key), bres.get(key)
        if h == Result.PASS and bs == Result.FAIL:
            return CheckResult(name, Result.FIXED, f"DIFFER: {det}; head matches the tie-proof top-k, base does not: the upgrade fixes it")
        return CheckResult(name, Result.DIFFER, f"{det}; vs the tie-proof top-k: head {h or '?'}, base {bs or '?'}")
    err = float((a[1] - b[1]).abs().max())
    return CheckResult(name, Result.WITHIN if err <= ROUTING_WEIGHT_BOUND else Result.DIFFER,
                       f"same expert sets, max weight difference {err:.1e} (bound {ROUTING_WEIGHT_BOUND:.0e})")


def _output(name: str, a: torch.Tensor, b: torch.Tensor) -> CheckResult:
    nan_a, nan_b = int(a.float().isnan().sum()), int(b.float().isnan().sum())
    if nan_a or nan_b:
        return CheckResult(name, Result.DIFFER, f"NaN: {nan_a} (head) vs {nan_b} (base) of {a.numel()}")
    r, c = rel_l2(a, b), cosine_distance(a, b)
    ok = r <= KERNEL_REL_L2 and c <= KERNEL_COS_DIST
    return CheckResult(name, Result.WITHIN if ok else Result.DIFFER,
                       f"rel L2 {r:.2e}, cos dist {c:.1e} (kernel budget {KERNEL_REL_L2:g} / {KERNEL_COS_DIST:g})")


def compare_trees(head: dict, base: dict, head_rows: list[dict] | None = None, base_rows: list[dict] | None = None,
                  head_unjudged: dict | None = None, base_unjudged: dict | None = None) -> list[CheckResult]:
    """Per saved output: bitwise / within the kernel budget / DIFFER; routing on its own.

    The GEMM outputs were computed on the gate's own routing in both trees (the same ids and
    weights), so a routing change cannot move them; routing is compared apart, and where the two
    trees route differently the row says which tree matches the tie-proof top-k (``fixed``: the
    head does and the base does not -- the upgrade fixes it; ``DIFFER`` otherwise). An output only
    one tree produced is ``not judged`` when the other tree's component could not be judged, and
    ``info`` (not compared) when the other tree has no such case (e.g. no CDNA4_SCALE layout)."""
    hres = {r["check"]: r["result"] for r in head_rows or []}
    bres = {r["check"]: r["result"] for r in base_rows or []}
    out = []
    for key in sorted(set(head) | set(base)):
        name = f"upgrade: {key}"
        if key not in head or key not in base:
            out.append(_one_side(name, key, head, head_unjudged, base_unjudged))
            continue
        a, b = head[key], base[key]
        if a.shape != b.shape:
            out.append(CheckResult(name, Result.DIFFER, f"shape {tuple(a.shape)} (head) != {tuple(b.shape)} (base)"))
        elif _same_bits(a, b):
            out.append(CheckResult(name, Result.BITWISE, f"{a.numel()} values bitwise equal"))
        elif key.startswith("routing"):
            out.append(_routing(name, key, a, b, hres, bres))
        else:
            out.append(_output(name, a, b))
    return out


def keyed(rows: list[dict]) -> list[dict]:
    """Routing rows under their saved key (the row label before ': vs the reference top-k')."""
    return [dict(r, check=r["check"].rsplit(ROUTING_ROW_SUFFIX, 1)[0]) for r in rows]


# ---------------------------------------------------------------------- the upgrade verdict
class Change(StrEnum):
    """The class of one check between the base tree (OLD) and the new tree (NEW)."""

    REGRESSED = "regressed"  # held in OLD, fails in NEW: blocks
    REMOVED = "removed"  # judged in OLD, absent from NEW (n/a, absent, missing, gone): blocks
    FIXED = "fixed"  # failed in OLD, holds in NEW
    STILL_FAILING = "still failing"  # fails in both: shown; blocks only with --strict
    APPEARED = "appeared"  # judged in NEW only (OLD lacked it or could not judge it); a failing one blocks only with --strict
    NOT_JUDGED = "not judged"  # NEW could not judge it, or it fails in NEW where OLD could not judge it: exit 2
    #: judged in OLD, no such row in NEW's table: rows the tree's behaviour selects (a dispatch path
    #: no row takes any more) or a component NEW could not judge (its own ``not judged`` row); info
    DROPPED = "dropped"
    UNCHANGED = "unchanged"


#: the order the memo lists the classes in
CHANGE_ORDER = tuple(Change)
#: rows that are not checks of one tree: the old tree's facts and the two trees' output comparison
NOT_A_CHECK = ("base: ", "upgrade: ", "upgrade dispatch: ", "upgrade ")
#: a file:line in a row's detail (aiter/fused_moe.py:458, ...moe_op_gemm_a16w4.py:276/278)
FILE_LINE = re.compile(r"[\w./-]+\.(?:py|csv|h|cuh|json):\d+(?:[-/:]\d+)*")

_OK, _BAD, _LACKS, _UNJUDGED = "ok", "bad", "lacks", "unjudged"


def row_state(result: str, detail: str = "", strict: bool = False) -> str:
    """One row's state for the upgrade: ``ok`` (held; ``warn`` too unless ``strict``), ``bad``
    (FAIL, DIFFER, a registry-accepted ``known`` defect; ``warn`` with ``strict``), ``lacks`` (the
    tree does not have it or states only a fact: ``n/a``, ``absent``, ``missing``, ``info``) or
    ``unjudged`` (``not judged``). A registry entry that went stale (its defect no longer
    reproduces) is ``ok``: the defect is gone."""
    if result == Result.FAIL and detail.startswith("stale:"):
        return _OK
    if result in (Result.FAIL, Result.DIFFER, Result.KNOWN) or (strict and result == Result.WARN):
        return _BAD
    if result in (Result.NA, Result.ABSENT, Result.INFO):
        return _LACKS
    if result == Result.NOT_JUDGED:
        return _UNJUDGED
    return _OK


def check_key(row: CheckResult, seen: dict[str, int]) -> str:
    """The stable key of a row: its check name (group, check and case: ``kernel: routing E256 k6
    T17``); a name repeated in one table gets ``#2``, ``#3`` in order."""
    n = seen[row.check] = seen.get(row.check, 0) + 1
    return row.check if n == 1 else f"{row.check} #{n}"


def _keyed_checks(rows: list[CheckResult]) -> dict[str, CheckResult]:
    seen: dict[str, int] = {}
    return {check_key(r, seen): r for r in rows if not r.check.startswith(NOT_A_CHECK)}


_CLASS = {(_OK, _OK): Change.UNCHANGED, (_OK, _BAD): Change.REGRESSED, (_BAD, _OK): Change.FIXED,
          (_BAD, _BAD): Change.STILL_FAILING, (_LACKS, _LACKS): Change.UNCHANGED}


def _classify_one(b: str, h: str) -> Change:
    if (b, h) in _CLASS:
        return _CLASS[(b, h)]
    if h == _UNJUDGED or (b == _UNJUDGED and h == _BAD):
        return Change.NOT_JUDGED
    if h == _LACKS and b in (_OK, _BAD):
        return Change.REMOVED
    if b in (_LACKS, _UNJUDGED):
        return Change.APPEARED if h != _LACKS else Change.UNCHANGED
    raise AssertionError(f"unclassified {b} -> {h}")  # pragma: no cover -- every pair is above


def tree_lines(check: str, detail: str) -> list[str]:
    """The aiter files a row points at: the file:line its detail cites in the tree (the gate's own
    ``fp4moe/`` frames left out); a kernel row that cites none names its component's module
    (``kernels.loader.REQUIRED``: ``kernel: routing ...`` -> ``aiter/ops/triton/moe/moe_routing/routing.py``)."""
    from fp4moe.targets.aiter.kernels.loader import REQUIRED

    found = [m for m in FILE_LINE.findall(detail) if "fp4moe/" not in m]
    if found or not check.startswith("kernel: "):
        return found
    comp = REQUIRED.get(check.removeprefix("kernel: ").split(" ", 1)[0])
    return [comp[0].replace(".", "/") + ".py (the component; the row cites no line)"] if comp else []


@dataclass
class CheckChange:
    """One check across the upgrade: its key, class, the two rows' words and NEW's detail."""

    key: str
    change: str
    base: str | None  # the base row's word; None: no such row in the base tree
    head: str | None
    detail: str  # the new tree's detail (the base's where the new tree has no row)
    where: list[str] = field(default_factory=list)  # file:line the new tree's detail cites

    def failing_in_head(self) -> bool:
        return self.change in (Change.REGRESSED, Change.STILL_FAILING) or \
            (self.change == Change.APPEARED and self.head is not None and row_state(self.head, self.detail, True) == _BAD)


def classify(base_rows: list[CheckResult], head_rows: list[CheckResult], strict: bool = False) -> list[CheckChange]:
    """Every check of either tree, by key, in the new tree's order then the base's: its
    :class:`Change`. Rows that are not one tree's checks (:data:`NOT_A_CHECK`) are left out. A
    key with no row in the base counts as ``lacks`` there; a check judged in the base with no row
    in the new table is ``dropped`` (``removed`` needs the new tree's own row saying it lacks it:
    ``n/a``, ``absent``, ``missing``)."""
    b, h = _keyed_checks(base_rows), _keyed_checks(head_rows)
    out = []
    for key in [*h, *(k for k in b if k not in h)]:
        br, hr = b.get(key), h.get(key)
        bs = row_state(br.result, br.detail, strict) if br else _LACKS
        hs = row_state(hr.result, hr.detail, strict) if hr else _LACKS
        detail = (hr or br).detail
        change = Change.DROPPED if hr is None and bs in (_OK, _BAD) else _classify_one(bs, hs)
        out.append(CheckChange(key, change, br.result if br else None, hr.result if hr else None,
                               detail, tree_lines(hr.check, hr.detail) if hr else []))
    return out


def upgrade_exit(changes: list[CheckChange], strict: bool = False) -> int:
    """1 when a check regressed or was removed (with ``strict`` also when one is still failing
    or appeared failing); else 2 when a check could not be judged (:class:`Change.NOT_JUDGED`);
    else 0."""
    blocking = {Change.REGRESSED, Change.REMOVED}
    regressed = any(c.change in blocking or (strict and c.failing_in_head()) for c in changes)
    return exit_code_of(regressed=regressed, unjudged=any(c.change == Change.NOT_JUDGED for c in changes))


def cannot_judge_line(changes: list[CheckChange], base_label: str) -> str | None:
    """The one stderr line of an upgrade exit 2: the first check neither side could settle."""
    nj = [c for c in changes if c.change == Change.NOT_JUDGED]
    if not nj:
        return None
    c, more = nj[0], (f" (+{len(nj) - 1} more)" if len(nj) > 1 else "")
    if c.head == Result.NOT_JUDGED:
        return f"not judged in the new tree: {c.key}: {c.detail}{more}"
    return f"--base-src {base_label}: {c.key}: not judged in the base tree, fails in the new one: {c.detail}{more}"


def tree_revision(path: str | os.PathLike) -> dict:
    """What a tree is, for the memo: ``{"rev", "date", "subject", "path"}`` -- the git commit when
    ``path`` (a checkout holding ``aiter/``, or its ``aiter`` package folder) is the top of a git
    work tree; else the tree's date (``kernels.loader.tree_date``: ``git archive`` keeps commit
    times); else only the path."""
    import subprocess

    from fp4moe.targets.aiter.kernels.loader import tree_date

    p = Path(path).resolve()
    root = p if (p / "aiter").is_dir() else p.parent
    out = {"rev": None, "date": None, "subject": None, "path": str(root)}
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root:
            log = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H%x00%cs%x00%s"], capture_output=True,
                                 text=True, timeout=10)
            if log.returncode == 0 and log.stdout.count("\0") == 2:
                rev, date, subject = log.stdout.strip().split("\0")
                return {**out, "rev": rev, "date": date, "subject": subject}
    except (OSError, subprocess.SubprocessError):
        pass
    if (root / "aiter").is_dir():
        d = tree_date(root / "aiter")
        out["date"], out["date_from"] = d["date"], d["how"]
    return out


def revision_label(rev: dict) -> str:
    if rev.get("rev"):
        return f"{rev['rev'][:10]} ({rev['date']}, {rev['subject']})"
    return f"{rev['path']} (tree dated {rev['date']})" if rev.get("date") else rev["path"]


def memo(changes: list[CheckChange], head_rev: dict, base_rev: dict, exit_code: int, strict: bool = False,
         changed_outputs: list[CheckResult] | None = None) -> dict:
    """The upgrade's record: the verdict word, both revisions, the counts per class and every
    check that is not ``unchanged`` (the JSON ``upgrade`` field; :func:`format_memo` prints it)."""
    counts = {c.value: sum(x.change == c for x in changes) for c in CHANGE_ORDER}
    return {"verdict": "Accepted" if exit_code == 0 else "Rejected" if exit_code == 1 else "Not judged",
            "exit_code": exit_code, "strict": strict, "new": head_rev, "base": base_rev, "counts": counts,
            "checks": [asdict(c) for c in changes if c.change != Change.UNCHANGED],
            "changed_outputs": [asdict(r) for r in changed_outputs or [] if r.result not in (Result.BITWISE, Result.FIXED)]}


def verdict_line(m: dict) -> str:
    c = m["counts"]
    rest = ", ".join(f"{c[k]} {k}" for k in CHANGE_ORDER if c[k])
    return f"{m['verdict']}: aiter {revision_label(m['new'])} over {revision_label(m['base'])}: {rest or 'no checks'}"


def format_memo(m: dict, fmt: str = "text") -> str:
    """The memo (in the spirit of SGLang's AITER Scout): both revisions, each regression and
    removal with the file:line the new tree's row cites, what was fixed, what still fails and
    what appeared; the verdict line last (text) or first (markdown, a job summary)."""
    md = fmt == "markdown"
    dated = lambda r: f"; date: {r['date_from']}" if r.get("date_from") and not r.get("rev") else ""  # noqa: E731
    lines = [f"### aiter upgrade: {m['verdict']}" if md else "aiter upgrade memo",
             f"- new:  {revision_label(m['new'])}{dated(m['new'])}", f"- base: {revision_label(m['base'])}{dated(m['base'])}"]
    blocking = {Change.REGRESSED, Change.REMOVED} | ({Change.STILL_FAILING, Change.APPEARED} if m["strict"] else set())
    for cls in CHANGE_ORDER[:-1]:
        rows = [c for c in m["checks"] if c["change"] == cls]
        if cls == Change.APPEARED:  # passing newcomers are counted, failing ones listed
            rows = [c for c in rows if c["head"] is not None and row_state(c["head"], c["detail"], True) == _BAD]
        if not rows:
            continue
        tag = " (blocks)" if cls in blocking else ""
        lines.append(f"{'#### ' if md else ''}{cls}{tag}: {len(rows)}")
        for c in rows:
            where = f" [{', '.join(c['where'])}]" if c["where"] else ""
            words = f"{c['base'] or '-'} -> {c['head'] or '-'}"
            text = f"{c['key']}: {words}{where}: {' '.join(c['detail'].split())[:300]}"
            lines.append(f"- {text.replace('|', '/')}" if md else f"  {text}")
    if m["changed_outputs"]:
        lines.append(f"{'#### ' if md else ''}outputs that changed between the trees (info): {len(m['changed_outputs'])}")
        lines += [f"{'- ' if md else '  '}{r['check']}: {r['result']}: {r['detail']}" for r in m["changed_outputs"][:20]]
    lines.append(("**" + verdict_line(m) + "**") if md else verdict_line(m))
    return "\n".join(lines)
