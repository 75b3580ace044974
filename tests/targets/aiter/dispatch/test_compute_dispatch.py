"""Numerics through aiter's dispatch: the tree's real ``fused_moe`` (in a harness child, every
compiled op stood in by fp4moe.targets.aiter.dispatch.compute, fresh allocations poisoned) against
fp4moe.reference (computed here, in the parent), one seeded case per path the dispatch reaches.

The path is forced only by what the tree's own dispatch reads: token count, shapes, the
activation-dtype bound (``AITER_BF16_FP8_MOE_BOUND``) and its tuned CSVs (e4048607):

- heuristic FlyDSL a8w4 (bound 0, 16 tokens, E 4, hidden 512, I 512 / 384 padded to 512), with
  a clamp that binds, and at 1100 tokens (the large-token split quant, tile 64);
- CK 2-stage a8w4 on plain weights (is_shuffled False: FlyDSL and Opus need preshuffled ones);
- heuristic CK 2-stage a16w4 (default bound, 16 tokens): stage 1 and 2 take no pad, and the
  bf16 stage-1 output is MXFP4-quantized: equal to the reference with that inter-stage quant
  when unpadded; on a padded layer the pad is read (NaN from the poisoned pad scales);
- CK-tile split-k a16w4 (default bound, 1 token: ``get_ksplit`` gives 2): the bf16 gate/up
  workspace, the interleaved post-activation; on both CK paths a given clamp is lost (the
  output equals the unclamped reference);
- tuned FlyDSL (``..._gui_..._fp8`` stage 1, FlyDSL stage 2) at DeepSeek-V4-Flash TP8 rank shape
  (hidden 4096, I 256, E 256, top-k 6; model_configs/dsv4_fp8fp4_tuned_fmoe.csv) and 512 tokens
  above the bound;
- Opus stage 1 + Opus stage 2, with the kernels, block_m and ksplit of the tree's first such
  DeepSeek-V4 row, its shape keys set to the small layer's (a one-row ``AITER_CONFIG_FMOE``);
  the FlyDSL fp8 + Opus route-reduce row (an MXFP8 route output, e4m3 + e8m0 per 8 columns, then
  the route reduce) against the reference with ``slot_quant="mxfp8_route"``.

All run a child each (about 10 s; the Flash row about 60 s): slow tier. A child is run once per
distinct input for the session (``DISPATCH_RUNS``): the cases test_dispatch_mutants.py checks on
the unmutated tree read the runs of their tests here, and judge them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import test_compute_ops as ops  # the seeded, pad-poisoned layer (same folder)
import torch
from shared_runs import DISPATCH_GROUP, SharedRuns

from fp4moe.gates.zoo import aiter_dispatch_mutants as dm
from fp4moe.infra import runner
from fp4moe.infra.paths import REPO_ROOT, shared_dir
from fp4moe.reference import moe
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.inputs import make_tokens

TREE = (shared_dir() or REPO_ROOT.parent / "shared") / "aiter" / "e4048607"
CHILD = str(Path(__file__).with_name("dispatch_numerics_child.py"))
SCHEMA = runner.RecordSchema("dispatch-numerics", 1, {"ops": list})

pytestmark = [pytest.mark.shared, pytest.mark.skipif(not (TREE / "aiter" / "fused_moe.py").is_file(), reason=f"no aiter tree at {TREE}")]


_MUTATED: dict = {}


def tree_under_test():
    """The tree, or (``FP4MOE_AITER_DISPATCH_MUTANT`` set by the zoo) a mutated copy of it."""
    name = os.environ.get(dm.MUTANT_ENV)
    if not name:
        return TREE
    if name not in _MUTATED:
        import tempfile

        _MUTATED[name] = dm.mutated_tree(TREE, name, Path(tempfile.mkdtemp(prefix="fp4moe-mutant-")) / "tree")
    return _MUTATED[name]


def _dispatch_child(spec: dict, case: dict, timeout_s: float):
    """(output, ops reached) of one numerics child: it computes, the caller judges."""
    res = runner.run_judged(CHILD, [json.dumps(spec)], label=f"aiter dispatch {spec['tree']}", timeout_s=timeout_s,
                             schema=SCHEMA, inputs={"case": case}, env={"PYTHONPATH": os.pathsep.join(
                                 [str(REPO_ROOT), str(Path(__file__).parent)])})
    return res.tensors("out")["out"], res.record["ops"]


def _inputs_key(spec: dict, case: dict, timeout_s: float) -> str:
    """sha256 of what decides the child's record: the spec with its tree resolved and a config file
    its environment names by the file's bytes (a test's own tmp_path holds it), and each input
    tensor's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    env = {k: (hashlib.sha256(Path(v).read_bytes()).hexdigest() if k == "AITER_CONFIG_FMOE" else v)
           for k, v in spec["env"].items()}
    h.update(json.dumps({**spec, "tree": str(Path(spec["tree"]).resolve()), "env": env}, sort_keys=True).encode())
    for name in sorted(case):
        t = case[name].contiguous()
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


