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

from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.kernels import shims as interp_shims

# -----------------------------------------------------------------------------------------
# The ONE table of stubs / patches. Every entry is applied by this module, nowhere else.
# -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Patch:
    name: str
    what: str
    why: str


PATCHES = (
    Patch("aiter (+ every sub-package)", "bare package modules with __path__ into the tree; __init__.py not executed",
          "aiter/__init__.py imports aiter.jit, which JIT-builds ROCm extensions (hipcc, rocminfo)"),
    Patch("aiter.jit.utils.chip_info", "stub module: get_gfx() -> ARCH, get_cu_num() -> CU_NUM, get_gfx_list()",
          "real one shells out to rocminfo / imports build_targets; needed by aiter/ops/shuffle.py "
          "(get_gfx) and utils/device_info.get_num_sms (get_cu_num)"),
    Patch("aiter.ops.triton.utils._triton.arch_info", "real file, executed while triton.runtime.driver._active is a "
          "fake driver whose get_current_target() is GPUTarget('hip', ARCH, 64); restored afterwards",
          "at import it probes triton.runtime.driver.active (no GPU -> RuntimeError) and then imports jax"),
    Patch("get_num_sms (utils/device_info)", "not patched: follows from the chip_info stub (CU_NUM, default 256 = MI355X)",
          "a8w4's gfx950 heuristic shrinks block_n while grid < get_num_sms()"),
    Patch("TRITON_INTERPRET=1 casts", "kernels/shims.py install(): exact fp32->bf16 RNE, fp32->fp8 RNE+saturation, fp8 decode",
          "the interpreter truncates bf16, drops the fp8 mantissa carry, does not saturate (see kernels/shims.py)"),
    Patch("config recorders", "wrap a8w4.load_config_json / a8w4._get_a8w4_dispatch / both get_kernel_config_triton",
          "report which tuned JSON file and entry (or heuristic) each call used; values are passed through unchanged"),
    Patch("AMD launch options (CUDA only)", "on a CUDA device, the wrappers' kernel objects are wrapped to drop "
          "waves_per_eu, matrix_instr_nonkdim, kpack", "NVIDIA's backend rejects them; the interpreter ignores unknown "
          "launch kwargs itself, so nothing is done on CPU"),
)

# modules the harness needs (file must exist in the tree, symbol must exist in the module)
REQUIRED = {
    "a16w4": ("aiter.ops.triton.moe.moe_op_gemm_a16w4", ("moe_gemm_a16w4", "get_kernel_config_triton|get_kernel_config")),
    "a8w4": ("aiter.ops.triton.moe.moe_op_gemm_a8w4", ("moe_gemm_a8w4", "get_kernel_config_triton",
                                                       "_get_a8w4_dispatch", "load_config_json?")),
    "routing": ("aiter.ops.triton.moe.moe_routing.routing", ("routing", "routing_torch", "compute_expt_data_torch")),
    "reduce": ("aiter.ops.triton.moe.reduce", ("reduce_grouped",)),
    "quant": ("aiter.ops.triton.moe.quant_moe", ("downcast_to_mxfp", "upcast_from_mxfp")),
    "shuffle": ("aiter.ops.triton.utils.shuffle", ("shuffle_scale_moe",)),
    "arch_info": ("aiter.ops.triton.utils._triton.arch_info", ("get_arch",)),
    "core": ("aiter.ops.triton.utils.core", ("AITER_TRITON_CONFIGS_PATH", "load_config_json?")),
}


#: modules an older tree may lack: the checks that need them say n/a (shuffle: the CDNA4_SCALE layout)
OPTIONAL = frozenset({"shuffle"})
_REQUIRED_NAMES: set = set()


