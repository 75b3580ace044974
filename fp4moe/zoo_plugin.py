"""pytest plugin loaded by ``fp4moe-gate zoo`` (``-p fp4moe.zoo_plugin``) in each child run.

``FP4MOE_MUTANT`` names the mutant to apply (from ``fp4moe.mutants`` or from the file in
``FP4MOE_MUTANT_FILE``); ``FP4MOE_ZOO_REPORT`` is where the run writes the ids of the tests
that failed or errored.
"""

from __future__ import annotations

import json
import os

import pytest

_MP = pytest.MonkeyPatch()
_FAILED: list[str] = []


def pytest_configure(config):
    name = os.environ.get("FP4MOE_MUTANT")
    if not name:
        return
    from fp4moe.zoo import load_mutants

    mutants = {m.name: m for m in load_mutants(os.environ.get("FP4MOE_MUTANT_FILE"))}
    if name not in mutants:
        raise pytest.UsageError(f"FP4MOE_MUTANT={name!r}: no such mutant; known: {', '.join(mutants)}")
    mutants[name].apply(_MP)


def pytest_runtest_logreport(report):
    if report.failed:
        _FAILED.append(report.nodeid)


def pytest_unconfigure(config):
    _MP.undo()
    path = os.environ.get("FP4MOE_ZOO_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"failed": sorted(set(_FAILED))}, f)
