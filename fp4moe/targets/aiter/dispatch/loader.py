"""Load an aiter tree's real ``aiter/fused_moe.py`` on torch CPU tensors, every compiled op stood in.

Index:

- :func:`locate` -- the tree (a folder holding ``aiter/`` and ``csrc/``, or the ``aiter`` package
  folder with ``csrc/`` beside it; an installed aiter's ``aiter_meta/csrc/`` too); a missing file
  is :class:`DispatchTreeError` naming it.
- :class:`LoadedDispatch` / :func:`load_fused_moe` -- installs the ``aiter`` / ``csrc`` import hook
  (in a child process only: it fills ``sys.modules``) and imports ``aiter.fused_moe`` unmodified.
- :data:`PATCHES` -- the one table of what is not aiter's own code at run time (name, what, why).

What runs is aiter's Python: ``fused_moe.py``, ``ops/*.py`` (the ``@compile_ops`` declarations,
the quant and sorting wrappers), ``ops/opus/*``, ``ops/flydsl/moe_kernels.py`` (kernel-name
parsing), ``csrc/opus_moe/opus_moe_common.py`` and the ``AITER_CONFIG`` merge of the tuned CSVs
(``jit/core.py``'s class, executed from its source). What does not run is listed in ``PATCHES``;
the compiled ops themselves are stood in by :mod:`fp4moe.targets.aiter.dispatch.standins`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import pathlib
import re
import sys
import types
from pathlib import Path

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_text_bounded
from fp4moe.targets.aiter.patch import Patch
from fp4moe.targets.aiter.results import TreeLacks
from fp4moe.targets.aiter.source import (
    FileIndex,
    Unavailable,
    passthrough_decorator,
    statement_needs,
)

#: files outside ``aiter/`` the dispatch may need, each with the text that shows a tree's Python
#: reads it; one is demanded only of a tree whose ``aiter/**/*.py`` holds that text (older trees
#: never import the Opus MoE common file)
REQUIRED_CSRC = {"csrc/opus_moe/opus_moe_common.py": "opus_moe.opus_moe_common", "csrc/include/aiter_enum.h": "aiter_enum"}
FUSED_MOE = "aiter/fused_moe.py"
INIT = "aiter/__init__.py"
JIT_CORE = "aiter/jit/core.py"
CHIP_INFO = "aiter/jit/utils/chip_info.py"
FILE_BATON = "aiter/jit/utils/file_baton.py"
ENUM_HEADER = "csrc/include/aiter_enum.h"
ARCH = "gfx950"
CU_NUM = 256
#: the folder ``AITER_CONFIG.update_config_files`` writes the merged CSV to (a literal in jit/core.py)
MERGE_OUTPUT_DIR = "/tmp/aiter_configs"


class DispatchTreeError(GateCannotRun):
    """The tree cannot be loaded for the dispatch checks; the message names the file."""


PATCHES = (
    Patch("aiter, csrc (+ every sub-package)", "bare package modules with __path__ into the tree; no __init__.py runs; "
          "a missing attribute of `aiter` is the name aiter/__init__.py star-imports, imported from the module that "
          "binds it (read with ast, last binding wins)", "aiter/__init__.py imports every ROCm op module and JIT-builds"),
    Patch("aiter.jit.core", "stub module: compile_ops = the recording decorator of standins.py; AITER_CONFIGS, "
          "AITER_CONFIG, AITER_ROOT_DIR, mp_lock executed from jit/core.py's own source; AITER_CSRC_DIR = tree/csrc; "
          "bd_dir = scratch", "the real module builds hipcc extensions at import"),
    Patch("aiter.jit.utils.chip_info", f"get_gfx*/get_gfx_runtime -> {ARCH}, get_cu_num -> {CU_NUM}; "
          "gfx_from_cu_num executed from source", "the real one runs rocminfo"),
    Patch("aiter.jit.utils.torch_guard", "torch_compile_guard is the identity", "it registers torch custom ops for a GPU"),
    Patch("aiter.ops.flydsl.utils.is_flydsl_available", "answers True", "FlyDSL (flydsl package) is absent on a CPU; "
          "MI355X images have it, and fused_moe's DeepSeek-V4 rows select FlyDSL kernels"),
    Patch("aiter.ops.flydsl.kernels.tensor_shim", "stub module (attributes fail if used)",
          "it imports the flydsl compiler; moe_kernels.py imports it at top level"),
    Patch("FlyDSL stage launches", "aiter.ops.flydsl(.moe_kernels).flydsl_moe_stage1/2 = recording stand-ins",
          "they compile and launch FlyDSL kernels"),
    Patch("AITER_CONFIG merge output", f"{MERGE_OUTPUT_DIR} -> the child's scratch folder for the merge call only",
          "update_config_files writes its merged CSV to a fixed /tmp path"),
    Patch("environment", "AITER_* variables cleared in the child, then the row's own (e.g. AITER_BF16_FP8_MOE_BOUND) set",
          "a runner's AITER_CONFIG_FMOE / AITER_KSPLIT would change what the table says the tree does"),
)


# ----------------------------------------------------------------------------------------- the tree
#: where aiter keeps csrc/ beside the package: a checkout's top, or an installed aiter's aiter_meta/
#: (jit/core.py's AITER_META_DIR rule)
CSRC_HOMES = (".", "aiter_meta")


@dataclasses.dataclass(frozen=True)
class Tree:
    root: Path  # holds aiter/
    meta: Path  # holds csrc/ (root itself, or root/aiter_meta for an installed aiter)

    def file(self, rel: str) -> Path:
        return (self.meta if rel.split("/")[0] == "csrc" else self.root) / rel


def csrc_home(path: str | os.PathLike) -> Path | None:
    """The folder holding this source's ``csrc/`` (beside ``aiter/``, or ``aiter_meta/``), or None."""
    p = Path(path).resolve()
    root = p.parent if p.name == "aiter" and not (p / "aiter").is_dir() else p
    return next((root / h for h in CSRC_HOMES if (root / h / "csrc").is_dir()), None)


