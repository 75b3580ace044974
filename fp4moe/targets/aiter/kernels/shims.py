"""Correct float rounding for Triton's CPU interpreter (``TRITON_INTERPRET=1``), Triton 3.8/3.9.

Mirrors what a compiled kernel does at the two casts aiter's Triton MoE path relies on, so that
an interpreted run equals a GPU run bit for bit (measured: CPU == H200 outputs, routing included).

Two gaps in triton/runtime/interpreter.py make interpreted kernels differ from a GPU run:

1. fp32 -> bf16 TRUNCATES. ``InterpreterBuilder.cast_impl`` calls ``_convert_float(..., None)``
   (rounding_mode None = no rounding) for fp32 <-> bf16; ``create_fp_trunc`` (used by
   ``x.to(tl.bfloat16)`` and by ``tl.store`` of fp32 into a bf16 pointer) and ``get_bf16``
   both go through it. GPUs round to nearest even.
2. fp32 -> fp8 (``create_fp_to_fp``, RTNE) is wrong in ``_convert_float``: the round-up adds
   1 to the 3-bit mantissa without carrying into the exponent (1.9375 -> 1.0, the overflowed
   bit is OR-ed into the exponent field), rounds half-up (not to even), and does not saturate
   (the exponent is clamped, the mantissa kept: 500 -> 256). GPUs convert fp32 -> e4m3 with
   RNE and saturation to +-448 (NVIDIA ``cvt.rn.satfinite``; AMD gfx950 ``v_cvt_scalef32_pk_fp8``
   saturates too), NaN stays NaN.
3. (found by the self-test) fp8 e4m3 -> fp32 (``create_fp_to_fp`` upcast) decodes NaN
   (0x7F / 0xFF) as +-480; the shim decodes fp8 exactly. (dot_scaled has its own NaN mask.)

``install()`` replaces ``InterpreterBuilder.cast_impl`` (for fp32/fp64/fp16 -> bf16) and
``create_fp_to_fp`` (for any float -> fp8e4nv / fp8e5, and -> bf16) with exact versions built on
torch's own conversions (round to nearest even). It is a no-op unless TRITON_INTERPRET=1 and is
idempotent. Everything else falls through to the original methods.

``self_test()`` (run by the kernel checks and tests/targets/aiter/test_kernel_shims.py) compares
interpreted casts with torch's RNE/saturating conversions on edge values (ties, max normal,
past saturation, subnormals, NaN/Inf), 4096 seeded random values, and all 256 e4m3 codes.
"""

from __future__ import annotations

import os

import numpy as np
import torch

#: OCP FP8 e4m3fn / e5m2 largest finite values (what a saturating cast clamps to)
E4M3_MAX = 448.0
E5M2_MAX = 57344.0

_ORIG: dict = {}


def _tl():
    import triton.language as tl

    return tl


