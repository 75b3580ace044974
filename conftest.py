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

import atexit
import math
import os
import sys
from collections import Counter, defaultdict

import pytest


# Bytecode outside the checkout, for the suite's own processes, set before any test module is
# assertion-rewritten (a rewrite is cached only where bytecode may be written): where
# PYTHONDONTWRITEBYTECODE is set (this project's CPU images set it, to keep checkouts clean) every
# run would recompile the package and re-rewrite every test module. Bytecode then goes under
# ${XDG_CACHE_HOME:-~/.cache}/fp4moe/pycache (sys.pycache_prefix; nothing in the checkout or a
# tree under test, whose children keep the environment as it is); FP4MOE_PYCACHE=0 keeps it as is.
def outside_the_checkout() -> None:
    if not sys.dont_write_bytecode or sys.pycache_prefix or os.environ.get("FP4MOE_PYCACHE", "1") == "0":
        return
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(cache, "fp4moe", "pycache")
    sys.dont_write_bytecode = False


outside_the_checkout()

from fp4moe.infra.capabilities import Capabilities, detect, parse_require  # noqa: E402
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
        config._fp4moe_by_module = True  # pytest_xdist_make_scheduler


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """The default run's scheduling: ``loadgroup``, where a test outside any ``xdist_group`` goes
    with its module (``loadfile``), not alone. Alone, every one of ~2,700 small tests was a round
    trip to the controller (whose bookkeeping grows with the tests handed out: quadratic) and a
    module's fixtures were set up on both workers. A run asked for with ``-n``/``--dist`` (the slow
    tier's few heavy tests) keeps pytest-xdist's own."""
    if not getattr(config, "_fp4moe_by_module", False):
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return nodeid.split("::", 1)[0] if scope == nodeid else scope

    return ByModuleOrGroup(config, log)


def _controller(config) -> bool:
    """A pytest-xdist controller (``-n``, or :func:`_workers_by_default`): it hands the tests to
    its workers and runs none itself."""
    opt = getattr(config, "option", None)
    return (opt is not None and not hasattr(config, "workerinput") and not getattr(opt, "collectonly", False)
            and getattr(opt, "dist", "no") != "no" and bool(getattr(opt, "tx", None)))


