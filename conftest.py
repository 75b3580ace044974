"""Hardware tiers for the whole suite.

Markers name what a test needs (gpu, rocm, gfx950, aiter, perf, e2e, shared). A test whose
need is missing is skipped *with the reason* (e.g. the exception that ``import aiter``
raised). ``--require gfx950,aiter`` (or ``FP4MOE_REQUIRE``) turns a missing capability into a
usage error before any test runs: a runner that lost its GPU or its aiter goes red, not green.
The session ends with one block saying which tiers ran and which were skipped, and why.
On a ``--dist loadgroup`` worker, :class:`_XdistGroupIds` gives each ``xdist_group`` test the id
suffix pytest-xdist groups by, which pytest >= 9.2 would otherwise drop.
"""

from __future__ import annotations

import os
import sys
from collections import Counter, defaultdict

import pytest


def _bytecode_outside_the_checkout() -> None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's CPU images set it, to keep checkouts
    clean), every run would recompile the package and re-rewrite every test module's asserts:
    ~2 s of each CPU-tier run on 2 cores. The suite's own process then caches bytecode under
    ``${XDG_CACHE_HOME:-~/.cache}/fp4moe/pycache`` (``sys.pycache_prefix``; nothing is written
    into the checkout or any tree under test, whose children keep the environment as it is).
    ``FP4MOE_PYCACHE=0`` keeps the setting as inherited."""
    if not sys.dont_write_bytecode or sys.pycache_prefix or os.environ.get("FP4MOE_PYCACHE", "1") == "0":
        return
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(cache, "fp4moe", "pycache")
    sys.dont_write_bytecode = False


_bytecode_outside_the_checkout()  # before the package and the test modules are imported

from fp4moe.infra.capabilities import detect, parse_require, require_from_env  # noqa: E402
from fp4moe.targets import PROVABLE, capability_probes, prover  # noqa: E402

# marker -> capability it needs (perf timings need a GPU; e2e needs a live server)
MARKER_NEEDS = {
    "gpu": ("gpu",),
    "rocm": ("rocm",),
    "gfx950": ("gfx950",),
    "aiter": ("aiter",),
    "perf": ("gpu",),
    "e2e": ("server",),
    "shared": ("shared",),
    "sglang": ("sglang",),
}
TIER_ORDER = ("cpu", "gpu", "rocm", "gfx950", "aiter", "perf", "e2e", "shared", "sglang", "slow")


def pytest_addoption(parser):
    group = parser.getgroup("fp4moe", "fp4-moe-gate tiers")
    group.addoption(
        "--require",
        default=None,
        help="comma list of capabilities that must be present (gpu,cuda,rocm,gfx950,aiter,server,shared,sglang); "
        "missing ones fail the session before any test runs. Env: FP4MOE_REQUIRE",
    )
    group.addoption(
        "--server-url",
        default=os.environ.get("FP4MOE_SERVER_URL"),
        help="OpenAI-compatible completions server for e2e tests (env FP4MOE_SERVER_URL)",
    )
    group.addoption(
        "--slow",
        action="store_true",
        default=os.environ.get("FP4MOE_SLOW", "") not in ("", "0"),
        help="also run tests marked slow (CI runs them in a step of their own; env FP4MOE_SLOW=1)",
    )
    group.addoption("--server-model", default=os.environ.get("FP4MOE_SERVER_MODEL"), help="model name for e2e tests")


#: ``FP4MOE_WORKERS``: how many pytest-xdist workers a whole default run uses (0: one process)
WORKERS_ENV = "FP4MOE_WORKERS"


def _workers_by_default(config) -> None:
    """``python3 -m pytest`` with nothing selected runs on two pytest-xdist workers (a core
    dependency; where it is not installed, one process): the CPU tier is many small tests and two
    cores. A selection, ``-n``, ``-p no:xdist``, ``-x``, ``--pdb``, ``--collect-only`` or
    ``FP4MOE_WORKERS=0`` runs as asked (the zoo's and mutmut's child runs always select)."""
    opt, plugins = getattr(config, "option", None), getattr(config, "pluginmanager", None)
    if (opt is None or plugins is None or not plugins.hasplugin("xdist") or hasattr(config, "workerinput")
            or getattr(opt, "numprocesses", 0) is not None or opt.maxfail or opt.usepdb or opt.collectonly
            or config.args_source != pytest.Config.ArgsSource.TESTPATHS):
        return
    n = min(int(os.environ.get(WORKERS_ENV, "2") or 0), len(os.sched_getaffinity(0)))
    if n > 1:
        opt.numprocesses, opt.dist, opt.tx = n, "loadgroup", ["popen"] * n


def pytest_configure(config):
    import torch

    _workers_by_default(config)

    # The CPU tier is many small ops: one intra-op thread avoids OpenMP spin-wait contention
    # (seen here: 30x slower per test with 2 threads on a loaded 2-core machine). The children the
    # tests start (gates, their children) inherit it unless OMP_NUM_THREADS is set: the default
    # suite took 67 s (97 CPU s) with children at two threads, 58 s (82 CPU s) at one, quiet 2 cores.
    threads = os.environ.get("FP4MOE_TORCH_THREADS", "1")
    torch.set_num_threads(int(threads))
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    option = config.getoption("--require")
    source, value = ("--require", option) if option else ("FP4MOE_REQUIRE", require_from_env())
    try:
        required = parse_require(value, source)
    except ValueError as e:
        raise pytest.UsageError(str(e))
    caps = detect(server_url=config.getoption("--server-url"), probes=capability_probes())
    config._fp4moe_caps = caps
    missing = [c for c in required if not caps.has(c)]
    if missing:
        lines = "\n".join(f"  - {c}: {caps.reason(c)}" for c in missing)
        raise pytest.UsageError(f"required capabilities missing ({source}={value}):\n{lines}")
    # a required target capability is proven, not only found: `--require sglang` has a child
    # import SGLang's FP4 MoE modules (a missing package is named with its extra). The proof runs
    # beside collection and is joined before the first test (pytest_runtestloop): a failed one
    # ends the session with the same usage error, no test run. Under pytest-xdist the controller
    # proves it, joined before it hands out a test; a worker (same interpreter and environment)
    # only finds it (files read). A worker is told by its config (``workerinput``), never by
    # PYTEST_XDIST_WORKER, which a test's own child pytest inherits from the worker it runs on.
    provable = () if hasattr(config, "workerinput") else [c for c in required if c in PROVABLE]
    config._fp4moe_proofs = _Proofs(provable, f"{source}={value}") if provable else None
    config.pluginmanager.register(_XdistGroupIds(), "fp4moe-xdist-group-ids")
    config._fp4moe_tiers = defaultdict(Counter)
    config._fp4moe_skip_reasons = {}


class _Proofs:
    """The ``--require``d capabilities' proofs (:func:`fp4moe.targets.prover`), run on a thread of
    their own from the configure step; :meth:`join` waits for them and raises the usage error."""

    def __init__(self, names, what: str):
        import threading

        self.names, self.what, self.why = tuple(names), what, {}
        self.proofs = {name: prover(name) for name in self.names}  # (their imports on this thread)
        self.thread = threading.Thread(target=self._run, name="fp4moe-require-proofs", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for name in self.names:
            try:
                proof = self.proofs[name]
                self.why[name] = proof() if proof is not None else None
            except BaseException as e:  # a proof that raised proved nothing
                self.why[name] = f"its proof raised {type(e).__name__}: {e}"

    def join(self) -> None:
        self.thread.join()
        failed = [(n, self.why.get(n, "its proof never ended")) for n in self.names if self.why.get(n, "") is not None]
        if failed:
            lines = "\n".join(f"  - {n}: {why}" for n, why in failed)
            raise pytest.UsageError(f"required capabilities missing ({self.what}):\n{lines}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Before the first test (xdist's controller: before it hands one out): the proofs joined."""
    proofs, session.config._fp4moe_proofs = getattr(session.config, "_fp4moe_proofs", None), None
    if proofs is not None:
        proofs.join()


