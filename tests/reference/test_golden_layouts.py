"""``fp4moe.reference.layout`` vs aiter's recorded gfx950 layouts (../shared/golden/aiter-layouts).

Each manifest case is checked the way the data's README defines conformance: for every output
byte the index map names the input byte that lands there (-1 = padding). Cases whose map ships
in the npz are compared byte for byte; the others through the map's sha256, with the map built
here from position planes (independently of ``fp4moe.reference.golden``).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from fp4moe.infra.paths import shared_dir
from fp4moe.reference import golden, layout

pytestmark = pytest.mark.shared

_SHARED = shared_dir()
_GOLDEN = _SHARED / "golden" / "aiter-layouts" if _SHARED is not None else None
if _GOLDEN is None or not (_GOLDEN / "layout_manifest.json").is_file():
    pytest.skip(
        "../shared/golden/aiter-layouts is absent (set FP4MOE_SHARED or check out ../shared): "
        "aiter layout conformance not checked",
        allow_module_level=True,
    )

MANIFEST = json.loads((_GOLDEN / "layout_manifest.json").read_text())
CASES = {c["id"]: c for c in MANIFEST["cases"]}
MAPS = dict(np.load(_GOLDEN / "layout_index_maps.npz"))


def _apply(case: dict, x: torch.Tensor) -> torch.Tensor:
    p = case["params"]
    if case["function"] == "shuffle_weight":
        return layout.shuffle_weight(x, (16, 16), is_guinterleave=p["is_guinterleave"], gate_up=p["gate_up"])
    assert case["function"] == "shuffle_scale", case["function"]
    return layout.shuffle_scale(x, experts_cnt=p["experts_cnt"], is_guinterleave=p["is_guinterleave"], gate_up=p["gate_up"])


def _our_index_map(case: dict) -> np.ndarray:
    """Flat input index at each output byte, -1 for padding: shuffle 3 byte planes of positions
    (inputs here are < 2^24 bytes), plus an all-0x01 input to locate the fill bytes."""
    shape = case["input_shape"]
    n = int(np.prod(shape))
    assert n < 2**24
    pos = torch.arange(n, dtype=torch.int64)
    m = torch.zeros(case["output_shape"], dtype=torch.int64)
    for plane in range(3):
        m |= _apply(case, ((pos >> (8 * plane)) & 0xFF).to(torch.uint8).reshape(shape)).to(torch.int64) << (8 * plane)
    real = _apply(case, torch.ones(shape, dtype=torch.uint8)) == 1  # fills are 0x00 / 0x7F, never 0x01
    m[~real] = -1
    return m.numpy()


@pytest.mark.parametrize("case_id", list(CASES))
def test_layout_matches_aiter(case_id):
    case = CASES[case_id]
    shape = case["input_shape"]
    g = torch.Generator().manual_seed(2024)
    hi = 255 if case["function"] == "shuffle_scale" else 256  # a real scale never holds 0xFF
    x = torch.randint(0, hi, shape, generator=g, dtype=torch.uint8)
    out = _apply(case, x)
    assert list(out.shape) == case["output_shape"]
    ours = _our_index_map(case)
    assert int((ours < 0).sum()) == case["pad_positions"]
    if case_id in MAPS:
        theirs = MAPS[case_id].astype(np.int64)
        assert theirs.shape == tuple(case["output_shape"])
        # README's conformance rule, on random bytes
        m = theirs.reshape(-1)
        flat_out, flat_x = out.reshape(-1).numpy(), x.reshape(-1).numpy()
        assert (flat_out[m >= 0] == flat_x[m[m >= 0]]).all()
        assert np.array_equal(ours, theirs), f"{int((ours != theirs).sum())} bytes placed differently from aiter"
    assert hashlib.sha256(ours.astype("<i8").tobytes()).hexdigest() == case["sha256_index_map"]
    if case["pad_positions"]:
        # aiter fills interleaved padding with 0x7F (e8m0 1.0); its plain padding is torch.empty,
        # which we fill with 0x00 (2^-127): never 0xFF (NaN)
        fill = 0x7F if case["params"]["is_guinterleave"] else 0x00
        assert bool((out.numpy()[ours < 0] == fill).all())


def test_manifest_covers_the_deepseek_v4_shapes():
    # the cases that matter: w13 with gate_up, w2, and the K/32 = 12 scale (Pro w2 at TP8)
    fns = {(c["function"], c["params"]["is_guinterleave"], c["params"]["gate_up"]) for c in CASES.values()}
    assert ("shuffle_weight", True, True) in fns and ("shuffle_weight", True, False) in fns
    assert any(c["input_shape"][-1] == 12 and c["params"]["is_guinterleave"] for c in CASES.values())


def test_golden_module_agrees_and_detects_a_corrupted_map():
    assert golden.check_all_golden() == len(CASES)
    case_id = next(i for i in CASES if i in MAPS)
    bad = dict(MAPS)
    m = bad[case_id].copy().reshape(-1)
    m[[0, 1]] = m[[1, 0]]  # swap two bytes' sources
    bad[case_id] = m.reshape(MAPS[case_id].shape)
    with pytest.raises(AssertionError, match=f"{case_id}: 2 bytes differ"):
        golden.check_case(CASES[case_id], bad)
