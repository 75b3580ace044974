"""Load ROCm/aiter's Triton MXFP4 MoE modules from a source tree without running aiter/__init__.py.

aiter/__init__.py (and aiter/ops/__init__.py, aiter/ops/triton/__init__.py) import the JIT layer
that builds ROCm C++ extensions, so they cannot run on a CPU box. This loader installs a
``sys.meta_path`` finder for the ``aiter`` name space that

* creates every package (a directory in the tree) as a bare module object whose ``__path__``
  points into the tree; its ``__init__.py`` is NOT executed;
* loads plain ``.py`` modules from the tree unchanged (no aiter file is edited);
* substitutes the few stubs listed in ``PATCHES`` (one table: name, what, why).

Use (in a child process only: it fills ``sys.modules['aiter']``)::

    am = load_aiter_moe("/path/to/aiter")   # the directory that holds aiter's __init__.py
    am.a16w4.moe_gemm_a16w4(...)
    am.config_log   # which tuned config file / entry each GEMM call used

Call it before anything else imports ``aiter``; a second call with the same tree returns the
same object. Needs ``TRITON_INTERPRET=1`` on a CPU (``shims.install()`` is called for you).
A tree without a module or symbol the checks need raises :class:`AiterTreeError` (a
``GateCannotRun``: exit 2) naming the file and the symbol.

``--arch`` pins the AMD arch the tree's dispatch sees (``arch_info.get_arch()``, the stubbed
``chip_info.get_gfx()``): it selects the tuned config file (``configs/moe/{arch}-A8W4.json``)
and the arch branches of the heuristics; ``config_log`` names the file each call read.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

from fp4moe.infra.culprit import quote
from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.kernels import interp_fastpath
from fp4moe.targets.aiter.kernels import shims as interp_shims
from fp4moe.targets.aiter.patch import Patch

# -----------------------------------------------------------------------------------------
# The ONE table of stubs / patches. Every entry is applied by this module, nowhere else.
# -----------------------------------------------------------------------------------------


PATCHES = (
    Patch("aiter (+ every sub-package)", "bare package modules with __path__ into the tree; __init__.py not executed",
          "aiter/__init__.py imports aiter.jit, which JIT-builds ROCm extensions (hipcc, rocminfo)"),
    Patch("aiter.jit.utils.chip_info", "stub module: get_gfx() -> ARCH, get_cu_num() -> CU_NUM, get_gfx_list()",
          "real one shells out to rocminfo / imports build_targets; needed by aiter/ops/shuffle.py "
          "(get_gfx) and utils/device_info.get_num_sms (get_cu_num)"),
    Patch("aiter.ops.triton.utils._triton.arch_info", "real file, executed while triton.runtime.driver._active is a "
          "fake driver whose get_current_target() is GPUTarget('hip', ARCH, 64); restored afterwards",
          "at import it probes triton.runtime.driver.active (no GPU -> RuntimeError) and then imports jax"),
    Patch("get_num_sms (utils/device_info)", "follows from the chip_info stub (CU_NUM, default 256 = MI355X); in an older "
          "tree whose get_num_sms reads torch.cuda directly (24a53c6d87 and before), pinned to CU_NUM on a CPU run",
          "a8w4's gfx950 heuristic shrinks block_n while grid < get_num_sms(); torch.cuda asserts without a GPU"),
    Patch("TRITON_INTERPRET=1 casts", "kernels/shims.py install(): exact fp32->bf16 RNE, fp32->fp8 RNE+saturation, fp8 decode",
          "the interpreter truncates bf16, drops the fp8 mantissa carry, does not saturate (see kernels/shims.py)"),
    Patch("TRITON_INTERPRET=1 speed", "kernels/interp_fastpath.py install(): a device-function call skips the "
          "_patch_lang its launch already made; _get_np_dtype's table built once; the integer-overflow sanitizer, "
          "whose device_assert is a no-op without debug, not computed (Triton 3.8/3.9 sources only)",
          "they change nothing computed (outputs bitwise equal both ways) and cut the kernel group at e4048607 from "
          "95.5 to 36.5 CPU s; FP4MOE_TRITON_FASTPATH=0 turns it off"),
    Patch("config recorders", "wrap a8w4.load_config_json / a8w4._get_a8w4_dispatch / every get_kernel_config_triton",
          "report which tuned JSON file and entry (or heuristic) each call used; values are passed through unchanged"),
    Patch("AMD launch options (CUDA only)", "on a CUDA device, the wrappers' kernel objects are wrapped to drop "
          "waves_per_eu, matrix_instr_nonkdim, kpack", "NVIDIA's backend rejects them; the interpreter ignores unknown "
          "launch kwargs itself, so nothing is done on CPU"),
)

# modules the harness needs (file must exist in the tree, symbol must exist in the module)
REQUIRED = {
    "a16w4": ("aiter.ops.triton.moe.moe_op_gemm_a16w4", ("moe_gemm_a16w4", "get_kernel_config_triton|get_kernel_config")),
    "a8w4": ("aiter.ops.triton.moe.moe_op_gemm_a8w4", ("moe_gemm_a8w4", "get_kernel_config_triton",
                                                       "_get_a8w4_dispatch?", "load_config_json?")),
    "a4w4": ("aiter.ops.triton.moe.moe_op_gemm_a4w4", ("moe_gemm_a4w4", "get_kernel_config_triton")),
    "routing": ("aiter.ops.triton.moe.moe_routing.routing", ("routing", "RoutingData", "ExptData")),
    "reduce": ("aiter.ops.triton.moe.reduce", ("reduce_grouped",)),
    "quant": ("aiter.ops.triton.moe.quant_moe", ("downcast_to_mxfp", "upcast_from_mxfp")),
    "shuffle": ("aiter.ops.triton.utils.shuffle", ("shuffle_scale_moe",)),
    "arch_info": ("aiter.ops.triton.utils._triton.arch_info", ("get_arch",)),
    "core": ("aiter.ops.triton.utils.core", ("AITER_TRITON_CONFIGS_PATH", "load_config_json?")),
}


#: modules an older tree may lack: the checks that need them say n/a (shuffle: the CDNA4_SCALE layout)
OPTIONAL = frozenset({"shuffle"})
#: what each judged component needs loaded (``load_aiter_moe(strict=False)``): a component whose
#: module or symbol is missing, or whose wrapper signature lacks a keyword the drive passes, is
#: "not judged" on its own; the others still run. arch_info/core are needed by everything.
COMPONENTS = {
    "routing": ("routing",),
    "a16w4": ("a16w4",),
    "a8w4": ("a8w4", "quant", "core"),
    "a4w4": ("a4w4",),
    "reduce": ("reduce",),
}
INFRA = ("arch_info",)
#: keywords the drive (``drive.stage1``/``stage2``) passes to each GEMM wrapper; "a|b": the
#: newer name first, then an older tree's name for the SAME parameter (see drive.RESIDUAL_KEYWORDS)
WRAPPER_KEYWORDS = ("routing_data", "gather_indx", "scatter_indx", "gammas", "swizzle_mx_scale", "out_dtype",
                    "apply_swiglu", "alpha", "limit", "swiglu_add_residual|add_residual", "unpadded_N", "unpadded_K")
WRAPPERS = {"a16w4": "moe_gemm_a16w4", "a8w4": "moe_gemm_a8w4", "a4w4": "moe_gemm_a4w4"}
_REQUIRED_NAMES: set = set()


class AiterTreeError(GateCannotRun):
    """This tree cannot be loaded by the kernel adapter; the message names the file and symbol.
    ``module``: the module object when it imported but lacks a symbol (else None)."""

    module = None


def _fake_driver(arch: str):
    from triton.backends.compiler import GPUTarget

    class _FakeDriver:
        def get_current_target(self):
            return GPUTarget("hip", arch, 64)

        def __getattr__(self, name):  # anything else: fail loudly, naming the probe
            raise AttributeError(f"fake triton driver (fp4moe.targets.aiter.kernels.loader, arch_info pin): no attribute {name!r}")

    return _FakeDriver()


class _ArchInfoLoader(importlib.machinery.SourceFileLoader):
    """Executes the real arch_info.py with the triton driver probe pinned to ``arch``."""

    arch = "gfx950"

    def exec_module(self, module):
        from triton.runtime import driver  # the DriverConfig object (shadows the module name)

        saved = driver._active
        driver._active = _fake_driver(self.arch)
        try:
            super().exec_module(module)
            if hasattr(module, "get_arch"):  # an older, lazy get_arch (lru_cache): asked while pinned,
                module.get_arch()  # or it asks the real driver later and falls back to JAX (absent on a CPU)
        finally:
            driver._active = saved
        if module.get_arch() != self.arch:
            raise AiterTreeError(f"{self.path}: get_arch() returned {module.get_arch()!r}, expected {self.arch!r}")


class _BarePackageLoader(importlib.abc.Loader):
    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = list(spec.submodule_search_locations)
        m.__file__ = None
        return m

    def exec_module(self, module):  # __init__.py deliberately not executed
        pass


class _StubLoader(importlib.abc.Loader):
    def __init__(self, build):
        self.build = build

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self.build(module)


class _AiterFinder(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path, arch: str, cu_num: int):
        self.root, self.arch, self.cu_num = root, arch, cu_num

    def _chip_info(self, m):
        arch, cu = self.arch, self.cu_num
        m.get_gfx = lambda: arch
        m.get_gfx_list = lambda: [arch]
        m.get_cu_num = lambda: cu
        m.get_gfx_custom_op = lambda: arch
        m.__stub__ = "fp4moe.targets.aiter.kernels.loader: aiter.jit.utils.chip_info stub"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "aiter" and not fullname.startswith("aiter."):
            return None
        if fullname == "aiter.jit.utils.chip_info":
            return importlib.util.spec_from_loader(fullname, _StubLoader(self._chip_info))
        rel = fullname.split(".")[1:]
        d = self.root.joinpath(*rel)
        if d.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, _BarePackageLoader(), is_package=True)
            spec.submodule_search_locations = [str(d)]
            return spec
        f = d.with_suffix(".py")
        if f.is_file():
            if fullname == "aiter.ops.triton.utils._triton.arch_info":
                loader = _ArchInfoLoader(fullname, str(f))
                loader.arch = self.arch
                return importlib.util.spec_from_file_location(fullname, str(f), loader=loader)
            return importlib.util.spec_from_file_location(fullname, str(f))
        if fullname.startswith("aiter.ops.triton.moe") or fullname in _REQUIRED_NAMES:
            raise AiterTreeError(f"{f}: no such file (module {fullname}, needed by the kernel checks)")
        raise AiterTreeError(f"aiter tree {self.root}: module {fullname} not found (looked for {f} and {d}/)")


@dataclasses.dataclass
class AiterMoE:
    tree: Path
    arch: str
    cu_num: int
    modules: dict
    config_log: list
    missing_optional: list = dataclasses.field(default_factory=list)
    unjudged: dict = dataclasses.field(default_factory=dict)  # component -> "file: symbol/keyword" (strict=False)

    def __getattr__(self, name):
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None

    @staticmethod
    def patch_table() -> str:
        rows = [f"{p.name}\n    what: {p.what}\n    why:  {p.why}" for p in PATCHES]
        return "\n".join(rows)

    def print_patches(self) -> None:
        print(self.patch_table())

    def last_configs(self, n: int = 2) -> list:
        return self.config_log[-n:]


_LOADED: dict = {}


def _install_config_recorders(mods: dict, log: list) -> None:
    """Record, per GEMM call, the JSON path read, the dispatch key, and the config returned.

    Older trees differ: a8w4's ``get_kernel_config_triton`` takes no ``swizzle_mx_scale`` and
    has no ``_get_a8w4_dispatch``/``load_config_json`` (before 2520c3da3d); the recorders pass
    every argument through unchanged and record what exists."""
    a8, a16 = mods.get("a8w4"), mods.get("a16w4")
    state: dict = {}
    if a8 is not None:
        orig_load, orig_dispatch, orig_cfg8 = (getattr(a8, "load_config_json", None), getattr(a8, "_get_a8w4_dispatch", None),
                                               a8.get_kernel_config_triton)

        def load_config_json(fpath, required=True):
            d = orig_load(fpath, required=required)
            state["file"] = (fpath, d is not None)
            return d

        class _Recording(dict):
            def get(self, key, default=None):
                v = super().get(key, default)
                state.setdefault("lookups", []).append((key, v is not None))
                return v

        def _get_a8w4_dispatch(arch):
            return _Recording(orig_dispatch(arch))

        def cfg8(m, n, k, routing_data, *rest, **kw):
            state.clear()
            c = orig_cfg8(m, n, k, routing_data, *rest, **kw)
            look = state.get("lookups", [])
            exact = f"bm{routing_data.block_m}_n{n}_k{k}"
            if orig_dispatch is None:
                src = "heuristic (this tree has no tuned-JSON dispatch)"
            elif look and look[0] == (exact, True):
                src = f"tuned entry {exact}"
            elif any(hit for _, hit in look[1:]):
                src = "proxy entry " + next(key for key, hit in look[1:] if hit)
            else:
                src = "heuristic (no JSON entry for n,k)"
            path, found = state.get("file", (None, False))
            log.append({"op": "a8w4", "m": m, "n": n, "k": k, "block_m": routing_data.block_m, "json": path,
                        "json_exists": found, "source": src, "config": dict(c)})
            return c

        if orig_load is not None:
            a8.load_config_json = load_config_json
        if orig_dispatch is not None:
            a8._get_a8w4_dispatch = _get_a8w4_dispatch
        a8.get_kernel_config_triton = cfg8
    for op, mod in (("a16w4", a16), ("a4w4", mods.get("a4w4"))):  # their Triton configs read no JSON
        if mod is not None:
            _record_heuristic_config(op, mod, log)


def _record_heuristic_config(op: str, mod, log: list) -> None:
    orig = mod.get_kernel_config_triton

    def cfg(m, n, k, routing_data, *rest, **kw):
        c = orig(m, n, k, routing_data, *rest, **kw)
        log.append({"op": op, "m": m, "n": n, "k": k, "block_m": routing_data.block_m, "json": None,
                    "json_exists": False, "source": f"heuristic ({op} reads no JSON)", "config": dict(c)})
        return c

    mod.get_kernel_config_triton = cfg
    if getattr(mod, "__fp4moe_old_config_name__", None):  # an older tree calls it by its old name
        setattr(mod, mod.__fp4moe_old_config_name__, cfg)


def wrapper_keywords(mod, func: str) -> tuple[dict, str | None]:
    """({keyword the drive uses: the name this tree's ``func`` takes}, None) or ({}, the first
    keyword it lacks) -- read from the loaded function's signature."""
    import inspect

    params = set(inspect.signature(getattr(mod, func)).parameters)
    names = {}
    for spec in WRAPPER_KEYWORDS:
        alts = spec.split("|")
        have = next((a for a in alts if a in params), None)
        if have is None:
            return {}, alts[0]
        names[alts[0]] = have
    return names, None


class _DropAmdOptions:
    """CUDA only: forwards kernel[grid](...) without AMD-only launch options."""

    DROP = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*a, **kw):
            return launch(*a, **{k: v for k, v in kw.items() if k not in self.DROP})

        return run