def locate(path: str | os.PathLike) -> Tree:
    """The tree at ``path``; DispatchTreeError naming what is missing."""
    p = Path(path).resolve()
    if (p / "aiter").is_dir():
        root = p
    elif p.name == "aiter" and (p / "ops").is_dir():
        root = p.parent
    else:
        raise DispatchTreeError(f"{p}: neither holds aiter/ nor is the aiter package folder")
    if not (root / FUSED_MOE).is_file():
        raise DispatchTreeError(f"{root / FUSED_MOE}: no such file")
    meta = next((root / h for h in CSRC_HOMES if (root / h / "csrc").is_dir()), root)
    for rel in needed_csrc(root):
        if not (meta / rel).is_file():
            raise DispatchTreeError(f"{meta / rel}: no such file (this tree's aiter/ reads it)")
    return Tree(root, meta)


def needed_csrc(root: Path) -> list[str]:
    """The files of :data:`REQUIRED_CSRC` this tree's Python names (``aiter/**/*.py`` scanned)."""
    left, out, seen = dict(REQUIRED_CSRC), [], set()
    for top, dirs, files in os.walk(root / "aiter", followlinks=True):  # a linked tree's folders too, once each
        real = os.path.realpath(top)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(n for n in files if n.endswith(".py")):
            f = Path(top) / name
            if not left or not f.is_file():  # a FIFO or a dangling link is no source
                continue
            with contextlib.suppress(OSError):
                text = read_text_bounded(f, errors="replace")
                for rel, mark in list(left.items()):
                    if mark in text:
                        out.append(rel)
                        del left[rel]
    return [r for r in REQUIRED_CSRC if r in out]


