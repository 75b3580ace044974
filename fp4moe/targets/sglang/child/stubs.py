"""Import SGLang's FP4 MoE modules on a machine that lacks its heavy and GPU-only dependencies.

CHILD PROCESS ONLY (``fp4moe.targets.sglang.child.drive``): everything here changes ``sys.modules`` and
``sys.meta_path`` for the life of the process and is never undone. The parent gate never
imports this module (``tests/targets/sglang/test_isolation.py`` proves it).

- :func:`install_stub_finder` adds, at the END of ``sys.meta_path``, a finder that answers
  only for the top-level names in :data:`STUB_ROOTS` and only when nothing earlier on the
  path found them: a module that is really installed (numpy, msgspec, safetensors, torch)
  is always the real one. ``FORCE_STUB_ROOTS`` are stubbed even when installed, because the
  SGLang path under test never calls them and importing them costs seconds.
- A stub module answers any attribute with a permissive stub class (:class:`_StubMeta`):
  it can be subclassed, called, used as a decorator (``@triton.jit`` returns the function),
  subscripted and compared. A stub that leaked into the FP4 path under test would show up in
  the checks, which compare real bytes and real outputs.
- :func:`bare_sglang_package` makes ``sglang`` a namespace over its directory without
  executing ``sglang/__init__.py`` (which patches transformers classes at import).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path

#: Top-level modules SGLang's import graph reaches on the FP4 MoE path that are heavy,
#: GPU-only or optional. Stubbed only where missing (see module docstring).
STUB_ROOTS = (
    "triton", "transformers", "torchvision", "torchaudio", "xgrammar", "openai", "tiktoken",
    "sgl_kernel", "flashinfer", "deep_gemm", "vllm", "outlines", "outlines_core",
    "partial_json_parser", "compressed_tensors", "pybase64", "uvloop", "zmq", "fastapi",
    "uvicorn", "orjson", "requests", "aiohttp", "setproctitle", "psutil", "pydantic",
    "huggingface_hub", "einops", "decord", "PIL", "cuda", "pynvml", "IPython", "interegular",
    "llguidance", "modelscope", "soundfile", "sentencepiece", "tokenizers",
    "prometheus_client", "blobfile", "datasets", "gguf", "mooncake", "mori", "nixl",
    "quack", "cutlass", "cuda_python", "nvtx", "tqdm", "hf_transfer", "torchao", "kernels",
    "sglang_router", "grpc", "google", "anthropic", "xxhash", "cpuinfo", "py_cpuinfo",
    "numba", "starlette", "jinja2", "yaml", "ray", "mistral_common", "timm",
    "flash_attn", "nvidia", "tilelang", "tvm_ffi", "apache_tvm_ffi", "cutlass_dsl",
    "amdsmi", "pyrsmi", "smg_grpc_proto", "opentelemetry", "lark", "watchfiles",
    "python_multipart", "multipart", "websockets", "httpx", "openai_harmony", "sympy",
    "hip", "ninja",
)
#: Stubbed even when installed: never called on this path, slow to import.
FORCE_STUB_ROOTS = ("transformers", "torchvision", "torchaudio", "datasets", "huggingface_hub", "pydantic",
                    "fastapi", "openai", "uvicorn", "starlette")

STUB_MARK = "is a stub (fp4moe.targets.sglang.child.stubs): the FP4 MoE gate does not load this dependency"


class _StubMeta(type):
    """Metaclass of every stub attribute: attribute access, subscription, iteration,
    ``|`` (PEP 604 unions in annotations) and comparison all answer with more stubs."""

    def __getattr__(cls, item):
        return _attr_stub(cls.__qualname__, item)

    def __getitem__(cls, item):
        return cls

    __setitem__ = lambda cls, key, value: None  # noqa: E731

    def __contains__(cls, item):
        return False

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __mro_entries__(cls, bases):  # pragma: no cover - classes are already valid bases
        return (cls,)


class _StubBase(metaclass=_StubMeta):
    def __init_subclass__(cls, **kwargs):  # TypedDict-style ``total=False`` and the like
        pass

    def __new__(cls, *args, **kwargs):
        # decorator use: @stub or @stub(...)(fn) returns the function unchanged
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], type):
            return args[0]
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        # @stub(...)(fn) returns fn (also classmethod/staticmethod objects); else another stub
        if len(args) == 1 and not kwargs:
            return args[0]
        return type(self)()

    def __getattr__(self, item):
        return _attr_stub(type(self).__qualname__, item)

    def __getitem__(self, item):
        return self

    __setitem__ = _StubMeta.__setitem__


_CLASSES: dict[str, type] = {}


def _attr_stub(owner: str, item: str) -> type:
    """The stub for ``owner.item``; dunder lookups stay AttributeError (copy, pickle, typing)."""
    if item.startswith("__") and item.endswith("__"):
        raise AttributeError(item)
    return _stub_class(f"{owner}.{item}")


def _stub_class(qualname: str) -> type:
    if qualname not in _CLASSES:
        c = _StubMeta(qualname.rsplit(".", 1)[-1], (_StubBase,), {"__module__": "fp4moe_stub"})
        c.__qualname__ = qualname
        _CLASSES[qualname] = c
    return _CLASSES[qualname]


class StubModule(types.ModuleType):
    def __getattr__(self, item):
        return _attr_stub(self.__name__, item)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots, stubbed: list[str], custom: dict):
        self.roots = set(roots)
        self.stubbed = stubbed
        self.custom = custom  # module name -> callable(module) filling real attributes

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        m.__file__ = f"<fp4moe stub {spec.name}>"
        return m

    def exec_module(self, module):
        name = module.__name__
        self.stubbed.append(name)
        if name in self.custom:
            self.custom[name](module)
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


STUBBED: list[str] = []  # every module name that resolved to a stub, in import order


class _NoGPUDriver:
    """``triton.runtime.driver``: asking for the active GPU target raises, as it does without
    a GPU, so SGLang's ``try: ...get_current_target() except: "cpu"`` probes answer "cpu"."""

    @property
    def active(self):
        raise RuntimeError(f"no active GPU driver: triton {STUB_MARK}")


