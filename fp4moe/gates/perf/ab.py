"""``fp4moe-gate perf ab --base PATH --head PATH``: base and head timed in one job.

Each PATH is a checkout (a directory with ``fp4moe/__init__.py``: its worker runs this
interpreter isolated (:data:`BOOTSTRAP`), imports ``fp4moe`` only from the checkout and reports
every ``fp4moe`` file it loaded, each checked to lie inside it) or an
environment (a virtualenv directory with ``bin/python``, or a Python executable: its worker
imports whatever that environment has installed, e.g. another aiter or SGLang release). One
long-lived worker per side (``fp4moe.gates.perf.child.ab_worker``, through ``fp4moe.gates.perf.worker.Worker``:
own process group, a time limit on every request, killed with the gate) builds the selected
benchmarks; the gate then times them in interleaved pairs whose order is drawn at random
(``numpy.random.default_rng(seed)``), both sides on the same device, one call at a time.

Decision: per benchmark, the sequential rule of ``fp4moe.stats.sequential`` (looks every
``--step`` pairs up to ``--max-rounds``, Pocock alpha spending, the compare's significance AND
threshold rule at each look, futility stop once a regression of the threshold's size is
excluded). Exit 0: nothing regressed; 1: at least one benchmark regressed; 2: could not judge
(a worker failed or timed out, the sides differ in device, timer or a benchmark's shape, a base
benchmark is missing from head, a bad path). The command line is ``fp4moe.commands.perf``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fp4moe.gates.perf.worker import Worker, WorkerError
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.runner import MAX_TIMEOUT_S

SETUP_TIMEOUT_S = 900.0  # building workloads, compiling kernels, warm-up (hello included)
REQUEST_TIMEOUT_S = 120.0  # one timed call
PROBE_TIMEOUT_S = 60.0  # an environment's interpreter asked which worker module it has
#: the workload module a side provides (its ``registry(device)``: benchmark name -> builder of
#: ``(fn, inputs, meta)``), newest first. The second name is where it lived before every child
#: entry sat under a ``child/`` folder, the third where it lived before the package was laid out by
#: floor (commit 4cf2325 and earlier): an older checkout can still be the base. The timing is never
#: the side's: both workers run the gate's :data:`TIMING_WORKER` with the gate's ``timer.py``.
WORKER_MODULES = ("fp4moe.gates.perf.child.ab_worker", "fp4moe.gates.perf.ab_worker", "fp4moe.perf.ab_worker")
#: the gate's worker entry point and clock, run by path in each side's interpreter
TIMING_WORKER = str(Path(__file__).resolve().parent / "child" / "timing_worker.py")
GATE_TIMER = str(Path(__file__).resolve().parent / "timer.py")
#: Caps on the sequential design (``--max-rounds``, ``--step``): beyond them the look table and
#: the samples outgrow any CI job (``--max-rounds 100000000 --step 1`` was a MemoryError).
MAX_ROUNDS = 100_000
MAX_LOOKS = 1_000
#: A worker starts through this bootstrap (``python -I -B -c BOOTSTRAP ROOT WORKER_PY TIMER_PY
#: FD_ENV SIDES_JSON``): isolated mode drops PYTHONPATH, the user site and the
#: current folder. For a checkout (ROOT not empty) the import finders that would serve ``fp4moe``
#: from anywhere but the checkout (an editable install's meta-path finder, a ``.pth`` path entry)
#: are removed and the checkout goes first on ``sys.path``; a checkout that lacks a module then
#: fails its import instead of borrowing the gate's copy. The caller's ``PYTHONPATH`` entries come
#: back (as ``$FP4MOE_AB_EXTRA_PATH``) for third-party packages only: an entry holding ``fp4moe``
#: is dropped. For an environment (ROOT empty) its installed ``fp4moe`` serves. Then the gate's
#: worker file runs by path.
BOOTSTRAP = """\
import os, sys
root, worker = sys.argv[1], sys.argv[2]
def _serves_elsewhere(finder):
    if type(finder).__module__.startswith(("_frozen_importlib", "_distutils_hack")):
        return False
    try:
        spec = finder.find_spec("fp4moe", None)
    except Exception:
        return True
    return spec is not None