# ----------------------------------------------------------------------------------------- partial exec
def _binds_directly(stmt: ast.stmt, name: str) -> bool:
    """``name = ...`` / ``import name`` / ``def name`` (not ``name.attr[...] = ...``)."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
        return any(isinstance(t, ast.Name) and t.id == name for t in flat)
    return True


def run_definitions(path: Path, names: tuple[str, ...], ns: dict) -> dict:
    """Execute, from ``path``'s own source, the top-level statements binding ``names`` and those
    they need when executed; names already in ``ns`` are not re-bound."""
    text = read_text_bounded(path)
    idx = FileIndex.parse(text, path.name, str(path.parent))
    done: set[int] = set()

    def need(name: str) -> None:
        if name in ns:
            return
        for stmt in idx.bindings.get(name, ()):
            if id(stmt) in done or not _binds_directly(stmt, name):
                continue
            done.add(id(stmt))
            if isinstance(stmt, ast.ClassDef):  # methods' names are needed when called: ask for them
                at_exec = {n.id for e in (*stmt.decorator_list, *stmt.bases) for n in ast.walk(e) if isinstance(n, ast.Name)}
                at_exec |= {x for b in stmt.body for part in statement_needs(b) for x in part}
            else:
                at_exec, at_call = statement_needs(stmt)
                at_exec = at_exec | at_call  # what the function reads when it runs, bound before the call
            for dep in sorted(at_exec):
                if dep != name and dep in idx.bindings:
                    need(dep)
            exec(compile(ast.Module(body=[*idx.future, stmt], type_ignores=[]), str(path), "exec"), ns)

    ns.setdefault("__file__", str(path))
    for n in names:
        need(n)
        if n not in ns:
            raise TreeLacks(f"{path}: defines no {n}")
    return ns


# ----------------------------------------------------------------------------------------- enums
class PybindEnum(enum.Enum):
    """A pybind11 ``enum class``: equal only to its own members, ``str`` = ``Type.member``."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    __repr__ = __str__

    def __hash__(self) -> int:
        return hash(self.value)


def header_enums(header: Path) -> dict[str, type]:
    """``enum class NAME : int { a = v, b, ... }`` blocks of aiter_enum.h as Enum classes."""
    text = re.sub(r"//[^\n]*", "", read_text_bounded(header))
    out: dict[str, type] = {}
    for name, body in re.findall(r"enum\s+class\s+(\w+)\s*(?::\s*\w+)?\s*\{([^}]*)\}", text):
        members, nxt = {}, 0
        for item in (x.strip() for x in body.split(",")):
            if not item:
                continue
            key, _, val = (s.strip() for s in item.partition("="))
            nxt = int(val, 0) if val else nxt
            members[key] = nxt
            nxt += 1
        out[name] = PybindEnum(name, members)
    if not {"ActivationType", "QuantType"} <= set(out):
        raise DispatchTreeError(f"{header}: no enum class ActivationType / QuantType")
    return out


# ----------------------------------------------------------------------------------------- import hook
def _in_order(body):
    """Statements in source order, descending into if/try/with blocks (not into defs)."""
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _in_order(getattr(stmt, block, []))
            for h in getattr(stmt, "handlers", []):
                yield from _in_order(h.body)
        else:
            yield stmt


class _Package(types.ModuleType):
    """A bare package: submodules import on attribute access; ``aiter`` itself also resolves the
    names its ``__init__.py`` star-imports."""

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        hook = self.__dict__.get("_fp4moe_hook")
        if hook is None:
            raise AttributeError(item)
        return hook.package_attr(self, item)


class _BareLoader(importlib.abc.Loader):
    def __init__(self, hook: _Hook):
        self.hook = hook

    def create_module(self, spec):
        m = _Package(spec.name)
        m._fp4moe_hook = self.hook
        return m

    def exec_module(self, module):
        return None