def _import_one(root: Path, short: str) -> types.ModuleType:
    """Import REQUIRED[short] and check its symbols; AiterTreeError naming file + symbol."""
    modname, symbols = REQUIRED[short]
    try:
        m = importlib.import_module(modname)
    except AiterTreeError:
        raise
    except SyntaxError as e:
        raise AiterTreeError(f"{e.filename}: syntax error at line {e.lineno}: {e.msg} (module {modname})") from e
    except ImportError as e:  # a name the module imports from the tree is gone
        raise AiterTreeError(f"{root / Path(*modname.split('.')[1:]).with_suffix('.py')}: import failed: {e}") from e
    except Exception as e:  # noqa: BLE001 -- the module's own top-level code raised
        raise AiterTreeError(f"{root / Path(*modname.split('.')[1:]).with_suffix('.py')}: raised {type(e).__name__} "
                             f"at import; {quote(e, 'aiter')}") from e
    for s in symbols:  # "a|b": the newer name first, an older tree's name after it; "a?": optional
        if s.endswith("?"):
            continue
        alts = s.split("|")
        if not any(hasattr(m, x) for x in alts):
            err = AiterTreeError(f"{m.__file__}: symbol {alts[0]!r} missing (needed as {short}.{alts[0]})")
            err.module = m
            raise err
        if not hasattr(m, alts[0]):
            real = next(x for x in alts if hasattr(m, x))
            setattr(m, alts[0], getattr(m, real))
            m.__fp4moe_old_config_name__ = real
    return m