if root:
    root = os.path.realpath(root)
    sys.meta_path[:] = [f for f in sys.meta_path if not _serves_elsewhere(f)]
    extra = [p for p in os.environ.get("FP4MOE_AB_EXTRA_PATH", "").split(os.pathsep) if p]
    sys.path[:] = [root] + [p for p in extra + sys.path if p and not os.path.exists(os.path.join(p, "fp4moe"))]
sys.argv[:] = [worker] + sys.argv[3:]
import runpy
runpy.run_path(worker, run_name="__main__")
"""
#: keys whose difference makes two sides incomparable (the same list as the compare's, for A/B)
SAME_KEYS = ("timer", "gpu_name", "gpu_arch", "shape", "hidden_pad", "intermediate_pad")


@dataclass
class Side:
    label: str  # "base" / "head"
    path: str
    cmd: list
    env: dict
    cwd: str | None
    root: Path | None  # checkout whose fp4moe the worker must import
    module: str = WORKER_MODULES[0]  # the side's workload module


#: the variable a worker's ``aiter-triton:*`` benchmarks load their aiter tree from
AITER_SRC_ENV = "FP4MOE_AITER_SRC"


def resolve_aiter_src(label: str, tree: str) -> str:
    """``--{label}-aiter-src TREE``: the aiter package directory (or its parent), resolved."""
    p = Path(tree).expanduser()
    for d in (p, p / "aiter"):
        if (d / "ops" / "triton" / "moe").is_dir():
            return str(d.resolve())
    raise GateCannotRun(f"--{label}-aiter-src {tree}: no ops/triton/moe/ there (pass aiter's package directory)")


def resolve_side(label: str, path: str, aiter_src: str | None = None) -> Side:
    """A checkout, a virtualenv directory or a Python executable; anything else names the option.
    ``aiter_src``: this side's aiter tree, put into its worker's ``$FP4MOE_AITER_SRC``."""
    p = Path(path).expanduser()
    env = dict(os.environ)
    env["FP4MOE_AB_EXTRA_PATH"] = env.pop("PYTHONPATH", "")  # third-party packages only (see BOOTSTRAP)
    env["PYTHONUNBUFFERED"] = "1"
    if aiter_src is not None:
        env[AITER_SRC_ENV] = resolve_aiter_src(label, aiter_src)
    if p.is_dir() and (p / "fp4moe" / "__init__.py").is_file():
        root = p.resolve()
        found = [m for m in WORKER_MODULES if (p / (m.replace(".", "/") + ".py")).is_file()]
        if not found:
            raise GateCannotRun(f"--{label} {path}: a checkout without a perf worker (none of "
                                f"{', '.join(WORKER_MODULES)}): nothing there to time")
        return Side(label, path, worker_cmd(sys.executable, [(label, str(root), found[0])]), env, str(root), root, found[0])
    for exe in (p / "bin" / "python", p / "bin" / "python3"):
        if p.is_dir() and exe.is_file():
            module = _env_worker(label, path, str(exe), env)
            return Side(label, path, worker_cmd(str(exe), [(label, "", module)]), env, None, None, module)
    if p.is_file() and os.access(p, os.X_OK):
        module = _env_worker(label, path, str(p), env)
        return Side(label, path, worker_cmd(str(p), [(label, "", module)]), env, None, None, module)
    raise GateCannotRun(
        f"--{label} {path}: not a checkout (no fp4moe/__init__.py), a virtualenv (no bin/python) or a Python executable"
    )


def worker_cmd(python: str, specs: list[tuple[str, str, str]]) -> list[str]:
    """The command of a worker: the GATE's timing worker in the side's interpreter; ``specs``:
    the sides it serves, each (label, its checkout or "" for an environment's install, its
    workload module); the first side's checkout is the one the bootstrap isolates."""
    return [python, "-I", "-B", "-c", BOOTSTRAP, specs[0][1], TIMING_WORKER, GATE_TIMER, Worker.FD_ENV,
            json.dumps([list(x) for x in specs])]