class AiterTreeError(GateCannotRun):
    """This tree cannot be loaded by the kernel adapter; the message names the file and symbol."""


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
    """Record, per GEMM call, the JSON path read, the dispatch key, and the config returned."""
    a8, a16 = mods["a8w4"], mods["a16w4"]
    orig_load, orig_dispatch, orig_cfg8, orig_cfg16 = (
        getattr(a8, "load_config_json", None), a8._get_a8w4_dispatch, a8.get_kernel_config_triton, a16.get_kernel_config_triton)
    state: dict = {}

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

    def cfg8(m, n, k, routing_data, swizzle_mx_scale=None):
        state.clear()
        c = orig_cfg8(m, n, k, routing_data, swizzle_mx_scale)
        look = state.get("lookups", [])
        exact = f"bm{routing_data.block_m}_n{n}_k{k}"
        if look and look[0] == (exact, True):
            src = f"tuned entry {exact}"
        elif any(hit for _, hit in look[1:]):
            src = "proxy entry " + next(key for key, hit in look[1:] if hit)
        else:
            src = "heuristic (no JSON entry for n,k)"
        path, found = state.get("file", (None, False))
        log.append({"op": "a8w4", "m": m, "n": n, "k": k, "block_m": routing_data.block_m, "json": path,
                    "json_exists": found, "source": src, "config": dict(c)})
        return c

    def cfg16(m, n, k, routing_data):
        c = orig_cfg16(m, n, k, routing_data)
        log.append({"op": "a16w4", "m": m, "n": n, "k": k, "block_m": routing_data.block_m, "json": None,
                    "json_exists": False, "source": "heuristic (a16w4 reads no JSON)", "config": dict(c)})
        return c

    if orig_load is not None:
        a8.load_config_json = load_config_json
    a8._get_a8w4_dispatch = _get_a8w4_dispatch
    a8.get_kernel_config_triton, a16.get_kernel_config_triton = cfg8, cfg16
    if getattr(a16, "__fp4moe_old_config_name__", None):  # an older tree calls it by its old name
        setattr(a16, a16.__fp4moe_old_config_name__, cfg16)


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


def load_aiter_moe(tree: str | os.PathLike, arch: str = "gfx950", cu_num: int = 256, device: str = "cpu") -> AiterMoE:
    root = Path(tree).resolve()
    key = (root, arch, cu_num, device)
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
    sys.meta_path.insert(0, _AiterFinder(root, arch, cu_num))
    mods = {}
    _REQUIRED_NAMES.update(m for m, _ in REQUIRED.values())
    missing_optional = []
    for short, (modname, symbols) in REQUIRED.items():
        try:
            m = importlib.import_module(modname)
        except AiterTreeError as e:
            if short in OPTIONAL and "no such file" in str(e):
                missing_optional.append(str(e))
                continue
            raise
        except SyntaxError as e:
            raise AiterTreeError(f"{e.filename}: syntax error at line {e.lineno}: {e.msg} (module {modname})") from e
        except ImportError as e:  # a name the module imports from the tree is gone
            raise AiterTreeError(f"{root / Path(*modname.split('.')[1:]).with_suffix('.py')}: import failed: {e}") from e
        for s in symbols:  # "a|b": the newer name first, an older tree's name after it; "a?": optional
            if s.endswith("?"):
                continue
            alts = s.split("|")
            if not any(hasattr(m, x) for x in alts):
                raise AiterTreeError(f"{m.__file__}: symbol {alts[0]!r} missing (needed as {short}.{alts[0]})")
            if not hasattr(m, alts[0]):
                real = next(x for x in alts if hasattr(m, x))
                setattr(m, alts[0], getattr(m, real))
                m.__fp4moe_old_config_name__ = real
        mods[short] = m
    log: list = []
    _install_config_recorders(mods, log)
    if device.startswith("cuda"):
        # every Triton kernel object the wrappers launch (names differ between trees:
        # _moe_gemm_a16w4_triton at e4048607, _moe_gemm_a16w4 in older ones)
        for short in ("a16w4", "a8w4"):
            m = mods[short]
            names = [n for n in dir(m) if n.startswith("_moe_gemm") and type(getattr(m, n)).__name__ in ("JITFunction", "Autotuner", "Heuristics")]
            if not names:
                raise AiterTreeError(f"{m.__file__}: no _moe_gemm* Triton kernel found to launch on CUDA")
            for n in names:
                setattr(m, n, _DropAmdOptions(getattr(m, n)))
    am = AiterMoE(root, arch, cu_num, mods, log, missing_optional)
    _LOADED[key] = am
    return am
