"""Importing SGLang's FP4 MoE modules in the child, and saying whose import-time code runs.

Index: :class:`ImportTrail` (a meta path finder wrapping ``sglang.*`` loaders: the stack of
SGLang files whose code is executing, told before and after each), :func:`stage_text` (that
stack as the stage line the harness names when SGLang's code ends the process),
:func:`import_sglang` (fp8 and the aiter runner, with the stubs), :func:`sglang_version`.
CHILD PROCESS ONLY.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fp4moe.targets.sglang.child.aiter_spy import aiter_fillers
from fp4moe.targets.sglang.modes import Mode


class ImportTrail:
    """Which of SGLang's modules is executing its import-time code, told to ``report(stack,
    raised)`` before and after each one runs (the stack of files begun and not finished,
    outermost first; ``raised``: the module stack an exception, ``SystemExit`` included, is
    unwinding from). The drive notes each change as the harness stage (:func:`stage_text`), so
    when SGLang's code ends the process in an import (``os._exit``, a signal, a hang), the parent
    names the module that did it instead of the last line it printed. A meta path finder first in
    ``sys.meta_path`` finds ``sglang.*`` modules with the finders after it and wraps their
    loaders; nothing else of the import changes (the wrapped loader delegates every other
    attribute)."""

    def __init__(self, root: str, report, prefix: str = "sglang."):
        self.roots = {os.path.abspath(root), os.path.realpath(root)}  # a tree of symlinks: its own paths
        self.report, self.prefix = report, prefix
        self.stack: list[str] = []
        self.raised: dict | None = None  # the innermost module an exception left (SystemExit too)

    def rel(self, origin: str) -> str:
        here = os.path.abspath(origin)
        for root in sorted(self.roots, key=len, reverse=True):
            if here.startswith(root + os.sep):
                return os.path.relpath(here, root)
        return origin

    def tell(self) -> None:
        self.report(list(self.stack), self.raised)

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.prefix):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.origin and spec.has_location and hasattr(spec.loader, "exec_module"):
            spec.loader = _TrailLoader(spec.loader, self, self.rel(spec.origin))
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _TrailLoader:
    def __init__(self, real, trail: ImportTrail, rel: str):
        self._real, self._trail, self._rel = real, trail, rel

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        t = self._trail
        t.stack.append(self._rel)
        t.tell()
        try:
            self._real.exec_module(module)
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: they end the child
            if t.raised is None:  # the innermost module it came out of
                t.raised = {"module": list(t.stack), "type": type(e).__name__}
            t.stack.pop()
            t.tell()
            raise
        t.stack.pop()
        t.raised = None  # an exception an outer module caught is no longer the story
        t.tell()

    def __getattr__(self, name):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._real, name)


def stage_text(stack: list[str], raised: dict | None) -> str:
    """The stage line for a trail report: the innermost module whose code runs (beside the one
    importing it), or the module an exception is unwinding from."""

    def importing(files: list) -> str:
        return f"importing {files[-1]}" + (f" (imported by {files[-2]})" if len(files) > 1 else "")

    if stack:
        return importing(stack)
    if raised and raised.get("module"):
        return f"unwinding {raised.get('type', 'an exception')} raised while {importing(raised['module'])}"
    return "importing SGLang's FP4 MoE modules"


def import_sglang(root: str, shuffles: dict, mode: str = "cpu", trail=None, stub_aiter: bool = True):
    """SGLang's fp8 and aiter-runner modules, imported with the stubs; ``trail``: a
    ``report(stack, raised)`` for :class:`ImportTrail` (None: no trail); ``stub_aiter=False``
    (cpu mode): the ``aiter`` already loaded (the dispatch loader's) is the one SGLang imports."""
    from fp4moe.targets.sglang.child import patches, stubs

    for k, v in patches.ENV.items():
        os.environ.setdefault(k, v)
    import torch

    torch.set_num_threads(1)  # the parent's expectation runs single-threaded (same summation order)
    import torch._dynamo  # noqa: F401  SGLang's import-time torch.compile needs these before a triton stub
    import torch._inductor.compile_fx  # noqa: F401

    if mode == Mode.GFX950:
        stubs.install_stub_finder({}, force=False)  # only what is not installed; aiter is the real one
    elif stub_aiter:
        stubs.FORCE_STUB_ROOTS = tuple(stubs.FORCE_STUB_ROOTS) + ("aiter",)
        stubs.install_stub_finder(aiter_fillers(shuffles))
    else:
        stubs.install_stub_finder({})
    stubs.bare_sglang_package(root)
    import importlib

    tracker = ImportTrail(root, trail) if trail else None
    if tracker:
        tracker.install()
    try:
        fp8 = importlib.import_module("sglang.srt.layers.quantization.fp8")
        runner = importlib.import_module("sglang.srt.layers.moe.moe_runner.aiter")
    finally:
        if tracker:
            tracker.remove()
    return fp8, runner


def sglang_version(root: str) -> str:
    for rel in ("sglang/_version.py", "sglang/version.py"):
        p = Path(root) / rel
        if p.is_file():
            for line in p.read_text().splitlines():
                if line.strip().startswith("__version__") and "=" in line and ("'" in line or '"' in line):
                    return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"
