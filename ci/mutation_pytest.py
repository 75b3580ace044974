"""pytest plugin of the mutation run (``ci/mutation.py``; loaded by ``[tool.mutmut]``'s
``pytest_add_cli_args``): mutmut's coverage pass keeps to the test process, the machine is
probed once per run, tests that need a package this machine lacks are left out, and a test that
fails where the suite must be green (mutmut's coverage pass, its clean run) is named in a file.

Probed once: the suite's conftest probes the machine's tiers at every session start (~3 s:
the aiter import, SGLang's files). mutmut starts one session per mutant, forked from a
process that collected the suite once, so the first probe's answer is kept for the forks: the
machine does not change between mutants, and the probes are not code under measurement.

mutmut learns which tests reach which function by running the suite once with
``MUTANT_UNDER_TEST=stats``: each trampoline then records its hit, which needs mutmut's
configuration, read from ``pyproject.toml`` in the current folder. The suite's children (the
SGLang drive, perf workers, gate children) start in scratch folders and would crash reading it.
Their hits would be lost anyway (they are other processes), so in that pass the mode is moved
from the environment into the test process alone: children run the unmutated code. In a mutant's
own run the variable is left as it is, so a child imports the same mutant as its parent.

Failures named: mutmut runs its coverage pass and its clean run in a child of its fork server
whose output it drops, so a failing test there ends the run with "runner returned 1" and no
name. In those two runs (mode ``stats`` or no mutant) every failed test phase is appended to
``$FP4MOE_MUTATION_FAILURES`` (``ci/mutation.py`` sets it and quotes the first in its exit-2
line). A mutant's own run fails by design and writes nothing.
"""

from __future__ import annotations

import os

STATS_MODE = "stats"
#: ``ci/mutation.py`` names the file; the runs that must pass append one line per failed phase
FAILURES_ENV = "FP4MOE_MUTATION_FAILURES"
#: the mode this session started in (``pytest_configure`` moves ``stats`` out of the environment)
_session_mode: str | None = None


def _probe_once() -> None:
    from fp4moe.infra import capabilities

    if getattr(capabilities.detect, "probed_once", False):
        return
    probe, memo = capabilities.detect, {}

    def detect(server_url=None, shared_present=None, probes=None):
        key = (server_url, shared_present, tuple(sorted((k, getattr(v, "__qualname__", repr(v)))
                                                       for k, v in (probes or {}).items())))
        if key not in memo:
            memo[key] = probe(server_url=server_url, shared_present=shared_present, probes=probes)
        return memo[key]

    detect.probed_once = True
    capabilities.detect = detect


_probe_once()  # before the suite's conftest imports detect


def pytest_configure(config):
    # every session ends in pytest's gc.collect() x5 (unraisable-exception cleanup): over the
    # heap of torch and the suite, ~0.8 s of each mutant's run. Objects alive at the start of
    # a session (the forked server's modules) are moved out of the collector's sight (gc.freeze,
    # made for pre-fork servers): what a session creates is still collected.
    import gc

    gc.freeze()
    global _session_mode
    from mutmut.mutation.trampoline import get_mutant_under_test

    _session_mode = get_mutant_under_test()
    if os.environ.get("MUTANT_UNDER_TEST") != STATS_MODE:
        return
    from mutmut.mutation import trampoline

    trampoline.set_mutant_under_test(STATS_MODE)  # the process-local copy the trampolines read
    del os.environ["MUTANT_UNDER_TEST"]


#: tests that need an optional package this machine may lack; left out of the mutation run only
#: where it is absent (they fail there before judging anything, and mutmut needs a green suite)
NEEDS = {
    "matplotlib": ("tests/gates/perf/test_perf_cli.py::test_unchanged_passes_and_regression_fails_with_reports",),
}


#: ``ci/mutation.py --tests``: the run judges with these test paths only (comma list), in the
#: coverage pass and in every mutant's run alike; a mutant none of them reaches is "no tests"
SCOPE_ENV = "FP4MOE_MUTATION_TESTS"


def pytest_collection_modifyitems(config, items):
    import importlib.util

    drop = {t for pkg, tests in NEEDS.items() if importlib.util.find_spec(pkg) is None for t in tests}
    scope = tuple(p.strip().rstrip("/") for p in os.environ.get(SCOPE_ENV, "").split(",") if p.strip())

    def kept_item(nodeid: str) -> bool:
        path = nodeid.split("::", 1)[0]
        return nodeid not in drop and (not scope or any(path == p or path.startswith(p + "/") for p in scope))

    kept = [i for i in items if kept_item(i.nodeid.removeprefix("mutants/"))]
    if len(kept) == len(items):
        return
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept


def pytest_runtest_logreport(report):
    """A failed phase of a run that must pass (the coverage pass, the clean run): one line,
    ``nodeid (phase): first line of the failure``, appended to ``$FP4MOE_MUTATION_FAILURES``."""
    path = os.environ.get(FAILURES_ENV)
    if not report.failed or not path or _session_mode not in (STATS_MODE, ""):
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    text = [crash.message] if crash is not None else str(report.longrepr or "").strip().splitlines()
    cause = " ".join(next((ln for ln in text if ln.strip()), "no message").split())
    with open(path, "a") as f:
        f.write(f"{report.nodeid.removeprefix('mutants/')} ({report.when}): {cause[:300]}\n")
