"""The known-upstream-defects registry, applied ONCE to every group's rows (API, layout,
conformance, kernel and dispatch alike).

- :func:`kernel_rows` -- the kernel child's judged rows as aiter-check rows (``kernel: ...``);
- :func:`apply_registry` -- the run's rows with the registry's defects marked, plus one row per
  entry: reproduces / known / stale / fails differently / not judged
  (``fp4moe.targets.aiter.kernels.defects`` matches; this module words the verdicts). Rows of
  the ``--base-src`` tree (``base: ...``) are never matched;
- :func:`project_registry_quiet` -- the packaged registry, read only to NAME reproduced defects
  when ``--known-defects`` was not given.
"""

from __future__ import annotations

from dataclasses import asdict

from fp4moe.targets.aiter.kernels import defects as known_defects
from fp4moe.targets.aiter.results import CheckResult, Result

#: rows of the old tree under --base-src: facts about it, never matched
BASE_PREFIX = "base: "


def kernel_rows(rows: list[dict]) -> list[CheckResult]:
    return [CheckResult(f"kernel: {r['check']}", r["result"], r["detail"] + (f" [{r['seconds']:.1f} s]" if r.get("seconds") else ""))
            for r in rows]


def _mark_rows(by_name: dict[str, CheckResult], st, accepted: bool) -> None:
    d = st.defect
    for name in st.failing:
        r = by_name[name]
        if accepted:
            r.result = Result.KNOWN
            r.detail += f" [known defect {d.id}]"
        else:
            r.detail += f" [= known defect {d.id}; --known-defects (the packaged registry) accepts it]"
    for name, why in st.differing.items():
        by_name[name].detail += f" [NEW: {why}]"


def apply_registry(rows: list[CheckResult], registry, accepted: bool, quiet: bool = False) -> list[CheckResult]:
    """``rows`` with the registry's defects marked (``known`` when accepted and the row fails as
    the entry's signature says; named in the FAIL otherwise; a row that fails differently stays
    FAIL naming both) and one row per entry: reproduces / known / stale / fails differently / not
    judged. ``quiet`` (the packaged registry without ``--known-defects``): only the entries that
    reproduce get a row."""
    if not registry:
        return rows
    rows = [CheckResult(r.check, r.result, r.detail) for r in rows]  # the caller's rows stay as they were
    judged = [r for r in rows if not r.check.startswith(BASE_PREFIX)]
    by_name = {r.check: r for r in judged}
    out = list(rows)
    for st in known_defects.match([asdict(r) for r in judged], registry, accepted):
        _mark_rows(by_name, st, accepted)
        if not quiet or st.state == known_defects.REPRODUCED:
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
