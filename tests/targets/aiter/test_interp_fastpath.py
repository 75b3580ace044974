"""The interpreter's fast path (fp4moe.targets.aiter.kernels.interp_fastpath) changes no output.

CPU tier, ONE background child per session (tests/conftest.py; the fast path patches Triton's
interpreter, which never happens in the pytest process). The child runs the same kernels with the
fast path on, then off (``uninstall``), and returns their outputs and how often the shipped
``_patch_lang`` ran; this process compares. The kernels cross all three of its paths: helpers nested
two deep, a generic reduce (its combine function called per element pair), casts through bf16 and
fp8 (``_get_np_dtype`` for each), a masked tail, a helper whose module sees ``tl.core`` only,
which the launch did not patch (the fast path must patch it as before), and int32 ``+ - *`` on
tensors (the overflow sanitizer's operations). Skipped without triton>=3.8.
The whole kernel child at e4048607 both ways (rows identical, 16 outputs bitwise equal) is the
measurement in the module's docstring; it is not repeated here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from fp4moe.infra import runner
from fp4moe.targets.aiter.kernels import triton_status_light

_OK, _WHY = triton_status_light()
needs_triton = pytest.mark.skipif(not _OK, reason=_WHY)

KERNELS = '''
import triton
import triton.language as tl

from fp_core import relu_core


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _inner(x):
    return x * 3 + 1


@triton.jit
def _outer(x):
    return _inner(x) - _inner(x >> 1)


@triton.jit
def kern(X, Y, Z, F, S, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m, other=0)
    tl.store(Y + offs, _outer(x) + relu_core(x - 40), mask=m)
    tl.store(S + tl.program_id(0), tl.reduce(x, 0, _xor))
    f = x.to(tl.float32) * 0.37 - 11.0
    tl.store(Z + offs, f.to(tl.bfloat16), mask=m)
    tl.store(F + offs, (f * 9.0).to(tl.float8e4nv), mask=m)
'''
CORE = '''
import triton
from triton.language import core


@triton.jit
def relu_core(x):
    return core.maximum(x, 0)
'''
PROBE = r'''
import sys
sys.path.insert(0, sys.argv[1])
import torch
from fp4moe.infra import runner
write_record = runner.record_writer()
import triton.language as tl
from triton.runtime import interpreter as interp
from fp4moe.targets.aiter.kernels import interp_fastpath as fp, shims
import fp_kernels

shims.install()  # the casts round as on a GPU (the kernel child always has them)

NAMES = {m.__name__: sorted(n for n in dir(m) if tl.core.is_builtin(getattr(m, n))) for m in (tl, tl.core, tl.core.tensor)}


def patched():
    """The builtins of tl, tl.core and tl.tensor the interpreter has swapped (and not put back)."""
    return {k: [n for n in v if not tl.core.is_builtin(getattr(sys.modules.get(k, tl.core.tensor), n))] for k, v in NAMES.items()}

rec = {"status_before": fp.status(), "installed": fp.install(), "status": fp.status()}
rec["sanitize_on"] = interp.interpreter_builder.options.sanitize_overflow
calls = {"n": 0}
shipped = interp._patch_lang if "orig" not in fp._STATE else fp._STATE["orig"]["_patch_lang"]


def counting(fn):
    calls["n"] += 1
    return shipped(fn)


if "orig" in fp._STATE:
    fp._STATE["orig"]["_patch_lang"] = counting  # what the fast path calls as the shipped one, counted


def run():
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-300, 300, (3, 50), generator=g, dtype=torch.int32)
    out = {"y": torch.full((3, 50), -7, dtype=torch.int32), "z": torch.full((3, 50), 7, dtype=torch.int16),
           "f": torch.full((3, 50), 0x55, dtype=torch.uint8), "s": torch.full((3,), -1, dtype=torch.int32)}
    for row in range(3):
        fp_kernels.kern[(1,)](x[row], out["y"][row], out["z"][row].view(torch.bfloat16),
                              out["f"][row].view(torch.float8_e4m3fn), out["s"][row:row + 1], 45, BLOCK=64)
    return out


on = run()
rec["calls_on"] = calls["n"]
rec["left_patched_on"] = patched()
fp.uninstall()  # puts back what it found: the counted shipped one
rec["status_uninstalled"] = fp.status()
rec["sanitize_off"] = interp.interpreter_builder.options.sanitize_overflow
calls["n"] = 0
off = run()
rec["calls_off"] = calls["n"]
rec["left_patched_off"] = patched()
# a source that differs from the one read: not installed, named
interp._patch_lang = shipped
fp.KNOWN_SOURCES["_patch_lang"] = {"0" * 64}
rec["installed_tampered"], rec["status_tampered"] = fp.install(), fp.status()
write_record({**rec, "on": {k: v.tolist() for k, v in on.items()}, "off": {k: v.tolist() for k, v in off.items()}})
'''


def _probe(environ: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="fp4moe-fastpath-") as tmp:
        Path(tmp, "fp_kernels.py").write_text(KERNELS)
        Path(tmp, "fp_core.py").write_text(CORE)
        res = runner.run_python(["-W", "ignore", "-c", PROBE, tmp], timeout_s=300,
                                   env=dict(environ, TRITON_INTERPRET="1", FP4MOE_TRITON_FASTPATH="1"))
    assert res.record is not None, res.why_no_record()
    return res.record


EARLY_CHILDREN = {"fastpath": _probe}  # a background child (tests/conftest.py)


@pytest.fixture(scope="session")
def fastpath(early):
    return early("fastpath", _probe)


@pytest.mark.slow
@needs_triton
def test_outputs_are_bitwise_equal_with_and_without_the_fast_path(fastpath):
    assert fastpath["installed"] is True and fastpath["status"] == "on", fastpath["status"]
    on, off = fastpath["on"], fastpath["off"]
    assert on == off
    # every output was written (the poison values are gone) and the tail stayed untouched
    y, z, f, s = (torch.tensor(on[k]) for k in ("y", "z", "f", "s"))
    assert (y[:, 45:] == -7).all() and (z[:, 45:] == 7).all() and (f[:, 45:] == 0x55).all()
    assert not (y[:, :45] == -7).any() and (s != -1).all()
    # and they are the kernel's arithmetic (the interpreter ran, the fast path skipped nothing it needed)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-300, 300, (3, 50), generator=g, dtype=torch.int32)[:, :45]
    want = (x * 3 + 1) - ((x >> 1) * 3 + 1) + torch.clamp(x - 40, min=0)
    assert torch.equal(y[:, :45], want)
    xor = x[:, 0].clone()
    for j in range(1, 45):
        xor ^= x[:, j]
    assert torch.equal(s, xor)
    f32 = x.float() * 0.37 - 11.0
    assert torch.equal(z[:, :45], f32.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(f[:, :45], (f32 * 9.0).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8))
    assert (f32 * 9.0).abs().max() > 448  # the saturation was crossed


@pytest.mark.slow
@needs_triton
def test_the_fast_path_skips_the_re_patch_only_where_the_launch_made_it(fastpath):
    # off: one _patch_lang per launch (3) and one per device call: _outer, 2 x _inner and relu_core
    # (the reduce calls its combine function's Python body, never through a device call)
    assert fastpath["calls_off"] == 3 * (1 + 4), fastpath["calls_off"]
    # on: the launches, and relu_core (its module sees tl.core, which the launch did not patch)
    assert fastpath["calls_on"] == 3 * (1 + 1), fastpath["calls_on"]
    # what the interpreter leaves patched after the launches (tl.core: relu_core's patch, never
    # put back by Triton) is the same both ways
    left = fastpath["left_patched_on"]
    assert left == fastpath["left_patched_off"] and left["triton.language.core"] and not left["triton.language"], left


@pytest.mark.slow
@needs_triton
def test_the_sanitizer_is_off_only_while_the_fast_path_is_on(fastpath):
    # its int32 arithmetic (x * 3 + 1, x - 40, the offsets) equal both ways: the first test
    assert (fastpath["sanitize_on"], fastpath["sanitize_off"]) == (False, True)


@pytest.mark.slow
@needs_triton
def test_it_stays_off_where_the_source_differs_and_says_which(fastpath):
    assert fastpath["status_before"] == "off: not installed"
    assert fastpath["status_uninstalled"] == "off: not installed"
    assert fastpath["installed_tampered"] is False
    assert fastpath["status_tampered"] == "off: triton/runtime/interpreter.py _patch_lang differs from the source read here"


def test_it_is_off_without_the_interpreter_or_when_turned_off(monkeypatch):
    from fp4moe.targets.aiter.kernels import interp_fastpath as fp

    monkeypatch.setattr(fp, "_STATE", {})
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert fp.install() is False and fp.status() == "off: not interpreted"
    monkeypatch.setattr(fp, "_STATE", {})
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(fp.OFF_ENV, "0")
    assert fp.install() is False and fp.status() == "off: FP4MOE_TRITON_FASTPATH=0"