def load_aiter_moe(tree: str | os.PathLike, arch: str = "gfx950", cu_num: int = 256, device: str = "cpu",
                   strict: bool = True) -> AiterMoE:
    """Load the tree's Triton MoE modules. ``strict`` (perf, the default): any module or symbol
    missing raises :class:`AiterTreeError`. ``strict=False`` (the kernel checks): each component
    of ``COMPONENTS`` is loaded on its own; one that cannot load, or whose wrapper lacks a keyword
    the drive passes, is recorded in ``am.unjudged[component]`` (one line naming file and
    symbol/keyword) and the others are still loaded and judged. The arch pin (``INFRA``) is
    needed by everything: its failure always raises."""
    root = Path(tree).resolve()
    key = (root, arch, cu_num, device, strict)
    if key in _LOADED:
        return _LOADED[key]
    if not (root / "ops" / "triton").is_dir():
        raise AiterTreeError(f"{root}: not an aiter package directory (no ops/triton/); pass the dir holding aiter's __init__.py")
    if "aiter" in sys.modules:
        have = getattr(sys.modules["aiter"], "__path__", ["?"])[0]
        if Path(have).resolve() != root:
            raise AiterTreeError(f"another aiter is already imported from {have}; load this tree in a fresh process")
    if device == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise GateCannotRun("a CPU run needs TRITON_INTERPRET=1 in the environment before triton is imported")
        interp_shims.install()
        interp_fastpath.install()
    sys.meta_path.insert(0, _AiterFinder(root, arch, cu_num))
    mods: dict = {}
    _REQUIRED_NAMES.update(m for m, _ in REQUIRED.values())
    missing_optional: list = []
    failed: dict = {}  # module short name -> why
    for short in (*INFRA, *(s for s in REQUIRED if s not in INFRA)):
        try:
            mods[short] = _import_one(root, short)
        except AiterTreeError as e:
            if short in OPTIONAL and "no such file" in str(e):
                missing_optional.append(str(e))
            elif strict or short in INFRA:
                raise
            else:
                failed[short] = str(e)
                if short == "routing" and e.module is not None and all(hasattr(e.module, n) for n in ("RoutingData", "ExptData")):
                    mods["routing_types"] = e.module  # its routing() is not judged; its data types still drive the GEMMs
    if "routing" in mods:
        mods["routing_types"] = mods["routing"]
    unjudged: dict = {}
    for comp, needs in COMPONENTS.items():
        why = next((failed[n] for n in needs if n in failed), None)
        if why is None and comp in WRAPPERS:
            m = mods[comp]
            kw, lacking = wrapper_keywords(m, WRAPPERS[comp])
            if lacking:
                why = f"{m.__file__}: {WRAPPERS[comp]}() takes no keyword {lacking!r} (the drive passes it)"
                if strict:
                    raise AiterTreeError(why)
            else:
                m.__fp4moe_keywords__ = kw
        if why:
            unjudged[comp] = why
    for comp in unjudged:  # a component not judged is not called: drop its modules from the drive's view
        if comp in WRAPPERS:
            mods.pop(comp, None)
    if device == "cpu":
        _pin_num_sms(mods, cu_num)
    log: list = []
    _install_config_recorders(mods, log)
    wrap_launches_for(device, mods)
    am = AiterMoE(root, arch, cu_num, mods, log, missing_optional, unjudged)
    _LOADED[key] = am
    return am


