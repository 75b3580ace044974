"""Triton's CPU interpreter without three redundant steps: nothing it computes changes, only its speed.

Index: :func:`install` (idempotent; a no-op unless ``TRITON_INTERPRET=1``), :func:`uninstall`,
:func:`status` (what the kernel child records), :data:`OFF_ENV`, :data:`KNOWN_SOURCES`.

What is redundant (``triton/runtime/interpreter.py``, Triton 3.8 and 3.9 alike), measured with
py-spy on aiter's routing and GEMM jobs (the kernel child at e4048607, tiny shapes):

1. **A device-function call re-patches the language** (31% of the interpreted time). A kernel
   launch (``GridExecutor.__call__``) calls ``_patch_lang(kernel)``: every builtin of the
   ``triton.language`` modules the kernel's globals see (``tl``, ``tl.core``), of ``tl.tensor``,
   ``tl.math`` and ``tensor_descriptor_base`` is swapped for an interpreted one, for the launch. A
   device-function call (``InterpretedFunction.__call__``: each call of a ``@triton.jit`` helper
   from a kernel, in each program: ``tl.sort``'s bitonic stages, ``tl.standard``'s ``xor_sum``,
   aiter's own helpers) calls ``_patch_lang(helper)`` again and never restores it. When the modules
   the helper's globals see were patched by the live launch, that call only scans them with
   ``inspect.getmembers`` (their builtins are wrapped already, so none is wrapped again) and
   re-sets a few stateless closures to equal new ones. The fast path skips it when, and only
   when, every language module the helper's globals see was patched by a ``_patch_lang`` whose
   launch is still running (the set is emptied when the launch's scope is restored); a helper
   that sees a module the launch did not patch (a kernel with ``tl`` only, its helper
   ``tl.core``) is patched as before.
2. **``_get_np_dtype`` builds its table on every call** (10% once 1. is gone): a dict of 18
   Triton dtypes to numpy dtypes, made anew for each lookup. The fast path builds it once, from
   the shipped function itself (each key's value is what ``_get_np_dtype`` answers for it), and
   asks the shipped function for anything not in it (so a KeyError stays a KeyError).
3. **The integer-overflow sanitizer computes a check nobody reads** (40% of the interpreted time
   once 1. and 2. are gone). Every integer ``+``, ``-`` and ``*`` of a kernel (its index
   arithmetic) goes through ``TritonSemantic.binary_op_sanitize_overflow_impl``: both operands cast
   to int64, the operation again, two comparisons, an ``and``, then ``device_assert``, which returns
   at once unless ``options.debug``. Compiled, that dead code is dropped; interpreted, numpy runs it
   for every operation of every program. The interpreter's one builder has ``debug=False`` and
   nothing in it sets it (``InterpreterBuilder.__init__``, ``InterpreterOptions``): the fast path
   gives it ``sanitize_overflow=False``, which the sanitizer reads first and returns on.

Installed only where the sources of everything it stands in front of or relies on are the ones
read here (:data:`KNOWN_SOURCES`, sha256): any other Triton runs as it ships, and :func:`status`
says why. ``FP4MOE_TRITON_FASTPATH=0`` turns it off. Both ways, the kernel child's outputs at
e4048607 were bitwise equal and its rows identical (54 rows, 16 saved outputs); the child took
43.3 s off, 32.1 s with 1. alone (1. and 2.; 3. measured in docs/evidence/lean-gate.md).
tests/targets/aiter/test_interp_fastpath.py runs kernels that cross every path (nested helpers, a
generic reduce, a helper seeing ``tl.core``, integer index arithmetic) both ways.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os

#: set to "0" to run the interpreter as it ships
OFF_ENV = "FP4MOE_TRITON_FASTPATH"
#: sha256 of ``inspect.getsource`` of what the fast path stands in front of or relies on (the two
#: functions it replaces, the launch that restores the scope, and every patch ``_patch_lang`` makes:
#: that a second call changes nothing is read from these), as read in Triton 3.8.0 and 3.9.0
KNOWN_SOURCES = {
    "_patch_lang": {"e5beeba74ada48294c1d0dbee3e55a5ac185992e2197b7ee706f3f061d880989"},  # 3.8.0, 3.9.0
    "InterpretedFunction.__call__": {"f2446df46264004916b677478c2eef6ef349bd2c04a99da9eade596b78cd54d8"},  # 3.8.0, 3.9.0
    "GridExecutor.__call__": {"a8a9450a0a0406a335b61e41b531dfec7b8976ff394f286affa49ebb987f3d2f",  # 3.8.0
                             "e52d3746b0f33a88dd4e678c0dc5a9fb518efc986cebccc61e16185fd8860d46"},  # 3.9.0
    "_LangPatchScope": {"1b26f629cd7367a8d24ead385f65b25b7bac0c2e3afeecb939900c00c356efd8"},  # 3.8.0, 3.9.0
    "_patch_attr": {"e0c1b7d65a2463cded6ceead54250e0d8274c39bd6b7b92a8f48910ecd774dbe"},  # 3.8.0, 3.9.0
    "_patch_builtin": {"3c21c270fa61fb24d402b2c9bf3d3981f0c8ebaf42e8fd8322872935e60735ce"},  # 3.8.0, 3.9.0
    "_patch_lang_tensor": {"1475c3a06f26820ec10284aa303c5e8ef9fd53edeaad6fd0ce4c08d1b5bceabd",  # 3.8.0
                          "7c7aba5262fda6ed412ee905d99e1968f4282005ad04e8e2bfc5a02edba204cf"},  # 3.9.0
    "_patch_lang_core": {"8535aecd1dc601cf4cd00295324823170406c5d9f4088a2589f385b3ff719306",  # 3.8.0
                        "65cf7cf4d724979d1741e6c7e5826825a7178eb591663cb1974630f1fd724782"},  # 3.9.0
    "_patch_reduce_scan": {"ff294418b913c41c56f2ff2b7cc4a104081395c8e676c73d60e118c83cfc7852"},  # 3.8.0, 3.9.0
    "_get_np_dtype": {"8f20d41e3207891ae9872819aff05bee11d5c9bbe24f772282cb3ac72749fc75"},  # 3.8.0, 3.9.0
    # 3.: the sanitizer returns first on the flag; its only reader of the result is device_assert, a
    # no-op without options.debug; the builder's options are made once, debug off, sanitize on
    "TritonSemantic.binary_op_sanitize_overflow_impl": {
        "bdd7f3e24aa645ab7d9560d3c8df63c971f33d54937cb3ed5851e3c7d2eb9467"},  # 3.8.0, 3.9.0
    "TritonSemantic.device_assert": {"903c1a211e4087202be7bd766a739d01c5356b24318ff6db1037a81e4c2623d6",  # 3.8.0
                                     "361fee05925913d289320495bb4d8032d420cd732379bc642da22d5dff319dd5"},  # 3.9.0
    "InterpreterOptions": {"942c1a93071739ca17bb7951193ebf5a7726d24a2d4455d641592bd925508ce8"},  # 3.8.0, 3.9.0
    "InterpreterBuilder.__init__": {"50f8765dca4323449fe3f68b1701efaefbdfe1fc7110a8f9728ae4a32844ab93"},  # 3.8.0, 3.9.0
}
#: the dtypes ``_get_np_dtype``'s table holds (its keys, as read)
_TABLE_DTYPES = ("int1", "float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                 "int64", "uint64", "bfloat16", "float8e5", "float8e5b16", "float8e4nv", "float8e4b8", "float8e4b15")

_STATE: dict = {}  # "orig": {name: the shipped function}; "why": why not installed
_PATCHED: set = set()  # ids of the language modules patched by the live launch


def _digest(module, dotted: str) -> str | None:
    """sha256 of the source of ``module.<dotted>``; None where it is missing or has no source."""
    try:
        return hashlib.sha256(inspect.getsource(_named(module, dotted)).encode()).hexdigest()
    except (AttributeError, OSError, TypeError):
        return None


def _named(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _langs(fn) -> list:
    """The language modules ``_patch_lang`` patches for ``fn`` (as it picks them)."""
    import triton.language as tl

    return [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]


def _patch_lang(fn):
    """``_patch_lang`` as it ships, the modules it patched remembered until its scope is restored."""
    scope = _STATE["orig"]["_patch_lang"](fn)
    _PATCHED.update(id(m) for m in _langs(fn))
    restore = scope.restore

    def restore_and_forget():
        restore()
        _PATCHED.clear()

    scope.restore = restore_and_forget
    return scope


def _device_call(self, *args, **kwargs):
    """``InterpretedFunction.__call__`` without its ``_patch_lang`` where the live launch did it."""
    from triton.runtime import interpreter as interp

    if not _PATCHED or not all(id(m) in _PATCHED for m in _langs(self.fn)):
        return _STATE["orig"]["InterpretedFunction.__call__"](self, *args, **kwargs)
    fn = self.rewrite()
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise interp.InterpreterError(repr(e)) from e


def _np_dtype_once(orig):
    """``_get_np_dtype`` with its table built once, from ``orig``'s own answers."""
    import triton.language as tl

    table = {getattr(tl, name): orig(getattr(tl, name)) for name in _TABLE_DTYPES}
    u64 = orig(tl.pointer_type(tl.int8))

    def _get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, tl.pointer_type):
            return u64
        key = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(key, tl.pointer_type):
            return u64
        got = table.get(key)
        return got if got is not None else orig(tt_dtype)

    return _get_np_dtype


