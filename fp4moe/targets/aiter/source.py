"""Read aiter's Python sources without importing the aiter package.

An aiter upgrade is checked on any machine where aiter's ``.py`` files exist, even where its
GPU runtime cannot load (``import aiter`` raises ``RuntimeError`` without ROCm). The files come
from one of three places:

- a source tree or package directory (``--aiter-src PATH``: a checkout holding ``aiter/``, or
  the ``aiter`` package directory itself);
- a wheel (``--aiter-wheel PATH``), read with ``zipfile`` and never installed: installing the
  PyPI ``amd-aiter`` release would shadow a ROCm runner's own aiter;
- the installed aiter, located with ``importlib.util.find_spec("aiter")``, which for a
  top-level package finds the directory without executing ``aiter/__init__.py``.

Signatures are read with ``ast`` (nothing is executed). The shuffle functions are executed
from ``aiter/ops/shuffle.py`` alone, in a fresh module whose ``aiter.*`` imports resolve to
stubs for the duration of that one ``exec`` (``get_gfx()`` answers ``"gfx950"``: the branch
this project checks); ``sys.modules`` is restored afterwards, so a real aiter that is already
imported is left exactly as it was.

aiter's pure-torch reference functions (``torch_moe_stage1`` ...) are loaded by
:class:`SourceModules`: every ``aiter.*`` module is a lazy view of its source file that executes
only the top-level statements binding the names a caller asks for (plus, transitively, what
those statements need), with the original text and line numbers -- the math is aiter's own,
never rewritten. aiter's JIT and ROCm parts (``aiter.jit.*``, the pybind enums of
``aiter.ops.enum``) are stubs: ``compile_ops`` functions fail only if called, ``get_gfx*``
answer gfx950, ``ActivationType`` / ``QuantType`` members are opaque distinct constants.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import types
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import atomic_write_text, read_regular_bytes
from fp4moe.infra.paths import wheel_dir

FUSED_MOE_FILE = "aiter/fused_moe.py"
SHUFFLE_FILE = "aiter/ops/shuffle.py"
VERSION_FILE = "aiter/_version.py"
STUB_GFX = "gfx950"
#: The file where a child notes, in one line, which aiter code it is about to run, so that an exit
#: or a hang inside aiter's code is reported naming the file (set by the source-checks child; unset
#: or empty elsewhere, where :func:`note_stage` does nothing).
PROGRESS_ENV = "FP4MOE_AITER_CHECK_PROGRESS"


def note_stage(stage: str) -> None:
    """Note what aiter code is about to run (a no-op outside the source-checks child)."""
    path = os.environ.get(PROGRESS_ENV)
    if path:
        atomic_write_text(path, stage, replace=True)  # a FIFO left there by aiter's code: renamed over


@dataclass
class AiterSource:
    """aiter's files as text, keyed by their path inside a checkout (``aiter/...``)."""

    origin: str  # human-readable: where the files came from
    _dir: Path | None = None
    _zip: Path | None = None
    _names: frozenset | None = None

    # ------------------------------------------------------------------ constructors
    @property
    def location(self) -> tuple[str, str]:
        """(``"dir"`` | ``"wheel"``, path): enough to open the same source again in a child."""
        return ("dir", str(self._dir)) if self._dir is not None else ("wheel", str(self._zip))

    @classmethod
    def from_dir(cls, path: str | Path, option: str = "--aiter-src") -> "AiterSource":
        """A checkout holding ``aiter/`` or the ``aiter`` package directory itself; errors name
        ``option`` (``--base-src`` for the older tree of an upgrade compare)."""
        p = Path(path)
        if not p.is_dir():
            raise ValueError(f"{option} {path}: " + ("not a directory" if p.exists() else "no such directory"))
        if (p / "aiter" / "ops").is_dir():
            root = p
        elif (p / "ops").is_dir() and p.name == "aiter":
            root = p.parent
        else:
            raise ValueError(f"{option} {path}: holds neither aiter/ops/ nor is the aiter package directory")
        return cls(origin=f"source tree {root}", _dir=root)

    @classmethod
    def from_wheel(cls, path: str | Path) -> "AiterSource":
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"--aiter-wheel {path}: no such file")
        try:
            with zipfile.ZipFile(p) as z:
                names = set(z.namelist())
        except zipfile.BadZipFile as e:
            raise ValueError(f"--aiter-wheel {path}: not a wheel (zip) file: {e}") from e
        if SHUFFLE_FILE not in names and FUSED_MOE_FILE not in names:
            raise ValueError(f"--aiter-wheel {path}: holds neither {SHUFFLE_FILE} nor {FUSED_MOE_FILE}")
        return cls(origin=f"wheel {p.name} (read, not installed)", _zip=p)

    @classmethod
    def from_installed(cls) -> "AiterSource | None":
        """The installed aiter's files, found without importing aiter; None if none is installed.

        A directory named ``aiter`` without ``__init__.py`` on ``sys.path`` (e.g. a stray
        ``aiter/`` test folder) is a namespace package, not aiter: it is ignored.
        """
        try:
            spec = importlib.util.find_spec("aiter")
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
            return None
        pkg_dir = Path(spec.origin).parent
        return cls(origin=f"installed aiter at {pkg_dir}", _dir=pkg_dir.parent)

    # ------------------------------------------------------------------ access
    def read(self, relpath: str) -> str | None:
        """Text of ``relpath`` (e.g. ``aiter/ops/shuffle.py``), or None when absent."""
        if self._dir is not None:
            f = self._dir / relpath
            if not os.path.lexists(f):
                return None
            try:  # present but a folder, a FIFO, a symlink loop or unreadable: the tree is broken,
                # not the function missing (exit 2 naming the file, never a failed check)
                return read_regular_bytes(f).decode("utf-8")
            except OSError as e:
                raise ValueError(f"{self.origin}: {relpath}: cannot read: "
                                 f"{e.strerror or str(e).replace(f'{f}: ', '')}") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"{self.origin}: {relpath}: cannot read: {e}") from None
        assert self._zip is not None
        try:
            with zipfile.ZipFile(self._zip) as z:
                try:
                    return z.read(relpath).decode("utf-8")
                except KeyError:
                    return None
        except (zipfile.BadZipFile, zlib.error, OSError, UnicodeDecodeError, EOFError) as e:
            raise ValueError(f"{self.origin}: {relpath}: cannot read from the wheel: {e}") from e

    def exists(self, relpath: str) -> bool:
        if self._dir is not None:  # present in any form: read() names what is wrong with it
            return os.path.lexists(self._dir / relpath)
        if self._names is None:
            try:
                with zipfile.ZipFile(self._zip) as z:
                    self._names = frozenset(z.namelist())
            except (zipfile.BadZipFile, OSError) as e:
                raise ValueError(f"{self.origin}: cannot read the wheel: {e}") from e
        return relpath in self._names

    def is_dir(self, relpath: str) -> bool:
        """A folder of the tree (a namespace package has no ``__init__.py``)."""
        if self._dir is not None:
            return (self._dir / relpath).is_dir()
        self.exists("")
        prefix = relpath.rstrip("/") + "/"
        return any(n.startswith(prefix) for n in self._names)

    def version(self) -> str | None:
        text = self.read(VERSION_FILE)
        if text:
            m = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""", text)
            if m:
                return m.group(1)
        if self._zip is not None:  # amd_aiter-0.1.7.post2.dev18-py3-none-any.whl
            parts = self._zip.name.split("-")
            if len(parts) > 2:
                return parts[1]
        return None


# ---------------------------------------------------------------------- signatures
def function_params(source_text: str | None, func_name: str) -> list[str] | None:
    """Parameter names of the module-level ``def func_name`` in ``source_text`` (via ``ast``).

    None when the text is missing or defines no such function.
    """
    if not source_text:
        return None
    tree = ast.parse(source_text)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func_name:
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            if a.vararg:
                names.append("*" + a.vararg.arg)
            if a.kwarg:
                names.append("**" + a.kwarg.arg)
            return names
    return None


# ---------------------------------------------------------------------- executing shuffle.py
STUB_MARK = "is a stub: aiter's runtime is not loaded by fp4moe.targets.aiter.source"


class _Unavailable:
    """Stands for any aiter attribute the stubs do not model; fails only if actually used."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} {STUB_MARK}")

    def __getattr__(self, item):
        return _Unavailable(f"{self._name}.{item}")