def _pin_num_sms(mods: dict, cu_num: int) -> None:
    """An older tree's ``utils/device_info.get_num_sms`` asks ``torch.cuda`` (no chip_info): on a
    CPU run pin it (and the name a8w4 imported) to ``cu_num``, as chip_info answers newer trees."""
    import inspect

    di = sys.modules.get("aiter.ops.triton.utils.device_info")
    fn = getattr(di, "get_num_sms", None)
    try:
        reads_cuda = fn is not None and "torch.cuda" in inspect.getsource(fn)
    except (OSError, TypeError):
        reads_cuda = False
    if not reads_cuda:
        return
    pinned = lambda: cu_num  # noqa: E731
    di.get_num_sms = pinned
    for m in mods.values():
        if getattr(m, "get_num_sms", None) is fn:
            m.get_num_sms = pinned


def wrap_launches_for(device: str, mods: dict) -> dict:
    """On a CUDA device only: every Triton kernel object the GEMM wrappers launch (names differ
    between trees: ``_moe_gemm_a16w4_triton`` at e4048607, ``_moe_gemm_a16w4`` in older ones)
    wrapped to drop the AMD-only launch options. {module short name: names wrapped}."""
    if not str(device).startswith("cuda"):
        return {}
    return {short: drop_amd_options(mods[short]) for short in ("a16w4", "a8w4", "a4w4") if short in mods}