def pytest_configure(config):
    _workers_by_default(config)
    if hasattr(config, "workerinput"):
        atexit.register(_worker_exit, config)

    # The CPU tier is many small ops: one intra-op thread avoids OpenMP spin-wait contention
    # (seen here: 30x slower per test with 2 threads on a loaded 2-core machine). The children the
    # tests start (gates, their children) inherit it unless OMP_NUM_THREADS is set: the default
    # suite took 67 s (97 CPU s) with children at two threads, 58 s (82 CPU s) at one, quiet 2 cores.
    threads = os.environ.get("FP4MOE_TORCH_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    option = config.getoption("--require")
    source, value = ("--require", option) if option else ("FP4MOE_REQUIRE", os.environ.get("FP4MOE_REQUIRE"))
    try:
        required = parse_require(value, source)
    except ValueError as e:
        raise pytest.UsageError(str(e))
    config._fp4moe_tiers = defaultdict(Counter)
    config._fp4moe_skip_reasons = {}
    config._fp4moe_grids = {}
    config._fp4moe_proofs = None
    if _controller(config) and not required:
        # nothing to check before the first test and no test to run here: the workers detect
        # (each imports torch, ~1.5 CPU s the controller spent before starting them) and tell
        # the tier block what they found (pytest_testnodedown)
        config._fp4moe_caps = None
        return
    import torch

    torch.set_num_threads(int(threads))
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


def pytest_sessionfinish(session):
    """A worker's findings (device, arch, why each tier was skipped) go back to its controller."""
    config = session.config
    out, caps = getattr(config, "workeroutput", None), getattr(config, "_fp4moe_caps", None)
    if out is not None and caps is not None:
        out["fp4moe_tiers"] = {"device": caps.device_name, "arch": caps.arch, "why": config._fp4moe_skip_reasons}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller's tier block: the first worker's device, every worker's skip reasons."""
    config = node.config
    found = getattr(node, "workeroutput", {}).get("fp4moe_tiers")
    if found is None or not hasattr(config, "_fp4moe_skip_reasons"):
        return
    if config._fp4moe_caps is None:
        config._fp4moe_caps = Capabilities(device_name=found["device"], arch=found["arch"])
    for tier, why in found["why"].items():
        config._fp4moe_skip_reasons.setdefault(tier, why)


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
    config._fp4moe_unconfigured = True


def _worker_exit(config):
    """A pytest-xdist worker whose session ended (its reports are with the controller) leaves
    without the interpreter's teardown: freeing its ~1M objects (torch, SciPy, the tests') took
    ~2.5 s at the end of every default run, the controller waiting for it. The exit handlers
    registered after this one (torch's, ...) have run (last in, first out) and pending
    ``weakref.finalize`` callbacks (a TemporaryDirectory's) run here; a worker that did not reach
    unconfigure (it crashed) exits as usual."""
    if getattr(config, "_fp4moe_unconfigured", False):
        import weakref

        weakref.finalize._exitfunc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _tiers_of(item) -> list[str]:
    tiers = [m.name for m in item.iter_markers() if m.name in TIER_ORDER]
    return tiers or ["cpu"]


SLOW_REASON = "[slow tier] heavy case outside the CPU tier: run with --slow (CI runs `pytest --slow -m slow`)"


def _tier_label(markers: set[str]) -> str:
    """A test's one tier label: its first hardware marker in TIER_ORDER (``gfx950`` before
    ``aiter``, ``gpu`` before ``perf``), fixed by the test, never by which capability this
    machine lacks nor by set order, so two CI logs of one test diff cleanly."""
    return next(t for t in TIER_ORDER if t in markers)


def _missing(markers: set[str], caps) -> list[tuple[str, str]]:
    """(marker, capability) for each need of ``markers`` this machine lacks, in TIER_ORDER."""
    return [(marker, cap) for marker in TIER_ORDER if marker in markers for cap in MARKER_NEEDS.get(marker, ())
            if not caps.has(cap)]


def _grid_values(mark) -> list:
    return list(mark.args[1] if len(mark.args) > 1 else mark.kwargs["argvalues"])


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc):
    """A test parametrized by its own ``@pytest.mark.parametrize`` whose tier this machine lacks
    (gfx950, aiter, ...) is collected as one case that stands for its grid: skipped with the
    tier's reason and the grid's size, counted as the grid in the tier block. Its cases would
    all skip, each costing every pytest-xdist worker its collection and the controller a report
    (the gfx950 kernel grid alone is 400). A slow test keeps its grid (the slow tier's split
    reads its ids from this run; so does a grid with a marked case), as does any test on a
    machine that has its tier."""
    config, definition = metafunc.config, metafunc.definition
    caps = getattr(config, "_fp4moe_caps", None)
    grid = [m for m in definition.own_markers if m.name == "parametrize"]
    if (caps is None or not grid or definition.get_closest_marker("slow") is not None
            or len(grid) != len(list(definition.iter_markers("parametrize")))  # a class's or module's too
            or any(m.kwargs.get("indirect") for m in grid)
            or not _missing({m.name for m in definition.iter_markers()}, caps)):
        return
    values = [_grid_values(m) for m in grid]
    if any(getattr(v, "marks", None) for vs in values for v in vs):  # pytest.param(..., marks=slow)
        return
    names = [n.strip() for m in grid for n in (m.args[0] if m.args else m.kwargs["argnames"]).split(",")]
    cases = math.prod(len(vs) for vs in values)
    definition.own_markers[:] = [m for m in definition.own_markers if m.name != "parametrize"]
    config._fp4moe_grids[definition.nodeid] = cases
    metafunc.parametrize(names, [(None,) * len(names)], ids=[f"grid-of-{cases}-uncollected"])


def pytest_collection_modifyitems(config, items):
    caps = config._fp4moe_caps
    run_slow = config.getoption("--slow")
    grids = getattr(config, "_fp4moe_grids", {})
    for item in items:
        if not run_slow and item.get_closest_marker("slow") is not None:
            config._fp4moe_skip_reasons.setdefault("slow", SLOW_REASON)
            item.add_marker(pytest.mark.skip(reason=SLOW_REASON))
            continue
        markers = {m.name for m in item.iter_markers()}
        missing = _missing(markers, caps)
        if not missing:
            continue
        for marker, cap in missing:
            config._fp4moe_skip_reasons.setdefault(marker, caps.reason(cap))
        cap = missing[0][1]  # the first missing need in TIER_ORDER: the same on every run of this machine
        reason = f"[{_tier_label(markers & set(MARKER_NEEDS))} tier] {cap}: {caps.reason(cap)}"
        cases = grids.get(item.nodeid.split("[", 1)[0]) if grids else None
        if cases is not None:
            item._fp4moe_cases = cases
            reason += f" (one case for its grid of {cases}, not collected)"
        item.add_marker(pytest.mark.skip(reason=reason))


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
            _SESSION_COUNTS[t][report.outcome] += getattr(report, "_fp4moe_cases", 1)


_SESSION_COUNTS: dict = defaultdict(Counter)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep._fp4moe_tiers = _tiers_of(item)
    if hasattr(item, "_fp4moe_cases"):  # one case standing for an uncollected grid
        rep._fp4moe_cases = item._fp4moe_cases


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not hasattr(config, "_fp4moe_skip_reasons"):  # configure never ran
        return
    caps = getattr(config, "_fp4moe_caps", None)
    tr = terminalreporter
    tr.section("fp4-moe-gate tiers")
    tr.write_line(f"device: {caps.device_name}  arch: {caps.arch or '-'}" if caps is not None
                  else "device: unknown (no pytest-xdist worker reported back)")
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