def _triton(m: types.ModuleType) -> None:
    rt = StubModule("triton.runtime")
    rt.__path__, rt.__file__ = [], "<fp4moe stub triton.runtime>"
    rt.driver = _NoGPUDriver()
    sys.modules["triton.runtime"] = rt
    m.runtime = rt


#: module name -> filler run when the stub is created (real behaviour SGLang's probes rely on)
DEFAULT_FILLERS = {"triton": _triton}


def install_stub_finder(custom: dict | None = None, *, force: bool = True) -> None:
    """Stub the missing heavy roots (appended finder) and, with ``force``, the forced ones
    (prepended). ``force=False`` (the gfx950 mode of ``fp4moe.targets.sglang.child.drive``) stubs only what
    is not installed: every installed module, aiter and triton included, is the real one."""
    custom = {**DEFAULT_FILLERS, **(custom or {})}
    if force:
        sys.meta_path.insert(0, _StubFinder(FORCE_STUB_ROOTS, STUBBED, custom))
    sys.meta_path.append(_StubFinder(STUB_ROOTS, STUBBED, custom))


def bare_sglang_package(root: str | Path) -> types.ModuleType:
    """``sglang`` as a package over ``root/sglang`` whose ``__init__.py`` is NOT executed."""
    pkg_dir = Path(root) / "sglang"
    if not (pkg_dir / "srt").is_dir():
        raise FileNotFoundError(f"{pkg_dir}: not an SGLang package (no srt/ inside)")
    m = types.ModuleType("sglang")
    m.__path__ = [str(pkg_dir)]
    m.__file__ = str(pkg_dir / "__init__.py")
    m.__package__ = "sglang"
    sys.modules["sglang"] = m
    return m