def install() -> bool:
    """Put the fast path in front of the interpreter. True when it is active."""
    if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get(OFF_ENV) == "0":
        _STATE.setdefault("why", f"off: {OFF_ENV}=0" if os.environ.get(OFF_ENV) == "0" else "off: not interpreted")
        return False
    if "orig" in _STATE:
        return True
    from triton.runtime import interpreter as interp

    differ = [name for name, digests in KNOWN_SOURCES.items() if _digest(interp, name) not in digests]
    if differ:
        _STATE["why"] = f"off: triton/runtime/interpreter.py {', '.join(differ)} differs from the source read here"
        return False
    _STATE.pop("why", None)
    orig = {"_patch_lang": interp._patch_lang, "InterpretedFunction.__call__": interp.InterpretedFunction.__call__,
            "_get_np_dtype": interp._get_np_dtype}
    interp._get_np_dtype = _np_dtype_once(orig["_get_np_dtype"])
    interp._patch_lang = _patch_lang
    interp.InterpretedFunction.__call__ = _device_call
    orig["options"] = opts = interp.interpreter_builder.options
    if not opts.debug:
        interp.interpreter_builder.options = dataclasses.replace(opts, sanitize_overflow=False)
    _STATE["orig"] = orig
    return True


def uninstall() -> None:
    from triton.runtime import interpreter as interp

    orig = _STATE.pop("orig", None)
    if orig is not None:
        interp._patch_lang = orig["_patch_lang"]
        interp.InterpretedFunction.__call__ = orig["InterpretedFunction.__call__"]
        interp._get_np_dtype = orig["_get_np_dtype"]
        interp.interpreter_builder.options = orig["options"]
    _PATCHED.clear()


def status() -> str:
    """``on`` or ``off: why``."""
    return "on" if "orig" in _STATE else _STATE.get("why", "off: not installed")