def _np_to_f32(data: np.ndarray, tl_dtype) -> np.ndarray:
    """Interpreter storage (numpy) of a float dtype -> float32 (exact widening)."""
    tl = _tl()
    if tl_dtype == tl.float32:
        return data
    if tl_dtype in (tl.float16, tl.float64):
        return data.astype(np.float32)  # fp64 -> fp32 is numpy RNE (a rounding, not a widening)
    t = torch.from_numpy(np.ascontiguousarray(data))
    if tl_dtype == tl.bfloat16:
        return t.view(torch.bfloat16).float().numpy()
    if tl_dtype == tl.float8e4nv:
        return t.view(torch.float8_e4m3fn).float().numpy()
    if tl_dtype == tl.float8e5:
        return t.view(torch.float8_e5m2).float().numpy()
    raise NotImplementedError(tl_dtype)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def f32_to_fp8_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 -> fp8 bit patterns (uint8), RNE with saturation to the max finite value.

    The clamp happens before the (RNE) cast so values in (max, max + ulp/2) still round to max
    and everything above saturates; NaN passes through clamp and casts to NaN. Inf saturates.
    """
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if fmt == "e4m3":
        return t.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    if fmt == "e5m2":
        return t.clamp(-E5M2_MAX, E5M2_MAX).to(torch.float8_e5m2).view(torch.uint8).numpy()
    raise ValueError(fmt)


def _patched_cast_impl(self, src, dst_type):
    tl = _tl()
    from triton.runtime.interpreter import TensorHandle

    s, d = src.dtype.scalar, dst_type.scalar
    if d == tl.bfloat16 and s in (tl.float32, tl.float16, tl.float64):
        bits = f32_to_bf16_bits(_np_to_f32(src.data, s))
        return TensorHandle(bits.reshape(src.data.shape), d)
    return _ORIG["cast_impl"](self, src, dst_type)


def _patched_fp_to_fp(self, src, dst_type, rounding_mode):
    tl = _tl()
    from triton._C.libtriton import ir as _ir
    from triton.runtime.interpreter import TensorHandle

    s, d = src.dtype.scalar, dst_type.scalar
    rne = rounding_mode in (None, _ir.ROUNDING_MODE.RTNE)
    floats = (tl.float32, tl.float16, tl.bfloat16, tl.float64)
    if rne and s in floats and d in (tl.float8e4nv, tl.float8e5):
        bits = f32_to_fp8_bits(_np_to_f32(src.data, s), "e4m3" if d == tl.float8e4nv else "e5m2")
        return TensorHandle(bits.reshape(src.data.shape), d)
    if s in (tl.float8e4nv, tl.float8e5) and d in (tl.float32, tl.float16, tl.bfloat16):
        # fp8 -> wider float is exact; the interpreter decodes e4m3 NaN (0x7F/0xFF) as +-480.
        f = torch.from_numpy(_np_to_f32(src.data, s))
        tgt = {tl.float32: (torch.float32, torch.int32, np.float32), tl.float16: (torch.float16, torch.int16, np.float16),
               tl.bfloat16: (torch.bfloat16, torch.int16, np.uint16)}[d]
        out = f.to(tgt[0]).numpy() if d != tl.bfloat16 else f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return TensorHandle(out.reshape(src.data.shape), d)
    if rne and s in (tl.float16,) and d == tl.bfloat16:
        bits = f32_to_bf16_bits(_np_to_f32(src.data, s))
        return TensorHandle(bits.reshape(src.data.shape), d)
    return _ORIG["create_fp_to_fp"](self, src, dst_type, rounding_mode)


def install(force: bool = False) -> bool:
    """Patch the interpreter's cast methods. Returns True when the shim is active."""
    if not force and os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter as _interp

    cls = _interp.InterpreterBuilder
    if "cast_impl" not in _ORIG:
        for name in ("cast_impl", "create_fp_to_fp"):
            if not hasattr(cls, name):
                raise RuntimeError(f"triton/runtime/interpreter.py: InterpreterBuilder.{name} not found; shim needs an update")
            _ORIG[name] = getattr(cls, name)
        cls.cast_impl = _patched_cast_impl
        cls.create_fp_to_fp = _patched_fp_to_fp
        # create_fp_trunc / create_fp_ext are lambdas calling self.cast_impl: covered.
    return True


def uninstall() -> None:
    from triton.runtime import interpreter as _interp

    cls = _interp.InterpreterBuilder
    for name, fn in _ORIG.items():
        setattr(cls, name, fn)
    _ORIG.clear()


# ----------------------------------------------------------------------------------------
# self-test
# ----------------------------------------------------------------------------------------

def _edge_f32() -> np.ndarray:
    v = [0.0, -0.0, 1.0, 1.0625, 1.125, 1.1875, 1.9375, 1.96875, 3.0, 448.0, 449.0, 464.0, 465.0, 480.0,
         500.0, 1e4, 1e30, -500.0, 2.0**-6, 2.0**-7, 2.0**-9, 2.0**-10, 3 * 2.0**-11, 2.0**-11,
         1.5 * 2.0**-9, 2.5 * 2.0**-9, 1e-30, float("inf"), float("-inf"), float("nan"),
         57344.0, 61440.0, 65536.0,
         # bf16 ties / near ties (bf16 has 8 significant bits)
         1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20, 3.3895314e38, 3.4028235e38,
         1e-40, 9.2e-41]
    rng = np.random.default_rng(0)
    r = (rng.standard_normal(4096) * np.exp2(rng.integers(-14, 10, 4096))).astype(np.float32)
    return np.concatenate([np.array(v, dtype=np.float32), -np.array(v, dtype=np.float32), r])