class _PresetLoader(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        return None


class _StubModule(types.ModuleType):
    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return Unavailable(f"{self.__name__}.{item} (not loaded by fp4moe.targets.aiter.dispatch)")


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(self, tree: Tree, presets: dict[str, types.ModuleType]):
        self.tree, self.presets = tree, presets
        self._exports: dict[str, str] | None = None

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top not in ("aiter", "csrc"):
            return None
        if fullname in self.presets:
            return importlib.util.spec_from_loader(fullname, _PresetLoader(self.presets[fullname]))
        d = (self.tree.meta if top == "csrc" else self.tree.root).joinpath(*fullname.split("."))
        if d.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, _BareLoader(self), is_package=True)
            spec.submodule_search_locations = [str(d)]
            return spec
        f = d.with_suffix(".py")
        if f.is_file():
            return importlib.util.spec_from_file_location(fullname, str(f))
        return None

    # -------------------------------------------------------------- names aiter/__init__ binds
    def exports(self) -> dict[str, str]:
        """{name: module} for the names ``aiter/__init__.py`` imports from its submodules, in
        source order (a later import wins, as it does when __init__ runs). A star import
        exports the module's ``__all__``, else the public names it defines (names it only
        imports are left to the module that defines them)."""
        if self._exports is not None:
            return self._exports
        out: dict[str, str] = {}
        init = self.tree.file(INIT)
        for node in _in_order(ast.parse(read_text_bounded(init)).body):
            if not isinstance(node, ast.ImportFrom) or node.level != 1 or not node.module:
                continue
            mod = f"aiter.{node.module}"
            for a in node.names:
                if a.name == "*":
                    for n in self._star_names(mod):
                        out[n] = mod
                else:
                    out[a.asname or a.name] = f"{mod}:{a.name}"
        self._exports = out
        return out

    def _star_names(self, mod: str) -> list[str]:
        f = self.tree.root.joinpath(*mod.split(".")).with_suffix(".py")
        if not f.is_file():
            f = self.tree.root.joinpath(*mod.split("."), "__init__.py")
        if not f.is_file():
            return []
        idx = FileIndex.parse(read_text_bounded(f), str(f), "")
        for stmt in idx.bindings.get("__all__", ()):
            if isinstance(stmt, ast.Assign):
                try:
                    return list(ast.literal_eval(stmt.value))
                except ValueError:
                    break
        return [n for n, stmts in idx.bindings.items() if not n.startswith("_")
                and any(not isinstance(s, (ast.Import, ast.ImportFrom)) and _binds_directly(s, n) for s in stmts)]

    def package_attr(self, pkg: types.ModuleType, item: str):
        sub = f"{pkg.__name__}.{item}"
        d = (self.tree.meta if sub.startswith("csrc.") else self.tree.root).joinpath(*sub.split("."))
        if sub in self.presets or d.is_dir() or d.with_suffix(".py").is_file():
            return importlib.import_module(sub)
        if pkg.__name__ == "aiter":
            where = self.exports().get(item)
            if where is not None:
                mod, _, attr = where.partition(":")
                value = getattr(importlib.import_module(mod), attr or item)
                pkg.__dict__[item] = value
                return value
        raise AttributeError(f"{pkg.__name__} has no attribute {item!r} (no submodule; aiter/__init__.py does not bind it)")


# ----------------------------------------------------------------------------------------- stubs
def _chip_info(tree: Tree) -> types.ModuleType:
    m = _StubModule("aiter.jit.utils.chip_info")
    m.__file__ = "<fp4moe dispatch stub aiter.jit.utils.chip_info>"
    for n in ("get_gfx", "get_gfx_runtime", "get_gfx_custom_op", "get_gfx_custom_op_core"):
        setattr(m, n, lambda *a, **k: ARCH)
    m.get_gfx_list = lambda *a, **k: [ARCH]
    m.get_cu_num = lambda *a, **k: CU_NUM
    m.get_cu_num_custom_op = lambda *a, **k: CU_NUM
    ns = dict(m.__dict__)
    ns["get_gfx_runtime"] = m.get_gfx_runtime
    if "def gfx_from_cu_num" in read_text_bounded(tree.file(CHIP_INFO), errors="replace"):
        run_definitions(tree.file(CHIP_INFO), ("gfx_from_cu_num",), ns)  # older trees define none, import none
        m.gfx_from_cu_num = ns["gfx_from_cu_num"]
    return m


def _torch_guard() -> types.ModuleType:
    m = _StubModule("aiter.jit.utils.torch_guard")
    m.__file__ = "<fp4moe dispatch stub aiter.jit.utils.torch_guard>"
    m.torch_compile_guard = passthrough_decorator
    return m


