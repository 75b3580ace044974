"""DeepSeek-V4 FP4 expert checkpoints (``fp4moe.model.checkpoint``): format, stacking, TP/EP sharding.

The ``dsv4_checkpoint`` fixture (tests/conftest.py) is a real checkpoint written by
``write_dsv4_checkpoint``: 3 experts x 2 layers, hidden 128, intermediate 256, 2 files.
Expected tensors are read independently, with ``safetensors.safe_open`` or from the raw header.
"""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from fp4moe.model import checkpoint
from fp4moe.mx import mxfp4
from fp4moe.reference import kernel_budget

PROJ_SHAPES = {  # (rows, packed cols) and (rows, scale cols) for hidden 128, intermediate 256
    "w1": ((256, 64), (256, 4)),
    "w3": ((256, 64), (256, 4)),
    "w2": ((128, 128), (128, 8)),
}


def _header(path) -> dict:
    """safetensors format: u64 little-endian header length, then the JSON header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def _read(ckpt, key) -> torch.Tensor:
    index = json.loads((ckpt.path / "model.safetensors.index.json").read_text())
    with safe_open(str(ckpt.path / index["weight_map"][key]), framework="pt") as h:
        return h.get_tensor(key)


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def test_tensor_names_dtypes_and_shapes_in_the_headers(dsv4_checkpoint):
    ck = dsv4_checkpoint
    files = sorted(ck.path.glob("*.safetensors"))
    assert len(files) == ck.files == 2
    seen = {}
    for f in files:
        header = _header(f)
        header.pop("__metadata__", None)
        assert header, f"{f.name} holds no tensors"
        for key, info in header.items():
            assert key not in seen, f"{key} in two files"
            seen[key] = (f.name, info)
    want = {
        f"layers.{layer}.ffn.experts.{e}.{proj}.{kind}"
        for layer in ck.layers
        for e in range(ck.experts)
        for proj in ("w1", "w2", "w3")
        for kind in ("weight", "scale")
    }
    assert set(seen) == want
    for key, (_, info) in seen.items():
        proj, kind = key.split(".")[-2:]
        w_shape, s_shape = PROJ_SHAPES[proj]
        assert info["dtype"] == ("I8" if kind == "weight" else "F8_E8M0"), key
        assert info["shape"] == list(w_shape if kind == "weight" else s_shape), key
    index = json.loads((ck.path / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {k: fname for k, (fname, _) in seen.items()}


def test_tp1_load_stacks_gate_then_up(dsv4_checkpoint):
    ck = dsv4_checkpoint
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in ck.path.iterdir()}
    raw = checkpoint.load_moe_layer(ck.path, 1)
    assert raw.expert_ids == (0, 1, 2)
    assert [t.dtype for t in raw.tensors()] == [torch.uint8] * 4
    assert raw.w13.shape == (3, 512, 64) and raw.w13_scale.shape == (3, 512, 4)
    assert raw.w2.shape == (3, 128, 128) and raw.w2_scale.shape == (3, 128, 8)
    for e in range(3):
        k = f"layers.1.ffn.experts.{e}."
        assert torch.equal(raw.w13[e], _u8(torch.cat((_read(ck, k + "w1.weight"), _read(ck, k + "w3.weight")))))
        assert torch.equal(raw.w13_scale[e], _u8(torch.cat((_read(ck, k + "w1.scale"), _read(ck, k + "w3.scale")))))
        assert torch.equal(raw.w2[e], _u8(_read(ck, k + "w2.weight")))
        assert torch.equal(raw.w2_scale[e], _u8(_read(ck, k + "w2.scale")))
    # layer 0 is a different tensor set: the layer index is honoured
    assert not torch.equal(checkpoint.load_moe_layer(ck.path, 0).w13, raw.w13)
    assert digests == {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in ck.path.iterdir()}, "loader wrote files"


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_shards_concatenate_to_the_full_layer(dsv4_checkpoint, tp):
    ck = dsv4_checkpoint
    full = checkpoint.load_moe_layer(ck.path, 0)
    shards = [checkpoint.load_moe_layer(ck.path, 0, tp_size=tp, tp_rank=r) for r in range(tp)]
    i, i_p = ck.intermediate, ck.intermediate // tp
    for s in shards:
        assert s.w13.shape == (3, 2 * i_p, 64) and s.w2.shape == (3, 128, i_p // 2) and s.w2_scale.shape == (3, 128, i_p // 32)
    # w13 rows: each half (gate, up) is split on its own
    assert torch.equal(torch.cat([s.w13[:, :i_p] for s in shards], 1), full.w13[:, :i])
    assert torch.equal(torch.cat([s.w13[:, i_p:] for s in shards], 1), full.w13[:, i:])
    assert torch.equal(torch.cat([s.w13_scale[:, :i_p] for s in shards], 1), full.w13_scale[:, :i])
    assert torch.equal(torch.cat([s.w13_scale[:, i_p:] for s in shards], 1), full.w13_scale[:, i:])
    # w2: packed K columns and scale columns
    assert torch.equal(torch.cat([s.w2 for s in shards], 2), full.w2)
    assert torch.equal(torch.cat([s.w2_scale for s in shards], 2), full.w2_scale)


def test_ep_ranks_hold_contiguous_expert_ranges(tmp_path):
    write = dict(hidden=64, intermediate=64, experts=4, seed=5, files=1)
    checkpoint.write_dsv4_checkpoint(tmp_path, **write)
    full = checkpoint.load_moe_layer(tmp_path, 0)
    for ep, want in ((2, [(0, 1), (2, 3)]), (4, [(0,), (1,), (2,), (3,)])):
        for r in range(ep):
            s = checkpoint.load_moe_layer(tmp_path, 0, ep_size=ep, ep_rank=r)
            assert s.expert_ids == want[r]
            ids = list(want[r])
            for got, ref in zip(s.tensors(), full.tensors()):
                assert torch.equal(got, ref[ids])
    # EP and TP together: rank (ep 1 of 2, tp 1 of 2) = experts 2..3, second half of I
    s = checkpoint.load_moe_layer(tmp_path, 0, tp_size=2, tp_rank=1, ep_size=2, ep_rank=1)
    assert s.expert_ids == (2, 3)
    assert torch.equal(s.w13[:, :32], full.w13[2:, 32:64]) and torch.equal(s.w13[:, 32:], full.w13[2:, 96:])
    assert torch.equal(s.w2, full.w2[2:, :, 16:]) and torch.equal(s.w2_scale, full.w2_scale[2:, :, 1:])


def test_round_trip_close_to_the_float_originals(dsv4_checkpoint):
    ck = dsv4_checkpoint
    raw = checkpoint.load_moe_layer(ck.path, 0)
    for e in range(ck.experts):
        k = f"layers.0.ffn.experts.{e}."
        orig13 = torch.cat((ck.originals[k + "w1.weight"], ck.originals[k + "w3.weight"]))
        orig2 = ck.originals[k + "w2.weight"]
        for packed, scale, orig in ((raw.w13[e], raw.w13_scale[e], orig13), (raw.w2[e], raw.w2_scale[e], orig2)):
            # the stored bytes are exactly the codec's round_up quantization of the originals
            p_want, s_want = mxfp4.quantize(orig, "round_up")
            assert torch.equal(packed, p_want) and torch.equal(scale, s_want)
            deq = mxfp4.dequantize(packed, scale)
            # Bound 0.125: E2M1 has one mantissa bit; on Gaussian blocks of 32, round_up scaling
            # gives rel L2 0.118 +- 0.001 (measured over 20 seeds; floor gives 0.114), so the
            # issue's suggested 0.1 is below what MXFP4 can reach. Real bugs are far above it:
            # swapped nibbles or gate/up ~1.4, a scale off by one binade >= 0.5.
            assert kernel_budget.rel_l2(deq, orig) < 0.125
            # element-wise: round_up never saturates, so each error is at most one scale unit
            # (the widest E2M1 gap, 4 -> 6, is 2 units; half of it is 1)
            unit = torch.ldexp(torch.ones_like(scale, dtype=torch.float32), scale.to(torch.int32) - 127)
            assert bool(((deq - orig).abs() <= unit.repeat_interleave(32, -1)).all())


# ---------------------------------------------------------------- errors
def _rewrite_without(src_dir, dst_dir, drop) -> None:
    tensors = {}
    for f in src_dir.glob("*.safetensors"):
        tensors.update(load_file(str(f)))
    dst_dir.mkdir()
    save_file({k: v for k, v in tensors.items() if not drop(k)}, str(dst_dir / "model.safetensors"))
    (dst_dir / checkpoint.CONFIG_FILE).write_bytes((src_dir / checkpoint.CONFIG_FILE).read_bytes())


def test_missing_expert_is_a_keyerror_naming_it(dsv4_checkpoint, tmp_path):
    _rewrite_without(dsv4_checkpoint.path, tmp_path / "ck", lambda k: ".experts.1." in k and k.startswith("layers.0."))
    with pytest.raises(KeyError, match=r"layer 0 is missing expert\(s\) \[1\] of 0\.\.2"):
        checkpoint.load_moe_layer(tmp_path / "ck", 0)
    assert checkpoint.load_moe_layer(tmp_path / "ck", 1).expert_ids == (0, 1, 2)  # layer 1 intact


def test_missing_tensor_is_a_keyerror_naming_it(dsv4_checkpoint, tmp_path):
    _rewrite_without(dsv4_checkpoint.path, tmp_path / "ck", lambda k: k == "layers.0.ffn.experts.2.w3.scale")
    with pytest.raises(KeyError, match=r"missing tensor 'layers\.0\.ffn\.experts\.2\.w3\.scale'"):
        checkpoint.load_moe_layer(tmp_path / "ck", 0)


def test_missing_path_file_or_layer(dsv4_checkpoint, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope: no such file or directory"):
        checkpoint.load_moe_layer(tmp_path / "nope", 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no \*\.safetensors files"):
        checkpoint.load_moe_layer(tmp_path / "empty", 0)
    with pytest.raises(KeyError, match="no routed experts for layer 7"):
        checkpoint.load_moe_layer(dsv4_checkpoint.path, 7)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(tp_size=3), r"tp \(intermediate rows\): 256 is not divisible into 3 shards"),
        (dict(tp_size=16), r"tp \(intermediate rows\): 256 is not divisible into 16 shards of a multiple of 32"),
        (dict(tp_size=2, tp_rank=2), r"tp \(intermediate rows\): rank 2 out of range for size 2"),
        (dict(ep_size=2), r"ep \(experts\): 3 is not divisible into 2 shards"),
        (dict(ep_size=0), r"ep \(experts\): rank 0 out of range for size 0"),
    ],
    ids=["tp3", "tp16-below-block", "tp-rank", "ep2-of-3-experts", "ep0"],
)
def test_bad_parallel_sizes_raise_valueerror(dsv4_checkpoint, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        checkpoint.load_moe_layer(dsv4_checkpoint.path, 0, **kwargs)