class _StubModule(types.ModuleType):
    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Unavailable(f"{self.__name__}.{item}")


def _dtypes_stub(name: str) -> types.ModuleType:
    m = _StubModule(name)
    fallback = torch.uint8
    m.fp4x2 = getattr(torch, "float4_e2m1fn_x2", fallback)
    m.fp8_e8m0 = getattr(torch, "float8_e8m0fnu", fallback)
    m.fp8 = torch.float8_e4m3fn  # gfx950's fp8
    m.i4x2 = getattr(torch, "int4", fallback)
    m.bf16, m.fp16, m.fp32 = torch.bfloat16, torch.float16, torch.float32
    m.i32, m.i16, m.i8, m.u8 = torch.int32, torch.int16, torch.int8, torch.uint8
    return m


def _chip_info_stub(name: str) -> types.ModuleType:
    m = _StubModule(name)
    m.get_gfx = lambda *a, **k: STUB_GFX
    m.get_gfx_runtime = lambda *a, **k: STUB_GFX
    m.get_cu_num = lambda *a, **k: 256
    return m


def _make_stub(name: str) -> types.ModuleType:
    if name.endswith(".dtypes") or name == "aiter.utility.dtypes":
        m = _dtypes_stub(name)
    elif name.endswith("chip_info"):
        m = _chip_info_stub(name)
    else:
        m = _StubModule(name)
        if name == "aiter":
            m.dtypes = _dtypes_stub("aiter.dtypes")
            m.get_gfx = lambda *a, **k: STUB_GFX
    m.__path__ = []  # a package, so that submodule imports resolve through the finder
    m.__file__ = f"<fp4moe stub {name}>"
    return m


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "aiter" or fullname.startswith("aiter."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _make_stub(spec.name)

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


@contextlib.contextmanager
def aiter_stubs():
    """Within the block, every ``aiter`` / ``aiter.*`` import resolves to a stub; afterwards
    ``sys.modules`` holds exactly the aiter entries it held before (a real aiter included)."""
    saved = {k: v for k, v in sys.modules.items() if k == "aiter" or k.startswith("aiter.")}
    for k in saved:
        del sys.modules[k]
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k == "aiter" or k.startswith("aiter.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def load_module_from_source(text: str, module_name: str, origin: str) -> types.ModuleType:
    """Execute one aiter source file in a fresh module (``__package__`` from its path), with
    ``aiter.*`` imports stubbed for the exec only. The module is not added to ``sys.modules``."""
    package = module_name.rpartition(".")[0]
    mod = types.ModuleType(f"fp4moe_aiter_src.{module_name}")
    mod.__file__ = origin
    mod.__package__ = package
    code = compile(text, origin, "exec")
    with aiter_stubs():
        exec(code, mod.__dict__)
    return mod


def load_shuffle_module(src: AiterSource) -> types.ModuleType | None:
    """aiter's ``aiter/ops/shuffle.py`` executed from source; None when the file is absent."""
    text = src.read(SHUFFLE_FILE)
    if text is None:
        return None
    return load_module_from_source(text, "aiter.ops.shuffle", f"{src.origin}:{SHUFFLE_FILE}")


# ---------------------------------------------------------------------- aiter's own functions, lazily
#: Modules that are aiter's JIT / ROCm runtime: always stubs, never executed from source.
STUB_PREFIXES = ("aiter.jit",)
ENUM_MODULE = "aiter.ops.enum"


class StubConstant:
    """A member of a stubbed pybind enum (``QuantType.per_1x32`` ...): equal only to itself."""

    def __init__(self, qualname: str):
        self.qualname = qualname

    def __repr__(self) -> str:
        return self.qualname


class StubEnum:
    """Stands for a pybind11 enum class of aiter's compiled core; members are made on access."""

    def __init__(self, name: str):
        self._name = name
        self._members: dict[str, StubConstant] = {}

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return self._members.setdefault(item, StubConstant(f"{self._name}.{item}"))

    def __call__(self, value):  # Enum(value): only a member passed back through is meaningful
        if isinstance(value, StubConstant):
            return value
        raise RuntimeError(f"{self._name}({value!r}) {STUB_MARK}")


def _compile_ops_stub(*_a, **_k):
    """``@compile_ops(...)``: the decorated op exists but fails if called (it is a JIT kernel)."""
    def deco(fn):
        return _Unavailable(f"{getattr(fn, '__module__', 'aiter')}.{getattr(fn, '__name__', 'op')} (compiled op)")
    return deco


def _passthrough_decorator(*a, **_k):
    """``@torch_compile_guard()`` and the like: identity (they only register ops for torch.compile)."""
    if len(a) == 1 and callable(a[0]) and not _k:
        return a[0]
    return lambda fn: fn


def _runtime_stub(name: str) -> types.ModuleType:
    if name.endswith("chip_info"):
        m = _chip_info_stub(name)
    else:
        m = _StubModule(name)
    m.compile_ops = _compile_ops_stub
    m.torch_compile_guard = _passthrough_decorator
    m.__path__ = []
    m.__file__ = f"<fp4moe stub {name}>"
    return m


def _enum_stub(name: str) -> types.ModuleType:
    m = _StubModule(name)
    for enum in ("ActivationType", "QuantType", "MlaVersion"):
        setattr(m, enum, StubEnum(enum))
    m.__file__ = f"<fp4moe stub {name}>"
    return m


def _stored_names(fn: ast.AST) -> set[str]:
    """Names a function binds locally (parameters, assignments, imports, loop targets)."""
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not fn:
            out.add(n.name)
    return out


def _loaded_names(nodes) -> set[str]:
    return {n.id for node in nodes if node is not None for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def statement_needs(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names needed when the statement executes, names needed only when its function runs)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = stmt.args
        at_def = list(stmt.decorator_list) + [d for d in a.defaults + a.kw_defaults if d is not None]
        at_def += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation is not None]
        at_def += [stmt.returns] if stmt.returns is not None else []
        body = _loaded_names(stmt.body) - _stored_names(stmt)
        return _loaded_names(at_def), body
    return _loaded_names([stmt]), set()


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    return []


def _walk_top(body):
    """Top-level statements, descending into if/try/with blocks (not into defs)."""
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.Try, ast.With)) or type(stmt).__name__ == "TryStar":
            for block in ("body", "orelse", "finalbody"):
                yield from _walk_top(getattr(stmt, block, []))
            for h in getattr(stmt, "handlers", []):
                yield from _walk_top(h.body)
        else:
            yield stmt