def _jit_core(tree: Tree, scratch: Path, chip: types.ModuleType, compile_ops) -> types.ModuleType:
    m = _StubModule("aiter.jit.core")
    m.__file__ = str(tree.file(JIT_CORE))
    baton_ns = run_definitions(tree.file(FILE_BATON), ("FileBaton",), {"__name__": "file_baton"})
    ns = {"__name__": "aiter.jit.core", "FileBaton": baton_ns["FileBaton"], "get_gfx": chip.get_gfx,
          "get_gfx_list": chip.get_gfx_list, "get_gfx_runtime": chip.get_gfx_runtime,
          "torch_compile_guard": passthrough_decorator}
    run_definitions(tree.file(JIT_CORE), ("AITER_CONFIGS", "AITER_CONFIG", "AITER_CONFIG_FMOE", "AITER_ROOT_DIR", "mp_lock", "logger"), ns)
    for n in ("AITER_CONFIGS", "AITER_CONFIG", "AITER_ROOT_DIR", "mp_lock", "logger"):
        setattr(m, n, ns[n])
    m.AITER_CSRC_DIR = str(tree.meta / "csrc")
    m.AITER_META_DIR = str(tree.meta)
    m.PY = sys.executable
    m.bd_dir = str(scratch / "build")
    m.compile_ops = compile_ops
    m.torch_compile_guard = passthrough_decorator
    m.get_module = _no_compiled_module
    return m


def _no_compiled_module(name: str) -> types.ModuleType:
    """``jit.core.get_module``: a compiled module with no attributes (a ``getattr(m, X, default)``
    probe, as some trees make at import, gets its default; any other use fails naming it)."""

    class _NoCompiled(types.ModuleType):
        def __getattr__(self, item):
            raise AttributeError(f"{name}.{item}: aiter's compiled module is not loaded by fp4moe.targets.aiter.dispatch")

    return _NoCompiled(name)


@contextlib.contextmanager
def merge_output_moved(scratch: Path):
    """Within the block, ``pathlib.Path(MERGE_OUTPUT_DIR)`` is the scratch folder's ``aiter_configs``."""
    real = pathlib.Path
    target = scratch / "aiter_configs"

    concrete = type(real())  # PosixPath: Path.__new__ compares cls with the module's Path

    def moved(*parts):
        p = concrete(*parts)
        return target if str(p) == MERGE_OUTPUT_DIR else p

    pathlib.Path = moved
    try:
        yield target
    finally:
        pathlib.Path = real


# ----------------------------------------------------------------------------------------- loading
@dataclasses.dataclass
class LoadedDispatch:
    tree: Tree
    fused_moe: types.ModuleType
    enums: dict
    config_file: str  # the merged tuned CSV fused_moe reads
    config_sources: list  # the CSVs merged into it (paths as the tree names them)


def _clear_aiter_environment(keep: dict) -> None:
    for k in [k for k in os.environ if k.startswith(("AITER_", "GPTOSS_"))]:
        del os.environ[k]
    os.environ.update(keep)


#: the FlyDSL launch functions of ``aiter/ops/flydsl/moe_kernels.py`` that are stood in
FLYDSL_LAUNCHES = ("flydsl_moe_stage1", "flydsl_moe_stage2", "flydsl_silu_and_mul_interleaved",
                   "flydsl_swiglu_and_mul_interleaved")