def pytest_unconfigure(config):
    proofs = getattr(config, "_fp4moe_proofs", None)
    if proofs is not None:  # a session that ended before its first test: its proof's child ends first
        proofs.thread.join()


def _tiers_of(item) -> list[str]:
    tiers = [m.name for m in item.iter_markers() if m.name in TIER_ORDER]
    return tiers or ["cpu"]


SLOW_REASON = "[slow tier] heavy case outside the 60 s CPU tier: run with --slow (CI runs `pytest --slow -m slow`)"


def _tier_label(markers: set[str]) -> str:
    """A test's one tier label: its first hardware marker in TIER_ORDER (``gfx950`` before
    ``aiter``, ``gpu`` before ``perf``), fixed by the test, never by which capability this
    machine lacks nor by set order, so two CI logs of one test diff cleanly."""
    return next(t for t in TIER_ORDER if t in markers)


def pytest_collection_modifyitems(config, items):
    caps = config._fp4moe_caps
    run_slow = config.getoption("--slow")
    for item in items:
        if not run_slow and item.get_closest_marker("slow") is not None:
            config._fp4moe_skip_reasons.setdefault("slow", SLOW_REASON)
            item.add_marker(pytest.mark.skip(reason=SLOW_REASON))
            continue
        markers = {m.name for m in item.iter_markers()}
        missing = [(marker, cap) for marker in TIER_ORDER if marker in markers for cap in MARKER_NEEDS.get(marker, ())
                   if not caps.has(cap)]
        if not missing:
            continue
        for marker, cap in missing:
            config._fp4moe_skip_reasons.setdefault(marker, caps.reason(cap))
        cap = missing[0][1]  # the first missing need in TIER_ORDER: the same on every run of this machine
        item.add_marker(pytest.mark.skip(reason=f"[{_tier_label(markers & set(MARKER_NEEDS))} tier] {cap}: {caps.reason(cap)}"))