def drop_amd_options(m) -> list[str]:
    """Wrap every ``_moe_gemm*`` Triton kernel object of module ``m`` in :class:`_DropAmdOptions`
    (CUDA only; the caller decides). Returns the names wrapped."""
    names = [n for n in dir(m) if n.startswith("_moe_gemm") and type(getattr(m, n)).__name__ in ("JITFunction", "Autotuner", "Heuristics")]
    if not names:
        raise AiterTreeError(f"{m.__file__}: no _moe_gemm* Triton kernel found to launch on CUDA")
    for n in names:
        setattr(m, n, _DropAmdOptions(getattr(m, n)))
    return names


def tree_date(root: str | os.PathLike) -> dict:
    """{"date": "YYYY-MM-DD", "how": ...} of an aiter tree (``root``: the aiter package dir), for
    the known-defects registry's ``first_seen_date``: the commit date when ``root``'s parent is
    the top of a git checkout; else the newest mtime of ``ops/triton/moe/**.py`` (``git archive |
    tar -x`` keeps the commit time; a plain copy takes the copy's time, i.e. counts as new).
    {"date": None, ...} when neither can be read."""
    import datetime
    import subprocess

    root = Path(root).resolve()
    try:
        top = subprocess.run(["git", "-C", str(root.parent), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root.parent:
            d = subprocess.run(["git", "-C", str(root.parent), "log", "-1", "--format=%cs"], capture_output=True,
                               text=True, timeout=10)
            if d.returncode == 0 and d.stdout.strip():
                return {"date": d.stdout.strip(), "how": "git commit date"}
    except (OSError, subprocess.SubprocessError):
        pass
    times = [p.stat().st_mtime for p in (root / "ops" / "triton" / "moe").rglob("*.py")]
    if not times:
        return {"date": None, "how": "no ops/triton/moe/*.py"}
    d = datetime.datetime.fromtimestamp(max(times), tz=datetime.timezone.utc).date().isoformat()
    return {"date": d, "how": "newest file time under ops/triton/moe"}