def _run_kernel_cast(x: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """Cast fp32 -> dst inside an interpreted Triton kernel (x.to(dtype) and store)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _cast(X, Y, N, BLOCK: tl.constexpr, TO_BF16: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        v = tl.load(X + offs, mask=m)
        if TO_BF16:
            tl.store(Y + offs, v.to(tl.bfloat16), mask=m)
        else:
            tl.store(Y + offs, v.to(Y.dtype.element_ty), mask=m)

    y = torch.empty(x.shape, dtype=dst)
    n = x.numel()
    _cast[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024, TO_BF16=dst == torch.bfloat16)
    return y


def _run_kernel_store_bf16(x: torch.Tensor) -> torch.Tensor:
    """Implicit cast: store fp32 into a bf16 pointer."""
    import triton
    import triton.language as tl

    @triton.jit
    def _st(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        tl.store(Y + offs, tl.load(X + offs, mask=m), mask=m)

    y = torch.empty(x.shape, dtype=torch.bfloat16)
    _st[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> int:
    ia = a.view(torch.int16 if a.element_size() == 2 else torch.uint8)
    ib = b.view(torch.int16 if b.element_size() == 2 else torch.uint8)
    nan = torch.isnan(a.float()) & torch.isnan(b.float())  # any NaN pattern is NaN
    return int(((ia != ib) & ~nan).sum())


def self_test(verbose: bool = False) -> dict:
    """Compare interpreted casts (shim on, and shim off for the record) with correct rounding.

    Leaves the shim installed. ``res["on"]`` counts wrong bit patterns per cast with the shim
    (all must be 0), ``res["off"]`` without it (the interpreter's own gaps)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("shims.self_test: needs TRITON_INTERPRET=1 in the environment before triton is imported")
    x = torch.from_numpy(_edge_f32())
    want_bf16 = x.to(torch.bfloat16)
    want_e4m3 = x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    want_e5m2 = x.clamp(-E5M2_MAX, E5M2_MAX).to(torch.float8_e5m2)
    res = {}
    for state in ("off", "on"):
        uninstall()
        if state == "on":
            install()
        res[state] = {
            "bf16 x.to": _same_bits(_run_kernel_cast(x, torch.bfloat16), want_bf16),
            "bf16 store": _same_bits(_run_kernel_store_bf16(x), want_bf16),
            "e4m3 x.to": _same_bits(_run_kernel_cast(x, torch.float8_e4m3fn), want_e4m3),
            "e5m2 x.to": _same_bits(_run_kernel_cast(x, torch.float8_e5m2), want_e5m2),
        }
    # named edge values, shim on
    names = {1.9375: "1.9375 (mantissa carry)", 500.0: "500 (saturate)", 464.0: "464 (tie above max)",
             1.0625: "1.0625 (e4m3 tie->even 1.0)", 1.1875: "1.1875 (tie->even 1.25)",
             2.0**-9: "2^-9 (min e4m3 subnormal)", 2.0**-10: "2^-10 (tie->0)", 3 * 2.0**-11: "3*2^-11 (->2^-9)",
             float("nan"): "NaN", float("inf"): "Inf (saturate)"}
    xs = torch.tensor(list(names), dtype=torch.float32)
    got = _run_kernel_cast(xs, torch.float8_e4m3fn).float().tolist()
    uninstall()
    raw = _run_kernel_cast(xs, torch.float8_e4m3fn).float().tolist()
    install()
    want = xs.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float().tolist()
    res["e4m3 edges"] = [(n, w, g, r) for n, w, g, r in zip(names.values(), want, got, raw)]
    bf = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20, 1e-40], dtype=torch.float32)
    res["bf16 edges"] = list(zip(bf.tolist(), bf.to(torch.bfloat16).float().tolist(),
                                 _run_kernel_cast(bf, torch.bfloat16).float().tolist()))
    # fp8 decode in dot_scaled path / upcasts: all 256 e4m3 codes -> fp32 through the interpreter
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    res["e4m3 decode mismatches"] = _decode_check(codes)
    res["n_values"] = int(x.numel())
    if verbose:
        for k, v in res.items():
            print(f"{k}: {v}")
    return res


def _decode_check(codes: torch.Tensor) -> int:
    import triton
    import triton.language as tl

    @triton.jit
    def _up(X, Y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs).to(tl.float32))

    y = torch.empty(256, dtype=torch.float32)
    _up[(1,)](codes, y, BLOCK=256)
    want = codes.float()
    bad = (y != want) & ~(torch.isnan(y) & torch.isnan(want))
    return int(bad.sum())


def self_test_ok(res: dict) -> bool:
    return all(v == 0 for v in res["on"].values()) and res["e4m3 decode mismatches"] == 0
