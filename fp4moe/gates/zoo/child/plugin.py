"""pytest plugin loaded by ``fp4moe-gate zoo`` (``-p fp4moe.gates.zoo.child.plugin``) in each child run:
started by name, never imported by the zoo.

``FP4MOE_MUTANT`` names the mutant to apply (from the target ``FP4MOE_ZOO_TARGET``'s mutants
or from the file in ``FP4MOE_MUTANT_FILE``). The run's verdict goes to the parent as one
record (``fp4moe.infra.runner.record_writer``): which mutant, whether ``apply`` ran and how many
patches it made, whether they were still in place at the end, collection errors, pytest's
exit status and the tests that failed. A mutant whose ``apply`` raises is recorded as such
and the run stops (pytest usage error): the parent reports it NOT JUDGED, never killed.
"""

from __future__ import annotations

import os

import pytest

from fp4moe.infra import runner

#: The record writer (None outside ``fp4moe-gate zoo``).
_WRITE = runner.record_writer() if os.environ.get(runner.RESULT_ENV) else None

_SENTINEL = object()
#: Longest line a mutant's apply error or a mutant file's import error is recorded with.
ERROR_CHARS = 500


class CountingMonkeyPatch(pytest.MonkeyPatch):
    """A MonkeyPatch that remembers what it set, so the plugin can confirm the mutant is in
    place (a ``setattr`` that ran) and still in place when the run ends."""

    def __init__(self):
        super().__init__()
        self.patches = 0
        self.attrs: list[tuple[object, str, object]] = []

    def setattr(self, target, name=_SENTINEL, value=_SENTINEL, raising=True):
        if value is _SENTINEL:  # setattr("pkg.mod.attr", value) form
            super().setattr(target, name, raising=raising)
            obj, attr, _ = self._setattr[-1]  # where pytest resolved the dotted path
            self.attrs.append((obj, attr, name))
        else:
            super().setattr(target, name, value, raising=raising)
            self.attrs.append((target, name, value))
        self.patches += 1

    def setitem(self, dic, name, value):
        super().setitem(dic, name, value)
        self.patches += 1

    def delattr(self, target, name=_SENTINEL, raising=True):
        super().delattr(target, name, raising=raising)
        self.patches += 1

    def delitem(self, dic, name, raising=True):
        super().delitem(dic, name, raising=raising)
        self.patches += 1

    def setenv(self, name, value, prepend=None):
        super().setenv(name, value, prepend=prepend)
        self.patches += 1

    def delenv(self, name, raising=True):
        super().delenv(name, raising=raising)
        self.patches += 1

    def reverted(self) -> list[str]:
        """The attributes set by the mutant that no longer hold the mutant's value."""
        return [f"{getattr(o, '__name__', type(o).__name__)}.{n}" for o, n, v in self.attrs
                if getattr(o, n, _SENTINEL) is not v]


_MP = CountingMonkeyPatch()
_STATE: dict = {"mutant": None, "applied": False, "patches": 0, "apply_error": None, "failed": [],
                "collect_errors": [], "passed": 0, "skipped": 0, "reverted": []}


def pytest_configure(config):
    name = os.environ.get("FP4MOE_MUTANT")
    _STATE["mutant"] = name or None
    if not name:
        return
    try:
        from fp4moe.gates.zoo.runner import load_mutants

        mutants = {m.name: m for m in load_mutants(os.environ.get("FP4MOE_ZOO_TARGET") or "reference",
                                                   os.environ.get("FP4MOE_MUTANT_FILE"))}
        if name not in mutants:
            raise LookupError(f"no such mutant {name!r}; known: {', '.join(mutants)}")
        mutants[name].apply(_MP)
    except BaseException as e:  # noqa: BLE001 -- the mutant's own code: any failure means "not applied"
        _MP.undo()
        _STATE["apply_error"] = runner.exception_line(e, ERROR_CHARS)
        _write()
        raise pytest.UsageError(f"zoo: mutant {name!r} could not be applied: {_STATE['apply_error']}") from None
    _STATE["applied"] = True
    _STATE["patches"] = _MP.patches


def pytest_collectreport(report):
    if report.failed:
        last = next((ln for ln in reversed(str(report.longrepr).strip().splitlines()) if ln.strip()), "")
        _STATE["collect_errors"].append(f"{report.nodeid or '<session>'}: {last.lstrip('E ').strip()}"[:300])


def pytest_runtest_logreport(report):
    if report.failed:
        _STATE["failed"].append(report.nodeid)
    elif report.when == "call" and report.passed:
        _STATE["passed"] += 1
    elif report.skipped:
        _STATE["skipped"] += 1


def pytest_sessionfinish(session, exitstatus):
    _STATE["exitstatus"] = int(exitstatus)
    if _STATE["applied"]:
        _STATE["reverted"] = _MP.reverted()
    _write()


def pytest_unconfigure(config):
    _MP.undo()


def _write():
    if _WRITE is not None:
        _WRITE(dict(_STATE, failed=sorted(set(_STATE["failed"]))))


def list_main() -> None:
    """Child entry (``fp4moe.gates.zoo.runner.list_mutants``): import a ``--mutant-file`` and record its
    mutants' names, or the one-line reason it could not be imported."""
    try:
        from fp4moe.gates.zoo.runner import load_mutants

        found = load_mutants(os.environ.get("FP4MOE_ZOO_TARGET") or "reference", os.environ["FP4MOE_MUTANT_FILE"])
        _WRITE(dict(mutants=[dict(name=str(m.name), origin=str(m.origin), description=str(m.description),
                                                          needs_shared=getattr(m, "needs_shared", None),
                                                          first_tests=[str(t) for t in getattr(m, "first_tests", ())])
                                             for m in found]))
    except BaseException as e:  # noqa: BLE001 -- a user's file: any failure is "cannot import"
        msg = str(e) if type(e).__name__ == "GateCannotRun" else f"importing it raised {runner.exception_line(e, ERROR_CHARS)}"
        _WRITE(dict(error=msg.split(": ", 1)[-1] if msg.startswith("--mutant-file") else msg))