def _env_worker(label: str, path: str, python: str, env: dict) -> str:
    """The worker module an environment's installed fp4moe has (the newest first), found by
    ``importlib.util.find_spec`` in that interpreter, with a time limit."""
    probe = ("import importlib.util as u\nfor m in %r:\n    try:\n        ok = u.find_spec(m) is not None\n"
             "    except ImportError:\n        ok = False\n    if ok:\n        print(m)\n        break\n") % (WORKER_MODULES,)
    try:
        r = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateCannotRun(f"--{label} {path}: cannot ask {python} for its fp4moe perf worker: {e}") from None
    found = r.stdout.strip().splitlines()
    if r.returncode != 0 or not found or found[-1] not in WORKER_MODULES:
        raise GateCannotRun(f"--{label} {path}: its fp4moe has no perf worker (none of {', '.join(WORKER_MODULES)})")
    return found[-1]


def _start(side: Side, setup_timeout: float, device: str, scratch: Path, compile_cache: str | None = None) -> tuple[View, dict]:
    """One side's worker, started once for the whole run (:func:`_spawn`), and its hello."""
    view = _spawn(side, device, scratch, compile_cache)
    return view, _hello(view, side, setup_timeout)


def _spawn(side: Side, device: str, scratch: Path, compile_cache: str | None = None) -> View:
    """One side's worker, not yet greeted: TMPDIR, HOME and every compiler cache in ``scratch``
    (:func:`worker_env`); on a CPU pinned to the one core both sides share."""
    cpu = shared_cpu() if device == "cpu" else None
    w = _pinned(Worker(side.cmd, name=f"{side.label} worker ({side.path})", env=worker_env(side.env, scratch, cpu, compile_cache),
                       cwd=side.cwd), cpu)
    return View(w, side.label)


def _hello(view, side: Side, setup_timeout: float) -> dict:
    try:
        hello = view.request({"op": "hello"}, timeout_s=setup_timeout)
    except BaseException:
        view.close(kill=True)
        raise
    if side.root is not None and Path(str(hello.get("fp4moe"))).resolve() != side.root / "fp4moe":
        view.close(kill=True)
        raise GateCannotRun(f"--{side.label} {side.path}: its worker imported fp4moe from {hello.get('fp4moe')}, not from the checkout")
    return hello


def _start_shared(sides: list[Side], setup_timeout: float, device: str, scratch: Path,
                  compile_cache: str | None = None) -> list[tuple]:
    """ONE worker serving both checkouts (``timing_worker.Sides``): [(view, hello)] per side."""
    cpu = shared_cpu() if device == "cpu" else None
    cmd = worker_cmd(sys.executable, [(s.label, str(s.root), s.module) for s in sides])
    w = _pinned(Worker(cmd, name=f"shared worker ({sides[0].path} | {sides[1].path})",
                       env=worker_env(sides[0].env, scratch, cpu, compile_cache), cwd=sides[0].cwd), cpu)
    views = [View(w, s.label) for s in sides]
    return [(v, _hello(v, s, setup_timeout)) for v, s in zip(views, sides)]


def _pinned(w: Worker, cpu: int | None) -> Worker:
    """``w`` pinned to ``cpu`` (set on its pid before it has started a thread); None: unpinned."""
    if cpu is not None:
        try:
            os.sched_setaffinity(w.proc.pid, {cpu})
        except OSError:  # it is gone already: its first request says why
            pass
    return w


