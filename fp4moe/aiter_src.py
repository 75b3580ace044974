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
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

FUSED_MOE_FILE = "aiter/fused_moe.py"
SHUFFLE_FILE = "aiter/ops/shuffle.py"
VERSION_FILE = "aiter/_version.py"
STUB_GFX = "gfx950"


@dataclass
class AiterSource:
    """aiter's files as text, keyed by their path inside a checkout (``aiter/...``)."""

    origin: str  # human-readable: where the files came from
    _dir: Path | None = None
    _zip: Path | None = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dir(cls, path: str | Path) -> "AiterSource":
        """A checkout holding ``aiter/`` or the ``aiter`` package directory itself."""
        p = Path(path)
        if not p.is_dir():
            raise ValueError(f"--aiter-src {path}: not a directory")
        if (p / "aiter" / "ops").is_dir():
            root = p
        elif (p / "ops").is_dir() and p.name == "aiter":
            root = p.parent
        else:
            raise ValueError(f"--aiter-src {path}: holds neither aiter/ops/ nor is the aiter package directory")
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
            return f.read_text(encoding="utf-8") if f.is_file() else None
        assert self._zip is not None
        with zipfile.ZipFile(self._zip) as z:
            try:
                return z.read(relpath).decode("utf-8")
            except KeyError:
                return None

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
STUB_MARK = "is a stub: aiter's runtime is not loaded by fp4moe.aiter_src"


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