#: the numerics children of the session, one per distinct input (tests/shared_runs.py): a case that
#: test_dispatch_mutants.py runs on the unmutated tree reads the run its own test here made; the
#: tests that share one carry :data:`shared_runs.DISPATCH_GROUP`
DISPATCH_RUNS = SharedRuns(_dispatch_child, _inputs_key)


def run_dispatch(L, x, w, ids, *, env=None, swiglu_limit=None, shuffled=True, tree=None, timeout_s=240):
    tree = tree or tree_under_test()
    spec = {"tree": str(tree), "env": env or {}, "gate_mode": L["gate_mode"], "intermediate_pad": L["pad"],
            "swiglu_limit": swiglu_limit, "shuffled": shuffled}
    case = {"w1": L["w1"].view(torch.uint8), "w2": L["w2"].view(torch.uint8), "w1_scale": L["w1_scale"].view(torch.uint8),
            "w2_scale": L["w2_scale"].view(torch.uint8), "x": x, "topk_weights": w, "topk_ids": ids}
    out, seen = DISPATCH_RUNS(spec, case, timeout_s)
    assert out.shape == (x.shape[0], x.shape[1]) and out.dtype == torch.bfloat16, f"{tuple(out.shape)} {out.dtype}"
    return out, seen


def _reference(L, x, w, ids, **kw):
    if L.get("plain"):
        ew = moe.ExpertWeights(L["w1"], L["w1_scale"].view(ops.E, -1, ops.H // 32), L["w2"], L["w2_scale"].view(ops.E, ops.H, -1))
    else:
        ew = ShuffledExpertWeights(L["w1"], L["w2"], L["w1_scale"], L["w2_scale"], L["gate_mode"])
    return moe.fused_moe_reference(x, ew, w, ids, intermediate_pad=L["pad"], **kw)


def _names(ops_):
    return [o["op"] for o in ops_]


def _stage(ops_, name):
    return [o for o in ops_ if o["op"] == name]


def _stages(ops_):
    return [n for n in _names(ops_) if "stage" in n]


def _equal(got, want, what):
    assert ops._wrong(got, want) == 0, f"{what}: {ops._wrong(got, want)} of {want.numel()} values differ"


def _plain_layer():
    """Unshuffled (plain row-major) weights, unpadded, is_shuffled False."""
    i = 512
    from fp4moe.reference.inputs import make_raw_layer

    raw = make_raw_layer(experts=ops.E, hidden=ops.H, intermediate=i, seed=27)
    return {"w1": raw.w13, "w2": raw.w2, "w1_scale": raw.w13_scale.reshape(ops.E * 2 * i, -1), "w2_scale": raw.w2_scale.reshape(ops.E * ops.H, -1),
            "pad": 0, "gate_mode": "interleave", "plain": True}


#: a clamp that binds on the seeded layer (its gate/up values are ~1e-1): DeepSeek-V4's 10 would not
SWIGLU_LIMIT = 0.02


# ----------------------------------------------------------------------------- the cases (tree -> None, AssertionError on a miss)
def case_flydsl(padded: bool, swiglu_limit=None):
    """Heuristic FlyDSL a8w4, both stages told the pad (and the clamp, when one is given)."""
    L = ops._layer(padded, "interleave")
    x, w, ids = ops._tokens()
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0"}, swiglu_limit=swiglu_limit)
    assert _stages(seen) == ["flydsl_moe_stage1", "flydsl_moe_stage2"], _stages(seen)
    for o in _stage(seen, "flydsl_moe_stage1") + _stage(seen, "flydsl_moe_stage2"):
        assert o["args"]["inter_dim_pad"] == L["pad"], o
    want = _reference(L, x, w, ids, act_mode="a8w4", swiglu_limit=swiglu_limit)
    if swiglu_limit:
        assert ops._wrong(want, _reference(L, x, w, ids, act_mode="a8w4")) > want.numel() // 8, "the clamp must bind"
    _equal(got, want, f"FlyDSL a8w4 padded={padded} swiglu_limit={swiglu_limit}")


def case_ck_unpadded():
    L = ops._layer(False, "interleave")
    x, w, ids = ops._tokens()
    got, seen = run_dispatch(L, x, w, ids)
    assert _stages(seen) == ["ck_moe_stage1", "ck_moe_stage2"], _stages(seen)
    _equal(got, _reference(L, x, w, ids, act_mode="a16w4", stage2_act="mxfp4"), "CK 2-stage a16w4 (MXFP4 inter-stage)")


def case_ck_unshuffled_a8w4():
    """Plain weights (is_shuffled False) above the bound: FlyDSL and Opus need preshuffled weights,
    so the dispatch must take CK 2-stage, whose ops read is_shuffled."""
    L = _plain_layer()
    x, w, ids = ops._tokens()
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0"}, shuffled=False)
    assert _stages(seen) == ["ck_moe_stage1", "ck_moe_stage2"], _stages(seen)
    assert all(o["args"]["is_shuffled"] is False for o in seen if o["op"].startswith("ck_moe_stage")), seen
    _equal(got, _reference(L, x, w, ids, act_mode="a8w4"), "CK 2-stage a8w4 on plain weights")


# ----------------------------------------------------------------------------- the tests
@pytest.mark.xdist_group(DISPATCH_GROUP)
@pytest.mark.slow
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_flydsl_heuristic_a8w4_equals_the_reference(padded):
    case_flydsl(padded)


@pytest.mark.slow
def test_large_token_split_quant_equals_the_reference():
    """1100 tokens (> 8 * 256 / top-k): the stage-1 input takes the split quant (per-row quant, then
    the scale sort); padded M 2048 selects the FlyDSL tile 64."""
    L = ops._layer(True, "interleave")
    x, w, ids = make_tokens(tokens=1100, hidden=ops.H, experts=ops.E, top_k=ops.TOPK, seed=17)
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0"})
    names = _names(seen)
    assert "dynamic_per_group_scaled_quant" in names and "mxfp4_moe_sort_hip" in names, names
    assert _stage(seen, "flydsl_moe_stage1")[0]["args"]["tile_m"] == 64
    _equal(got, _reference(L, x, w, ids, act_mode="a8w4"), "FlyDSL a8w4, split quant")


@pytest.mark.xdist_group(DISPATCH_GROUP)
@pytest.mark.slow
def test_flydsl_clamp_reaches_the_activation():
    case_flydsl(True, swiglu_limit=SWIGLU_LIMIT)


@pytest.mark.xdist_group(DISPATCH_GROUP)
@pytest.mark.slow
def test_ck_2stage_a16w4_unpadded_equals_the_reference_with_mxfp4_inter_stage():
    case_ck_unpadded()


@pytest.mark.xdist_group(DISPATCH_GROUP)
@pytest.mark.slow
def test_ck_2stage_on_plain_weights_honours_is_shuffled():
    case_ck_unshuffled_a8w4()


@pytest.mark.slow
def test_ck_2stage_a16w4_padded_reads_the_pad_it_is_never_told():
    """Known on e4048607 (to confirm on a gfx950): the CK partials take no pad argument."""
    L = ops._layer(True, "interleave")
    x, w, ids = ops._tokens()
    got, seen = run_dispatch(L, x, w, ids)
    assert "ck_moe_stage1" in _names(seen)
    assert bool(torch.isnan(got).all())


@pytest.mark.slow
@pytest.mark.parametrize("path", ["ck_2stage", "cktile_splitk"])
def test_the_clamp_never_reaches_the_ck_paths(path):
    """Known on e4048607 (to confirm on a gfx950): with a swiglu_limit that binds, the CK 2-stage
    (16 tokens) and CK-tile split-k (1 token) outputs equal the reference WITHOUT the clamp."""
    L = ops._layer(False, "interleave")
    if path == "ck_2stage":
        x, w, ids = ops._tokens()
        kw = {"stage2_act": "mxfp4"}
    else:
        x, w, ids = make_tokens(tokens=1, hidden=ops.H, experts=ops.E, top_k=ops.TOPK, seed=11)
        kw = {"gate_up_dtype": torch.bfloat16}
    got, _ = run_dispatch(L, x, w, ids, swiglu_limit=SWIGLU_LIMIT)
    clamped = _reference(L, x, w, ids, act_mode="a16w4", swiglu_limit=SWIGLU_LIMIT, **kw)
    assert ops._wrong(got, clamped) > 0
    _equal(got, _reference(L, x, w, ids, act_mode="a16w4", **kw), f"{path}: the unclamped reference")


@pytest.mark.slow
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_cktile_splitk_a16w4_equals_the_reference_with_bf16_gate_up(padded):
    case_cktile_splitk(padded)


def case_cktile_splitk(padded: bool):
    """CK-tile split-k a16w4 at 1 token: stage 1 told the pad of gate and up (2x), the output the reference's."""
    L = ops._layer(padded, "interleave")
    x, w, ids = make_tokens(tokens=1, hidden=ops.H, experts=ops.E, top_k=ops.TOPK, seed=11)
    got, seen = run_dispatch(L, x, w, ids)
    g1 = _stage(seen, "moe_cktile2stages_gemm1_ck")
    assert g1 and g1[0]["args"]["split_k"] == 2 and g1[0]["args"]["n_padded_zeros"] == 2 * L["pad"]
    assert "flydsl_silu_and_mul_interleaved" in _names(seen)
    _equal(got, _reference(L, x, w, ids, act_mode="a16w4", gate_up_dtype=torch.bfloat16), "CK-tile split-k a16w4")


# ----------------------------------------------------------------------------- a tuned row
FLASH_TP8 = {"experts": 256, "hidden": 4096, "padded": 256, "top_k": 6}  # dsv4_fp8fp4_tuned_fmoe.csv rows 105-121


def random_byte_layer(*, experts, hidden, padded, seed, gate_mode="interleave"):
    """A rank-sized layer without the cost of quantizing it: random FP4 bytes (every byte is two
    valid E2M1 codes) and e8m0 scales in [2^-9, 2^-5], already in the shuffled shapes."""
    g = torch.Generator().manual_seed(seed)
    itlv = gate_mode == "interleave"
    s13_shape = ops.layout.shuffled_scale_shape(experts * 2 * padded, hidden // 32, itlv)
    s2_shape = ops.layout.shuffled_scale_shape(experts * hidden, padded // 32, itlv)
    return {
        "w1": torch.randint(0, 256, (experts, 2 * padded, hidden // 2), generator=g, dtype=torch.uint8),
        "w2": torch.randint(0, 256, (experts, hidden, padded // 2), generator=g, dtype=torch.uint8),
        "w1_scale": torch.randint(0x76, 0x7B, s13_shape, generator=g, dtype=torch.uint8),
        "w2_scale": torch.randint(0x76, 0x7B, s2_shape, generator=g, dtype=torch.uint8),
        "pad": 0,
        "gate_mode": gate_mode,
    }


@pytest.mark.slow
def test_tuned_flydsl_fp8_stage1_at_flash_tp8_equals_the_reference():
    """16 tokens above the bound (AITER_BF16_FP8_MOE_BOUND=0): the tuned row (token 16) selects
    FlyDSL stage 1 with its fused MXFP8 output and FlyDSL stage 2 in reduce mode."""
    c = FLASH_TP8
    L = random_byte_layer(experts=c["experts"], hidden=c["hidden"], padded=c["padded"], seed=5)
    x, w, ids = make_tokens(tokens=16, hidden=c["hidden"], experts=c["experts"], top_k=c["top_k"], seed=13)
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0"})
    s1, s2 = _stage(seen, "flydsl_moe_stage1"), _stage(seen, "flydsl_moe_stage2")
    assert s1 and s1[0]["args"]["out_dtype"] == "fp8" and s1[0]["args"]["gate_mode"] == "interleave"
    assert s2 and s2[0]["args"]["mode"] == "reduce"
    assert "fused_dynamic_mx_quant_moe_sort_hip" in _names(seen)
    want = _reference(L, x, w, ids, act_mode="a8w4")
    assert ops._wrong(got, want) == 0, f"{ops._wrong(got, want)} of {want.numel()} values differ"


# ----------------------------------------------------------------------------- Opus rows, at a small shape
DSV4_CSV = "aiter/configs/model_configs/dsv4_fp8fp4_tuned_fmoe.csv"
OPUS_ROWS = {
    # name: which tuned DeepSeek-V4 row's kernels (the first row of the tree's CSV that matches)
    "opus+opus": lambda r: r["kernelName1"].startswith("opus_moe1_") and r["kernelName2"].startswith("opus_moe2_"),
    "opus+flydsl": lambda r: r["kernelName1"].startswith("opus_moe1_") and r["kernelName2"].startswith("flydsl_moe2_"),
    "flydsl_fp8+opus_route_reduce": lambda r: r["kernelName1"].startswith("flydsl_moe1_")
    and r["kernelName1"].endswith("_fp8") and r["kernelName2"].startswith("opus_moe2_") and "_rbn" in r["kernelName2"],
}


def small_shape_row(tmp_path, pick, *, token: int, experts: int, hidden: int, padded: int, topk: int):
    """The tree's own tuned row (kernels, block_m, ksplit) with its shape keys set to the small
    layer's, in a one-row CSV that ``AITER_CONFIG_FMOE`` points aiter's dispatch at: the Opus
    kernels are reached only by DeepSeek-V4-Pro rank shapes (1.4 GB of w1), too large here."""
    import csv

    src = TREE / DSV4_CSV
    with src.open(newline="") as f:
        reader = csv.DictReader(f)
        for lineno, row in enumerate(reader, start=2):
            if pick(row):
                break
        else:
            pytest.fail(f"{src}: no row matches")
        fields = reader.fieldnames
    row = {**row, "token": token, "model_dim": hidden, "inter_dim": padded, "expert": experts, "topk": topk}
    out = tmp_path / "tuned_fmoe.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerow(row)
    return out, f"{DSV4_CSV}:{lineno}", row


def _opus_case(tmp_path, which, padded):
    L = ops._layer(padded, "interleave")
    x, w, ids = ops._tokens()
    cfg, where, row = small_shape_row(tmp_path, OPUS_ROWS[which], token=ops.T, experts=ops.E, hidden=ops.H, padded=512, topk=ops.TOPK)
    return L, x, w, ids, cfg, where, row


@pytest.mark.slow
def test_opus_mxfp8_route_output_equals_the_reference_in_its_mode(tmp_path):
    """The Pro rows from 128 tokens store stage 2's per-slot route output as MXFP8 bytes (uint8
    [T*topk, H + H/8]) that the route reduce reads: equal to the reference with that slot rounding,
    and not to the bf16-slot one."""
    L, x, w, ids, cfg, where, _ = _opus_case(tmp_path, "flydsl_fp8+opus_route_reduce", True)
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0", "AITER_CONFIG_FMOE": str(cfg)})
    assert "_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw" in _names(seen), where
    want = _reference(L, x, w, ids, act_mode="a8w4", slot_quant="mxfp8_route")
    assert ops._wrong(got, want) == 0, f"{where}: {ops._wrong(got, want)} of {want.numel()} values differ"
    assert ops._wrong(got, _reference(L, x, w, ids, act_mode="a8w4", slot_dtype=torch.bfloat16)) > 0


@pytest.mark.xdist_group(DISPATCH_GROUP)
@pytest.mark.slow
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_opus_rows_equal_the_reference(tmp_path, padded):
    case_opus(tmp_path, padded)


def case_opus(tmp_path, padded: bool):
    """Opus stage 1 + Opus stage 2 (the tree's first such DeepSeek-V4 row), both told the pad."""
    L, x, w, ids, cfg, where, row = _opus_case(tmp_path, "opus+opus", padded)
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0", "AITER_CONFIG_FMOE": str(cfg)})
    stages = [o for o in seen if "stage" in o["op"]]
    assert stages and all(o["args"].get("inter_dim_pad") == L["pad"] for o in stages), f"{where}: {stages}"
    assert any("opus_moe_stage2" in o["op"] for o in stages), f"{where}: {[o['op'] for o in stages]}"
    slot_dtype = torch.bfloat16 if any("route_output" in o["op"] for o in seen) else None
    want = _reference(L, x, w, ids, act_mode="a8w4", slot_dtype=slot_dtype)
    assert ops._wrong(got, want) == 0, f"{where} ({row['kernelName1']} | {row['kernelName2']}): {ops._wrong(got, want)} differ"


def case_opus_flydsl(tmp_path):
    """Opus stage 1 + tuned FlyDSL stage 2 (the tree's first such row), padded: each stage told the
    intermediate pad as such (FlyDSL stage 2: inter_dim_pad, no model_dim_pad), the output the reference's."""
    L, x, w, ids, cfg, where, row = _opus_case(tmp_path, "opus+flydsl", True)
    got, seen = run_dispatch(L, x, w, ids, env={"AITER_BF16_FP8_MOE_BOUND": "0", "AITER_CONFIG_FMOE": str(cfg)})
    s2 = _stage(seen, "flydsl_moe_stage2")
    assert s2 and s2[0]["args"]["inter_dim_pad"] == L["pad"] and s2[0]["args"]["model_dim_pad"] == 0, (where, s2)
    _equal(got, _reference(L, x, w, ids, act_mode="a8w4"), f"{where}: Opus + FlyDSL a8w4 padded")