@dataclass
class _FileIndex:
    relpath: str
    origin: str
    tree: ast.Module
    bindings: dict[str, list[ast.stmt]] = field(default_factory=dict)
    stars: list[ast.ImportFrom] = field(default_factory=list)
    future: list[ast.stmt] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, relpath: str, origin: str) -> "_FileIndex":
        try:
            tree = ast.parse(text, filename=f"{origin}:{relpath}")
        except SyntaxError as e:
            raise ValueError(f"{origin}: {relpath}: syntax error at line {e.lineno}: {e.msg}") from e
        idx = cls(relpath, origin, tree)
        for stmt in _walk_top(tree.body):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                idx.future.append(stmt)
            elif isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                idx.stars.append(stmt)
            for name in _bound_names(stmt):
                idx.bindings.setdefault(name, []).append(stmt)
        return idx


class LazySourceModule(types.ModuleType):
    """An aiter module that executes, from its source, only the statements a caller needs."""

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        loader = self.__dict__.get("_fp4moe_loader")
        if loader is None:
            raise AttributeError(item)
        return loader.resolve(self, item)


class SourceModules:
    """aiter's modules from an :class:`AiterSource`, loaded lazily, never importing aiter.

    ``module("aiter.fused_moe").torch_moe_stage1`` executes that ``def`` and the top-level
    statements it depends on. Call aiter's functions inside ``with mods.active():`` so that
    their own lazy ``from aiter... import`` statements resolve here too.
    """

    def __init__(self, src: AiterSource):
        self.src = src
        self._modules: dict[str, types.ModuleType] = {}
        self._index: dict[str, _FileIndex] = {}
        self._loading: set[tuple[str, str]] = set()
        #: (module, name) pairs executed so far, for reports ("which aiter code ran")
        self.executed: list[tuple[str, str, int]] = []

    # ------------------------------------------------------------------ modules
    def _file_of(self, modname: str) -> tuple[str, bool] | None:
        base = modname.replace(".", "/")
        for rel, pkg in ((f"{base}/__init__.py", True), (f"{base}.py", False)):
            if self.src.exists(rel):
                return rel, pkg
        if self.src.is_dir(base):
            return "", True  # a namespace package (no __init__.py), e.g. aiter/utility
        return None

    def module(self, modname: str) -> types.ModuleType:
        m = self._modules.get(modname)
        if m is not None:
            return m
        if modname == ENUM_MODULE:
            m = _enum_stub(modname)
        elif modname.startswith(STUB_PREFIXES):
            m = _runtime_stub(modname)
        else:
            found = self._file_of(modname)
            if found is None:
                m = _make_stub(modname)  # absent from this aiter: attributes fail only if used
            else:
                rel, pkg = found
                m = LazySourceModule(modname)
                m.__file__ = f"{self.src.origin}:{rel}"
                m.__package__ = modname if pkg else modname.rpartition(".")[0]
                if pkg:
                    m.__path__ = []
                m._fp4moe_loader = self
                m._fp4moe_relpath = rel
        self._modules[modname] = m
        return m

    def _index_of(self, m: types.ModuleType) -> _FileIndex:
        rel = m.__dict__["_fp4moe_relpath"]
        idx = self._index.get(rel)
        if idx is None and not rel:
            return _FileIndex.parse("", f"{m.__name__.replace('.', '/')}/ (namespace package)", self.src.origin)
        if idx is None:
            text = self.src.read(rel)
            if text is None:
                raise LookupError(f"{self.src.origin}: {rel} is absent")
            idx = self._index[rel] = _FileIndex.parse(text, rel, self.src.origin)
        return idx

    def binds(self, m: types.ModuleType, name: str) -> bool:
        if isinstance(m, LazySourceModule):
            return name in self._index_of(m).bindings
        return name in m.__dict__

    # ------------------------------------------------------------------ names
    def resolve(self, m: types.ModuleType, name: str):
        key = (m.__name__, name)
        if key in self._loading:
            raise ImportError(f"{m.__file__}: circular definition of {name}")
        idx = self._index_of(m)
        self._loading.add(key)
        try:
            stmts = idx.bindings.get(name)
            if stmts:
                for stmt in stmts:
                    self._execute(m, idx, stmt, name)
            else:
                sub = self._file_of(f"{m.__name__}.{name}") if hasattr(m, "__path__") else None
                star = next((st for st in reversed(idx.stars) if self.binds(self._import_target(m, st), name)), None)
                if star is not None:
                    m.__dict__[name] = getattr(self._import_target(m, star), name)
                elif sub is not None:
                    m.__dict__[name] = self.module(f"{m.__name__}.{name}")
                else:
                    raise AttributeError(f"{idx.origin}: {idx.relpath} defines no {name}")
        finally:
            self._loading.discard(key)
        if name not in m.__dict__:
            raise AttributeError(f"{idx.origin}: {idx.relpath}: executing the definition of {name} did not bind it")
        return m.__dict__[name]

    def _import_target(self, m: types.ModuleType, stmt: ast.ImportFrom) -> types.ModuleType:
        pkg = m.__package__ or ""
        if stmt.level:
            base = pkg.split(".")[: len(pkg.split(".")) - stmt.level + 1]
            target = ".".join(base + ([stmt.module] if stmt.module else []))
        else:
            target = stmt.module
        return self.module(target)

    def _execute(self, m: types.ModuleType, idx: _FileIndex, stmt: ast.stmt, name: str) -> None:
        at_exec, at_call = statement_needs(stmt)
        own = set(_bound_names(stmt))
        for name in sorted(at_exec - own):
            if name not in m.__dict__ and name in idx.bindings:
                self.resolve(m, name)
        for name in sorted(at_call - own):
            if name not in m.__dict__ and name in idx.bindings and (m.__name__, name) not in self._loading:
                try:
                    self.resolve(m, name)
                except Exception:  # noqa: BLE001 -- needed only if the function reaches it; a NameError then names it
                    pass
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            stmt = self._only_alias(stmt, name)
        code = compile(ast.Module(body=[*idx.future, stmt], type_ignores=[]), f"{idx.origin}:{idx.relpath}", "exec")
        note_stage(f"executing {idx.relpath}:{stmt.lineno} ({', '.join(_bound_names(stmt)) or 'statement'})")
        with self.active():
            exec(code, m.__dict__)
        self.executed.append((idx.relpath, ", ".join(_bound_names(stmt)), stmt.lineno))

    @staticmethod
    def _only_alias(stmt, name: str):
        """An import statement reduced to the alias that binds ``name`` (nothing else imported)."""
        keep = [a for a in stmt.names if (a.asname or a.name).split(".")[0] == name]
        new = type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "names": keep})
        return ast.copy_location(new, stmt)

    # ------------------------------------------------------------------ import hook
    @contextlib.contextmanager
    def active(self):
        """Within the block, ``import aiter...`` resolves to these modules; ``sys.modules`` is
        restored afterwards (a real aiter already imported is left as it was)."""
        if getattr(self, "_depth", 0):
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        saved = {k: v for k, v in sys.modules.items() if k == "aiter" or k.startswith("aiter.")}
        for k in saved:
            del sys.modules[k]
        finder = _SourceFinder(self)
        sys.meta_path.insert(0, finder)
        self._depth = 1
        try:
            yield self
        finally:
            self._depth = 0
            sys.meta_path.remove(finder)
            for k in [k for k in sys.modules if k == "aiter" or k.startswith("aiter.")]:
                del sys.modules[k]
            sys.modules.update(saved)

    def function(self, modname: str, name: str):
        """aiter's ``modname.name`` (loaded from source), or None when this aiter has none."""
        m = self.module(modname)
        if not isinstance(m, LazySourceModule) or name not in self._index_of(m).bindings:
            return None
        return self.resolve(m, name)

    def where(self, modname: str, name: str) -> str:
        """``aiter/fused_moe.py:3532`` for a function, for reports."""
        m = self.module(modname)
        if isinstance(m, LazySourceModule):
            stmts = self._index_of(m).bindings.get(name)
            if stmts:
                return f"{m.__dict__['_fp4moe_relpath']}:{stmts[-1].lineno}"
        return f"{modname.replace('.', '/')}.py (absent)"