def load_fused_moe(tree: Tree, scratch: Path, recorder, env: dict | None = None) -> LoadedDispatch:
    """Import the tree's ``aiter.fused_moe`` with the stand-ins of ``recorder``
    (:class:`fp4moe.targets.aiter.dispatch.standins.Recorder`)."""
    if "aiter" in sys.modules:
        raise DispatchTreeError("an aiter is already imported in this process; the dispatch loads in a fresh child")
    _clear_aiter_environment(env or {})
    logging.getLogger("aiter").setLevel(logging.ERROR)
    enums = header_enums(tree.file(ENUM_HEADER))
    recorder.enums = enums
    compile_ops = recorder.compile_ops
    chip = _chip_info(tree)
    core = _jit_core(tree, scratch, chip, compile_ops)
    shim = _StubModule("aiter.ops.flydsl.kernels.tensor_shim")
    shim.__file__ = "<fp4moe dispatch stub tensor_shim>"
    presets = {"aiter.jit.core": core, "aiter.jit.utils.chip_info": chip,
               "aiter.jit.utils.torch_guard": _torch_guard(), "aiter.ops.flydsl.kernels.tensor_shim": shim}
    hook = _Hook(tree, presets)
    sys.meta_path.insert(0, hook)
    aiter = importlib.import_module("aiter")
    aiter.logger = logging.getLogger("aiter")
    if (tree.root / "aiter/ops/flydsl/moe_kernels.py").is_file():  # older trees have no FlyDSL MoE
        _stand_in_flydsl(tree, recorder)
    try:
        fm = importlib.import_module("aiter.fused_moe")
    except SyntaxError as e:
        raise DispatchTreeError(f"{e.filename}: syntax error at line {e.lineno}: {e.msg}") from e
    sources = tuned_csvs(tree.root)
    check_tuned_csvs(sources)  # aiter's pandas reads each whole: never a FIFO, /dev/zero or a sparse giant
    with merge_output_moved(scratch):
        config_file = core.AITER_CONFIGS.AITER_CONFIG_FMOE_FILE
    return LoadedDispatch(tree, fm, enums, config_file, [str(p) for p in sources])


def tuned_csvs(root: Path) -> list[Path]:
    """The tuned CSVs aiter's AITER_CONFIG merge reads (configs/ first, then model_configs/)."""
    return [root / "aiter/configs/tuned_fmoe.csv"] + sorted(
        p for p in (root / "aiter/configs/model_configs").glob("*tuned_fmoe*.csv") if "untuned" not in p.name)


#: the most bytes one tuned CSV may hold: aiter reads each whole (pandas) and the gate indexes it; the
#: largest config CSV of aiter e4048607 is 1.5 MB
TUNED_CSV_MAX_BYTES = 16 << 20


def check_tuned_csvs(paths) -> None:
    """Each tuned CSV present is a regular file of at most :data:`TUNED_CSV_MAX_BYTES` (by ``stat``,
    nothing opened): a FIFO, a device or a sparse giant is a DispatchTreeError naming it, never
    read (by the gate before any child starts, and by the dispatch child before aiter's merge)."""
    from fp4moe.infra.files import check_regular_file

    for p in paths:
        if not os.path.lexists(p):
            continue
        try:
            check_regular_file(p, TUNED_CSV_MAX_BYTES)
        except OSError as e:
            raise DispatchTreeError(f"tuned CSV {' '.join(str(e).split())} (aiter's fused_moe merges every "
                                    "tuned_fmoe CSV of the tree)") from None


def _stand_in_flydsl(tree: Tree, recorder) -> None:
    """The FlyDSL launches the tree declares, stood in (``PATCHES``); FlyDSL reported available."""
    flyutils = importlib.import_module("aiter.ops.flydsl.utils")
    flyutils.is_flydsl_available = lambda: True
    try:
        kernels = importlib.import_module("aiter.ops.flydsl.moe_kernels")
    except ImportError as e:
        raise DispatchTreeError(f"{tree.file('aiter/ops/flydsl/moe_kernels.py')}: import failed: {e}") from e
    fly = importlib.import_module("aiter.ops.flydsl")
    for name in FLYDSL_LAUNCHES:
        declared = getattr(kernels, name, None)
        if declared is None:  # an older tree: fused_moe does not call it either
            continue
        launch = recorder.flydsl_launch(name, declared)
        setattr(kernels, name, launch)
        setattr(fly, name, launch)
    if (tree.root / "aiter/ops/flydsl/moe_common.py").is_file():
        fly.GateMode = importlib.import_module("aiter.ops.flydsl.moe_common").GateMode
    fly.is_flydsl_available = flyutils.is_flydsl_available


def bound_arguments(fn, args: tuple, kwargs: dict) -> dict:
    """The op's arguments by the names its Python declaration gives them (defaults applied)."""
    sig = inspect.signature(fn)
    try:
        b = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}{sig}: {e}") from None
    b.apply_defaults()
    return dict(b.arguments)