class View:
    """One side of a worker (a shared worker serves two): its requests carry the side's label;
    a ``WorkerError`` of a shared worker says which side's request it was."""

    def __init__(self, worker: Worker, label: str):
        self.worker, self.label = worker, label
        self.shared = not worker.name.startswith(label)
        self.name = f"{label} side of the {worker.name}" if self.shared else worker.name

    def request(self, req: dict, timeout_s: float) -> dict:
        self.send(req)
        return self.receive(req.get("op"), timeout_s)

    def send(self, req: dict) -> None:
        with self._named():
            self.worker.send({**req, "side": self.label})

    def receive(self, op, timeout_s: float) -> dict:
        with self._named():
            return self.worker.receive(op, timeout_s=timeout_s)

    @contextlib.contextmanager
    def _named(self):
        try:
            yield
        except WorkerError as e:
            if self.shared:
                raise WorkerError(f"{self.label} side: {e}") from None
            raise

    def close(self, kill: bool = False) -> None:
        self.worker.close(kill=kill)


#: caches a worker's code may fill, besides ``runner.CACHE_VARS``: torch's extension builds and
#: the CUDA driver's JIT cache (``~/.nv/ComputeCache`` by default)
WORKER_CACHE_VARS = ("TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH")


def shared_cpu() -> int:
    """The one core both sides' workers of a CPU run are pinned to: the highest this process may
    run on (the gate's own processes mostly wait while a worker times)."""
    return max(os.sched_getaffinity(0))


#: the caches ``--compile-cache`` keeps between runs: compiled kernels, keyed by their source
COMPILE_CACHE_VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH")


def worker_env(env: dict, scratch: Path, cpu: int | None = None, compile_cache: str | None = None) -> dict:
    """A side's environment with TMPDIR, HOME and every cache inside ``scratch``, except the
    kernel compile caches when ``compile_cache`` names a folder to keep them in. ``cpu``: a CPU
    run's worker (pinned to that core by :func:`_pinned`) gets one OpenMP thread."""
    from fp4moe.infra.runner import CACHE_VARS

    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / ".home").mkdir(exist_ok=True)
    out = dict(env, TMPDIR=str(scratch), HOME=str(scratch / ".home"))
    out.update({k: str(scratch / ".cache" / k.lower()) for k in (*CACHE_VARS, *WORKER_CACHE_VARS)})
    if compile_cache is not None:
        out.update({k: str(Path(compile_cache).resolve() / k.lower()) for k in COMPILE_CACHE_VARS})
    if cpu is not None:
        out["OMP_NUM_THREADS"] = "1"
    return out


def check_loaded(side: Side, reply: dict) -> list[str]:
    """The ``fp4moe`` files a checkout side's worker says it loaded, all inside that checkout;
    GateCannotRun names the first one that is not;
    the gate's own worker reports them whatever the checkout's age."""
    loaded = reply.get("loaded")
    if side.root is None:
        return list(loaded) if isinstance(loaded, list) else []
    if not isinstance(loaded, list) or not all(isinstance(f, str) for f in loaded):
        raise GateCannotRun(f"--{side.label} {side.path}: its worker did not say which fp4moe files it loaded")
    for f in loaded:
        if side.root not in Path(f).resolve().parents:
            raise GateCannotRun(f"--{side.label} {side.path}: its worker loaded {f}, outside the checkout")
    return loaded


def comparability(base_meta: dict, head_meta: dict) -> tuple[list[str], list[str], list[str]]:
    """(problems, only in base, only in head) of the two sides' benchmark metadata."""
    problems = []
    for name in sorted(set(base_meta) & set(head_meta)):
        for key in SAME_KEYS:
            b, h = base_meta[name].get(key), head_meta[name].get(key)
            if b != h:
                problems.append(f"{name}: {key} differs (base {b!r}, head {h!r})")
    return problems, sorted(set(base_meta) - set(head_meta)), sorted(set(head_meta) - set(base_meta))