class _XdistGroupIds:
    """``--dist loadgroup`` on pytest >= 9.2: pytest-xdist 3.8 names a test's ``xdist_group`` by
    appending ``@GROUP`` to its node id through ``item._nodeid``, which pytest 9.2's structured
    ids (``item._id``) no longer read, so every group was silently spread over the workers
    (pytest-dev/pytest-xdist#1386) and a session child run shared by a group ran once per worker.
    On a loadgroup worker, an item whose id lacks its group suffix gets it, as xdist means to."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
            return
        try:
            from _pytest.nodeid import NodeId  # pytest >= 9.2, where the suffix is lost
        except ImportError:
            return  # an older pytest reads _nodeid: xdist's own suffix holds

        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            suffix = "@" + "_".join(names)
            if names and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
                item._id = NodeId.parse(item.nodeid + suffix)


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        item_tiers = getattr(report, "_fp4moe_tiers", None)
        if item_tiers is None:
            return
        for t in item_tiers:
            _SESSION_COUNTS[t][report.outcome] += 1


_SESSION_COUNTS: dict = defaultdict(Counter)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep._fp4moe_tiers = _tiers_of(item)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    caps = getattr(config, "_fp4moe_caps", None)
    if caps is None:
        return
    tr = terminalreporter
    tr.section("fp4-moe-gate tiers")
    tr.write_line(f"device: {caps.device_name}  arch: {caps.arch or '-'}")
    for tier in TIER_ORDER:
        c = _SESSION_COUNTS.get(tier, Counter())
        ran = c.get("passed", 0) + c.get("failed", 0)
        skipped = c.get("skipped", 0)
        if ran:
            status = f"RAN      {c.get('passed', 0)} passed, {c.get('failed', 0)} failed"
            if skipped:
                status += f", {skipped} skipped"
        elif skipped:
            why = config._fp4moe_skip_reasons.get(tier) or "see the skip reasons above"
            status = f"SKIPPED  {skipped} tests: {why}"
        else:
            status = "none selected"
        tr.write_line(f"  {tier:<7} {status}")
