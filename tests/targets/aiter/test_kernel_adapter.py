"""The aiter Triton kernel adapter (fp4moe.targets.aiter.kernels): loader, interpreter shims,
layout conversion. CPU tier: ONE background child per session (tests/conftest.py; the loader fills ``sys.modules['aiter']``
and the shims patch the interpreter, so neither may run in the pytest process) that loads
``../shared/aiter/e4048607``, runs the shim self-test and converts a layer; ~5 s. Skipped with
the reason without triton>=3.8 or ../shared.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from fp4moe.infra import runner
from fp4moe.infra.paths import shared_dir
from fp4moe.targets.aiter.kernels import layout, triton_status_light
from fp4moe.targets.aiter.kernels.loader import PATCHES

_OK, _WHY = triton_status_light()
TREE = (shared_dir() / "aiter" / "e4048607" / "aiter") if shared_dir() else None
needs_tree = pytest.mark.skipif(not (_OK and TREE is not None and TREE.is_dir()),
                                reason=_WHY if not _OK else "../shared/aiter/e4048607 absent")

PROBE = r'''
import sys, torch
from fp4moe.infra import runner
write_record = runner.record_writer()
from fp4moe.targets.aiter.kernels import loader, shims, layout
from fp4moe.targets.aiter.kernels import cases
rec = {}
try:
    loader.load_aiter_moe(sys.argv[2] if sys.argv[1] == "bad" else "/nonexistent/aiter")
except loader.AiterTreeError as e:
    rec["bad_tree"] = str(e)
if sys.argv[1] == "bad":
    write_record(rec); raise SystemExit(0)
am = loader.load_aiter_moe(sys.argv[2])
res = shims.self_test()
rec["shims_on"], rec["shims_off"], rec["decode"] = res["on"], res["off"], res["e4m3 decode mismatches"]
xs = torch.tensor([1.9375, 500.0, 1e30, 1.0625, 1.1875, 2.0**-10, 3 * 2.0**-11, float("nan")])
rec["e4m3"] = shims._run_kernel_cast(xs, torch.float8_e4m3fn).float().tolist()
bf = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20])
rec["bf16"] = shims._run_kernel_cast(bf, torch.bfloat16).float().tolist()
rec["files"] = {k: m.__file__ for k, m in am.modules.items()}
rec["arch"] = am.arch_info.get_arch()
pw = cases.make_layer(cases.TINY)
before = [t.clone() for t in (pw.w13, pw.w13_scale, pw.w2, pw.w2_scale)]
W = layout.to_triton_layout(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale, pw.padded_intermediate, "CDNA4_SCALE", am.shuffle)
P = layout.to_triton_layout(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale, pw.padded_intermediate, None, am.shuffle)
rec["cdna4_eq_wrapper_swizzle"] = bool(torch.equal(W.s1, am.a16w4.swizzle_scales_gfx950(P.s1)))
rec["stride_ok"] = P.w1.stride(-2) == 1 and P.w2.stride(-2) == 1
rec["untouched"] = all(torch.equal(a, b) for a, b in zip(before, (pw.w13, pw.w13_scale, pw.w2, pw.w2_scale)))
write_record(rec)
'''


def _probe(*args, environ=None) -> dict:
    res = runner.run_python(["-W", "ignore", "-c", PROBE, *args], timeout_s=300,
                               env=dict(os.environ if environ is None else environ, TRITON_INTERPRET="1"))
    assert res.record is not None, res.why_no_record()
    return res.record


def _good_probe(environ: dict) -> dict:
    return _probe("good", str(TREE), environ=environ)


EARLY_CHILDREN = {"probe": _good_probe}  # a background child (tests/conftest.py)


@pytest.fixture(scope="session")
def probe(early):
    return early("probe", _good_probe)


def test_patch_table_names_every_stub():
    names = " ".join(p.name for p in PATCHES)
    for stub in ("aiter (+ every sub-package)", "chip_info", "arch_info", "TRITON_INTERPRET=1 casts", "AMD launch options"):
        assert stub in names
    assert all(p.what and p.why for p in PATCHES)


@pytest.mark.slow
@needs_tree
def test_loader_loads_the_modules_from_the_tree_pinned_to_gfx950(probe):
    assert probe["arch"] == "gfx950"
    assert probe["files"]["a16w4"].endswith("aiter/ops/triton/moe/moe_op_gemm_a16w4.py")
    tree = os.path.realpath(TREE)  # ../shared may be a symlink; the loader reports real paths
    assert all(os.path.realpath(f).startswith(tree + os.sep) for f in probe["files"].values()), probe["files"]
    assert "/nonexistent/aiter" in probe["bad_tree"]


@pytest.mark.slow
@needs_tree
def test_shims_equal_rne_saturating_rounding_and_the_gaps_are_real(probe):
    assert probe["shims_on"] == {"bf16 x.to": 0, "bf16 store": 0, "e4m3 x.to": 0, "e5m2 x.to": 0}
    assert probe["decode"] == 0
    assert all(v > 0 for v in probe["shims_off"].values()), probe["shims_off"]  # without them: wrong bits


@pytest.mark.slow
@needs_tree
def test_shim_edge_values(probe):
    nan = probe["e4m3"][-1]
    # mantissa carry, saturation, huge -> max, tie to even (1.0 and 1.25), 2^-10 tie -> 0, 3*2^-11 -> 2^-9
    assert probe["e4m3"][:-1] == [2.0, 448.0, 448.0, 1.0, 1.25, 0.0, 2.0**-9]
    assert nan != nan
    assert probe["bf16"] == [1.0, 1.015625, 1.0078125]  # ties to even (down, up), above the tie -> up


@pytest.mark.slow
@needs_tree
def test_layout_conversion(probe):
    assert probe["cdna4_eq_wrapper_swizzle"]  # shuffle_scale_moe == the wrapper module's own copy
    assert probe["stride_ok"] and probe["untouched"]


@pytest.mark.slow
@needs_tree
def test_missing_symbol_is_cannot_run_naming_file_and_symbol(tmp_path):
    copy = tmp_path / "aiter"
    shutil.copytree(TREE, copy)
    f = copy / "ops" / "triton" / "moe" / "reduce.py"
    f.write_text(f.read_text().replace("def reduce_grouped(", "def reduce_grouped_renamed("))
    rec = _probe("bad", str(copy))
    assert "reduce.py" in rec["bad_tree"] and "reduce_grouped" in rec["bad_tree"], rec


def test_interleave_rows_and_poison_leave_inputs_untouched():
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 256, (2, 8, 3), generator=g, dtype=torch.uint8)
    out = layout.interleave_rows(t, 4)
    assert torch.equal(out[:, 0::2], t[:, :4]) and torch.equal(out[:, 1::2], t[:, 4:])
    with pytest.raises(ValueError, match="rows"):
        layout.interleave_rows(t, 3)