class _SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, mods: SourceModules):
        self.mods = mods

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "aiter" or fullname.startswith("aiter."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return self.mods.module(spec.name)

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            sys.modules[parent].__dict__.setdefault(child, module)



# ---------------------------------------------------------------------- public names for other loaders
#: the pieces fp4moe.targets.aiter.dispatch.loader reuses (partial execution of an aiter file,
#: the identity decorator, the fail-if-used placeholder)
FileIndex = _FileIndex
passthrough_decorator = _passthrough_decorator
Unavailable = _Unavailable


# ---------------------------------------------------------------------- which aiter the options name
#: an amd_aiter wheel to read when none is named (``find_wheel``)
WHEEL_ENV = "FP4MOE_AITER_WHEEL"


def find_wheel() -> Path | None:
    """``$FP4MOE_AITER_WHEEL`` or the newest amd_aiter wheel in the wheel cache (``fp4moe.infra.paths.wheel_dir()``); None if neither."""
    env = os.environ.get(WHEEL_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    cache = wheel_dir()  # ci/fetch_amd_aiter_wheel.sh downloads here (outside the checkout)
    wheels = sorted(cache.glob("amd_aiter-*.whl")) if cache.is_dir() else []
    return wheels[-1] if wheels else None


def resolve_source(src_dir: str | None = None, wheel: str | None = None) -> AiterSource:
    """The aiter ``--aiter-src DIR`` or ``--aiter-wheel WHEEL`` names, else the installed one."""
    if src_dir and wheel:
        raise ValueError("--aiter-src and --aiter-wheel are exclusive: give one")
    if src_dir:
        return AiterSource.from_dir(src_dir)
    if wheel:
        return AiterSource.from_wheel(wheel)
    src = AiterSource.from_installed()
    if src is None:
        raise GateCannotRun(
            "no aiter sources: aiter is not installed (importlib.util.find_spec('aiter') found no package); "
            "pass --aiter-src DIR or --aiter-wheel WHEEL (bash ci/fetch_amd_aiter_wheel.sh fetches the PyPI wheel)"
        )
    return src
