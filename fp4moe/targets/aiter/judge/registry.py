"""The known-upstream-defects registry applied to the kernel rows.

- :func:`kernel_rows` -- the kernel child's judged rows as aiter-check rows (``kernel: ...``);
- :func:`apply_registry` -- those rows with the registry's defects marked, plus one row per
  entry: reproduces / known / stale / fails differently / not judged
  (``fp4moe.targets.aiter.kernels.defects`` matches; this module words the verdicts);
- :func:`project_registry_quiet` -- the packaged registry, read only to NAME reproduced defects
  when ``--known-defects`` was not given.
"""

from __future__ import annotations

from fp4moe.targets.aiter.kernels import defects as known_defects
from fp4moe.targets.aiter.results import CheckResult, Result


def kernel_rows(rows: list[dict]) -> list[CheckResult]:
    return [CheckResult(f"kernel: {r['check']}", r["result"], r["detail"] + (f" [{r['seconds']:.1f} s]" if r.get("seconds") else ""))
            for r in rows]


def _mark_rows(by_name: dict[str, CheckResult], st, accepted: bool) -> None:
    d = st.defect
    for name in st.failing:
        r = by_name[f"kernel: {name}"]
        if accepted:
            r.result = Result.KNOWN
            r.detail += f" [known defect {d.id}]"
        else:
            r.detail += f" [= known defect {d.id}; --known-defects (the packaged registry) accepts it]"
    for name, why in st.differing.items():
        by_name[f"kernel: {name}"].detail += f" [NEW: {why}]"


def apply_registry(rows: list[dict], registry, accepted: bool, tree_date: str | None = None) -> list[CheckResult]:
    """Kernel rows -> results, with the registry's defects marked (``known`` when accepted and the
    row fails as the entry's signature says; named in the FAIL otherwise; a row that fails
    differently stays FAIL naming both) and one row per entry: reproduces / known / stale /
    fails differently / not judged."""
    out = kernel_rows(rows)
    registry = [d for d in registry or [] if not known_defects.for_dispatch(d)]  # the dispatch group judges those
    if not registry:
        return out
    by_name = {r.check: r for r in out}
    for st in known_defects.match(rows, registry, accepted, tree_date):
        _mark_rows(by_name, st, accepted)
        out.append(CheckResult(f"known defect: {st.defect.id}", *_registry_verdict(st, accepted)))
    return out


def _registry_verdict(st, accepted: bool) -> tuple[str, str]:
    d = st.defect
    where = ", ".join(d.aiter_lines)
    if st.state in (known_defects.KNOWN, known_defects.REPRODUCED):
        extra = f"; {len(st.differing)} more matched row(s) fail differently (FAIL, new)" if st.differing else ""
        return (Result.KNOWN if accepted else Result.FAIL), (f"reproduces ({len(st.failing)} check(s)): {d.summary} [{where}; first "
                                                             f"seen {d.first_seen}]{extra}")
    if st.state == known_defects.DIFFERS:
        first = next(iter(st.differing.values()))
        return Result.FAIL, f"its checks fail, but not as registered ({len(st.differing)} row(s)): {first}"
    if st.state == known_defects.STALE:
        return Result.FAIL, f"stale: no longer reproduces (its checks ran and passed); remove it from the registry [{where}]"
    return Result.INFO, "not judged: none of its checks ran"


def project_registry_quiet():
    """The project's registry, used without --known-defects only to NAME reproduced defects."""
    try:
        return known_defects.load_registry(known_defects.PROJECT_REGISTRY)
    except (OSError, ValueError):
        return None