def _seconds(w: Worker, reply: dict) -> float:
    """A timed call's seconds: a finite positive number, never a bool or a string the worker's
    code made up (a forged ``true`` would be 1 s)."""
    v = reply.get("seconds") if isinstance(reply, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
        raise GateCannotRun(f"{w.name}: answered seconds={v!r}, not a positive number of seconds")
    return float(v)


def time_pairs(base, head, name: str, rng, counter: list, timeout_s: float, *, probe=None,
               clock_samples: dict | None = None):
    """``sample(n)`` for ``fp4moe.stats.sequential.run_sequential``: n interleaved pairs, order
    drawn per pair, both sides on the same input set. ``probe``
    (``fp4moe.gates.perf.clocks.ClockProbe``): one clock sample right after each arm's first
    call of the look, into ``clock_samples['base'|'head']``."""

    def sample(n: int):
        import numpy as np

        b, h = np.empty(n), np.empty(n)
        for j in range(n):
            req = {"op": "run", "name": name, "index": counter[0]}
            counter[0] += 1
            order = ((head, h, "head"), (base, b, "base")) if rng.random() < 0.5 else ((base, b, "base"), (head, h, "head"))
            for w, out, arm in order:
                out[j] = _seconds(w, w.request(req, timeout_s=timeout_s))
                if probe is not None and j == 0:
                    clock_samples[arm].append(probe.sample())
        return b, h

    return sample


@dataclass
class AbOptions:
    """What to time and how to decide (the command line's options, ``fp4moe.commands.perf``)."""

    base: str
    head: str
    benchmarks: str = ""  # comma list of fnmatch patterns; empty: all of the device's
    device: str | None = None  # default: cuda when visible, else cpu
    threshold: str = "5%"
    alpha: float | str = 0.01
    first: int = 10
    step: int = 10
    max_rounds: int = 100
    seed: int = 0
    timeout: float = REQUEST_TIMEOUT_S
    setup_timeout: float = SETUP_TIMEOUT_S
    base_aiter_src: str | None = None  # each side's aiter tree for aiter-triton:* ($FP4MOE_AITER_SRC)
    head_aiter_src: str | None = None
    workers: str = "auto"  # "shared": one worker serves both checkouts; "separate"; "auto": shared on a CPU
    clocks: str = "auto"  # "auto": sample clocks when an smi tool is on PATH; "off"
    thresholds: dict | None = None  # benchmark -> calibrated threshold (``perf calibrate``); else --threshold
    family: str = "holm"  # "holm": the run's alpha split over its benchmarks (Bonferroni: Holm's first step); "none"
    compile_cache: str | None = None  # a folder keeping the workers' kernel compile caches between runs; None: scratch


@dataclass
class AbResult:
    device: str
    design: object  # fp4moe.stats.sequential.Design
    results: dict  # name -> fp4moe.stats.sequential.SequentialResult
    only_base: list
    only_head: list
    base_hello: dict
    head_hello: dict
    base_meta: dict
    head_meta: dict
    clocks: dict | None = None  # {"tool", "base": summary, "head": summary, "samples": {...}}
    workers: str = "separate"

    @property
    def regressed(self) -> list[str]:
        from fp4moe.stats.compare import REGRESSED

        return [n for n, r in self.results.items() if r.verdict == REGRESSED]

    def notes(self) -> list[str]:
        d = self.design
        notes = [f"`{n}`: {r.rounds} rounds per side ({'stopped early' if r.stopped_early else 'cap'})"
                 for n, r in self.results.items()]
        m = max(len(self.results), 1)
        notes.insert(0, f"sequential: looks at {list(d.looks)} rounds per side, {d.spending} alpha spending "
                        f"(one-sided alpha {d.alpha:g} for the run, {self.family_note(m)}); base {self.base_hello['fp4moe']} "
                        f"({len(self.base_hello.get('loaded', []))} fp4moe files loaded), head {self.head_hello['fp4moe']} "
                        f"({len(self.head_hello.get('loaded', []))} fp4moe files loaded); device {self.device}, timer "
                        f"{next(iter(self.base_meta.values())).get('timer')}")
        return notes

    family: str = "holm"

    def family_note(self, m: int) -> str:
        return (f"{self.design.alpha / m:.3g} per benchmark over {m} (family-wise, Bonferroni)" if self.family == "holm"
                else "per benchmark, no family-wise control")

    def to_dict(self) -> dict:
        d = self.design
        return {"device": self.device,
                "design": {"looks": list(d.looks), "alpha": d.alpha, "threshold": d.threshold, "spending": d.spending,
                           "nominal": list(d.nominal), "beta": d.beta},
                "results": {n: r.to_dict() for n, r in self.results.items()}, "only_in_base": self.only_base,
                "only_in_head": self.only_head, "base_meta": self.base_meta, "head_meta": self.head_meta,
                "base_loaded": self.base_hello.get("loaded", []), "head_loaded": self.head_hello.get("loaded", []),
                "clocks": self.clocks, "workers": self.workers, "family": self.family}


def design_of(opts: AbOptions):
    """The sequential design of ``opts``, its bounds checked (ValueError naming the option)."""
    from fp4moe.stats import sequential
    from fp4moe.stats.compare import parse_alpha, parse_threshold

    if not 1 <= opts.step:
        raise ValueError(f"--step {opts.step}: must be >= 1 round")
    if not opts.max_rounds <= MAX_ROUNDS:
        raise ValueError(f"--max-rounds {opts.max_rounds}: at most {MAX_ROUNDS} rounds per side")
    if (opts.max_rounds - opts.first) // opts.step + 1 > MAX_LOOKS:
        raise ValueError(f"--max-rounds {opts.max_rounds} --step {opts.step}: more than {MAX_LOOKS} looks; raise --step")
    design = sequential.make_design(first=opts.first, step=opts.step, max_rounds=opts.max_rounds,
                                    alpha=parse_alpha(opts.alpha), threshold=parse_threshold(opts.threshold))
    for name, v in (("--timeout", opts.timeout), ("--setup-timeout", opts.setup_timeout)):
        if not 0 < v <= MAX_TIMEOUT_S:  # False for nan too
            raise ValueError(f"{name} {v!r}: must be a positive number of seconds, at most {MAX_TIMEOUT_S:.0f}")
    return design


def _check_choices(opts: AbOptions) -> None:
    for option, value, allowed in (("--family", opts.family, ("holm", "none")),
                                   ("--workers", opts.workers, ("auto", "shared", "separate")),
                                   ("--clocks", opts.clocks, ("auto", "off"))):
        if value not in allowed:
            raise ValueError(f"{option} {value!r}: one of {', '.join(allowed)}")
    if opts.compile_cache is not None:  # a folder, made now: a file there would be no cache, silently
        try:
            Path(opts.compile_cache).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--compile-cache {opts.compile_cache}: not a folder that can be made ({e.strerror})") from None


def _start_views(sides: list[Side], shared: bool, opts: AbOptions, device: str, scratch: Path, views: list) -> list:
    """Start the worker(s), fill ``views`` (base, head; closed by the caller whatever happens),
    set both sides up: [(hello, setup)] per side."""
    if shared:
        started = _start_shared(sides, opts.setup_timeout, device, scratch / "shared", opts.compile_cache)
        views.extend(v for v, _ in started)
    else:  # two workers: both start, then both set up, side by side (imports and compiles overlap)
        views.extend(_spawn(side, device, scratch / side.label, opts.compile_cache) for side in sides)
        started = [(v, _hello(v, side, opts.setup_timeout)) for v, side in zip(views, sides)]
    patterns = [p.strip() for p in opts.benchmarks.split(",") if p.strip()]
    request = {"op": "setup", "device": device, "patterns": patterns}
    deadline = time.monotonic() + opts.setup_timeout
    if not shared:  # each worker builds its side at once; a shared one answers one request at a time
        for view, _ in started:
            view.send(request)
    setups = []
    for side, (view, hello) in zip(sides, started):
        if shared:
            view.send(request)
        setup = view.receive("setup", max(deadline - time.monotonic(), 0.001))
        hello["loaded"] = check_loaded(side, setup)
        setups.append((hello, setup))
    return setups


def _common(opts: AbOptions, bs: dict, hs: dict) -> tuple[list, list, set]:
    if not bs["benchmarks"]:
        raise GateCannotRun(f"--benchmarks {opts.benchmarks!r} selects nothing on the base; it has: {', '.join(bs['available'])}")
    problems, only_base, only_head = comparability(bs["benchmarks"], hs["benchmarks"])
    if problems:
        raise GateCannotRun("base and head are not comparable: " + "; ".join(problems))
    common = set(bs["benchmarks"]) & set(hs["benchmarks"])
    if not common:
        raise GateCannotRun(f"no benchmark in common: base {sorted(bs['benchmarks'])}, head {sorted(hs['benchmarks'])}")
    return only_base, only_head, common


def run_ab(opts: AbOptions, *, log=print) -> AbResult:
    """Start the worker(s), build the selection for each side, time every common benchmark in
    interleaved pairs until the sequential rule decides (at alpha / m each with ``--family
    holm``, at its calibrated threshold with ``--thresholds``). GateCannotRun on anything that
    stops a verdict (a worker failing or timing out, incomparable sides, nothing in common, arms
    that ran at different clocks)."""
    import numpy as np
    import torch

    from fp4moe.gates.perf import clocks
    from fp4moe.stats import sequential

    design = design_of(opts)
    _check_choices(opts)
    device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    probe = clocks.ClockProbe.find() if opts.clocks == "auto" else None
    samples = {"base": [], "head": []}
    sides = [resolve_side("base", opts.base, opts.base_aiter_src), resolve_side("head", opts.head, opts.head_aiter_src)]
    can_share = all(s.root is not None for s in sides) and not (opts.base_aiter_src or opts.head_aiter_src)
    if opts.workers == "shared" and not can_share:
        raise ValueError("--workers shared: both sides must be checkouts, without --base-aiter-src/--head-aiter-src")
    shared = opts.workers == "shared" or (opts.workers == "auto" and device == "cpu" and can_share)
    scratch = Path(tempfile.mkdtemp(prefix="fp4moe-ab-"))
    views: list[View] = []
    try:
        (bh, bs), (hh, hs) = _start_views(sides, shared, opts, device, scratch, views)
        only_base, only_head, common = _common(opts, bs, hs)
        rng = np.random.default_rng(opts.seed)
        counter = [0]
        results = {}
        each = design.alpha / len(common) if opts.family == "holm" else design.alpha
        for name in sorted(common):
            thr = (opts.thresholds or {}).get(name, design.threshold)
            d = sequential.make_design(first=opts.first, step=opts.step, max_rounds=opts.max_rounds, alpha=each, threshold=thr)
            sample = time_pairs(views[0], views[1], name, rng, counter, opts.timeout, probe=probe, clock_samples=samples)
            res = results[name] = sequential.run_sequential(sample, d, name)
            c = res.comparison
            log(f"perf ab: {name}: {res.verdict} after {res.rounds} rounds per side, head/base {c.ratio:.3f} "
                f"[{c.ci_low:.3f}, {c.ci_high:.3f}], p(slower) {c.p_slower:.2g}")
        for side, v in zip(sides, views):
            check_loaded(side, v.request({"op": "quit"}, timeout_s=30))
    except WorkerError as e:
        raise GateCannotRun(str(e)) from None
    finally:
        for v in views:
            v.close()
        shutil.rmtree(scratch, ignore_errors=True)
    clock_record = None
    if probe is not None:
        clock_record = {"tool": probe.name, "base": clocks.summary(samples["base"]), "head": clocks.summary(samples["head"]),
                        "samples": samples}
        why = clocks.judge(samples["base"], samples["head"])
        if why:
            raise ArmsAtDifferentClocks(f"could not judge: the arms ran at different clocks: {why}", clock_record)
    return AbResult(device, design, results, only_base, only_head, bh, hh, bs["benchmarks"], hs["benchmarks"],
                    clock_record, "shared" if shared else "separate", opts.family)


class ArmsAtDifferentClocks(GateCannotRun):
    """Exit 2: the verdict would compare clocks, not code; ``record`` holds the samples."""

    def __init__(self, message: str, record: dict):
        super().__init__(message)
        self.record = record
