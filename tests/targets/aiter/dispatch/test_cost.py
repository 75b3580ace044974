"""The cost of each dispatch row, on paper (fp4moe.targets.aiter.dispatch.cost and its contract
``stage reads the unpadded bytes``), on handmade launch records shaped as e4048607's (DeepSeek-V4-Pro
TP8: hidden 7168, I 384 padded to 512 at align 256, 384 local experts, top-k 6); bytes exact
(integers), R to 4 places."""

from __future__ import annotations

import json

import pytest

from fp4moe.targets.aiter.dispatch import contracts, cost, group, table

H, I, P, E = 7168, 384, 512, 384
PADDED_ROW = {"id": "r", "experts": E, "hidden": H, "inter": I, "inter_padded": P, "intermediate_pad": P - I,
              "hidden_pad": 0, "tokens": 1, "topk": 6}
FP4 = "torch.float4_e2m1fn_x2"


def _w(n: int, k: int) -> dict:
    return {"tensor": [E, n, k // 2], "dtype": FP4, "device": "meta", "is_shuffled": True}


def _s(rows: int, cols: int) -> dict:
    return {"tensor": [rows, cols], "dtype": "torch.float8_e8m0fnu", "device": "meta"}


def flydsl_launches(pad1: int = P - I, pad2: int = P - I, model_pad2: int = 0) -> list:
    """(op, stage, args) of FlyDSL stage 1 and 2 on the padded weights, told the pads given."""
    s1 = {"w1": _w(2 * P, H), "w1_scale": _s(E * 2 * P, H // 32), "inter_dim_pad": pad1, "model_dim_pad": 0,
          "tile_m": 32, "tile_n": 64, "tile_k": 256, "k_batch": 1}
    s2 = {"w2": _w(H, P), "w2_scale": _s(E * H, P // 32), "inter_dim_pad": pad2, "model_dim_pad": model_pad2,
          "tile_m": 32, "tile_n": 256, "tile_k": 256}
    return [("flydsl_moe_stage1", 1, s1), ("flydsl_moe_stage2", 2, s2)]


def _judge(launches, row=PADDED_ROW) -> tuple[str, str]:
    return contracts.reads_unpadded_bytes({"row": row, "cost": cost.row_cost(row, launches)})


def test_a_told_pad_computes_the_unpadded_extents_and_reads_the_minimum_bytes():
    c = cost.row_cost(PADDED_ROW, flydsl_launches())
    s1, s2 = c["stages"]
    assert (s1["n"], s1["k"], s2["n"], s2["k"]) == (2 * I, H, H, I)
    assert s1["weight_bytes"] == 2 * I * H // 2 and s1["scale_bytes"] == 2 * I * H // 32  # 4 bits, 1 byte / 32
    assert (s1["block_m"], s1["tile_n"], s1["tile_k"], s1["split_k"]) == (32, 64, 256, 1)
    assert c["experts_read"] == 6 and c["bytes"] == c["min_bytes"] == 6 * (s1["bytes"] + s2["bytes"]) and c["ratio"] == 1.0
    assert _judge(flydsl_launches())[0] == contracts.PASS


def test_the_padded_extent_where_the_pad_was_given_reads_r_times_the_bytes():
    res, det = _judge(flydsl_launches(pad2=0))  # stage 2 loses inter_dim_pad: K 512 for 384
    assert res == contracts.FAIL and det.startswith("reads 1.1111 times the bytes"), det
    assert "stage 2 flydsl_moe_stage2 computes N 7168 x K 512 (model_dim_pad=0, inter_dim_pad=0)" in det
    ck = [("ck_moe_stage1", 1, {"w1": _w(2 * P, H), "w1_scale": _s(E * 2 * P, H // 32)}),
          ("ck_moe_stage2", 2, {"w2": _w(H, P), "w2_scale": _s(E * H, P // 32)})]  # the op takes no pad
    res, det = _judge(ck)
    assert res == contracts.FAIL and "reads 1.3333 times the bytes" in det and "(takes no pad)" in det, det
    unpadded = {**PADDED_ROW, "inter": P, "intermediate_pad": 0}  # the same launches for I 512 itself: the minimum
    assert _judge(ck, unpadded)[0] == contracts.PASS


def test_a_pad_on_the_wrong_extent_or_for_one_half_fails():
    res, det = _judge(flydsl_launches(pad2=0, model_pad2=P - I))  # the pad told as model_dim_pad
    assert res == contracts.FAIL and "reads 1.1032 times the bytes" in det and "computes fewer than the real channels" in det
    half = [("moe_cktile2stages_gemm1_ck", 1, {"WQ": _w(2 * P, H), "w_scale": _s(E * 2 * P, H // 32),
                                               "n_padded_zeros": P - I, "k_padded_zeros": 0, "block_m": 16, "split_k": 7}),
            ("moe_cktile2stages_gemm2_ck", 2, {"WQ": _w(H, P), "w_scale": _s(E * H, P // 32),
                                               "n_padded_zeros": 0, "k_padded_zeros": P - I})]
    res, det = _judge(half)  # n_padded_zeros counts gate and up together: the pad once leaves N 896
    assert res == contracts.FAIL and "reads 1.1111 times the bytes" in det and "N 896 x K 7168" in det, det
    half[0][2]["n_padded_zeros"] = 2 * (P - I)
    assert _judge(half)[0] == contracts.PASS


def test_a_launch_whose_cost_cannot_be_derived_is_na_never_pass():
    launches = flydsl_launches()
    launches[1][2]["w2"] = {**launches[1][2]["w2"], "dtype": "torch.uint8"}
    res, det = _judge(launches)
    assert res == contracts.NA and "flydsl_moe_stage2.w2" in det
    assert _judge([("some_new_stage", 1, {})])[0] == contracts.NA
    assert _judge([])[0] == contracts.FAIL  # no stage ran


def test_the_same_records_give_bit_identical_cost_facts():
    one = json.dumps(cost.row_cost(PADDED_ROW, flydsl_launches()), sort_keys=True)
    assert one == json.dumps(cost.row_cost(json.loads(json.dumps(PADDED_ROW)), json.loads(json.dumps(flydsl_launches()))),
                             sort_keys=True)


def _fact(us, launches, kernels=("k1", "k2")) -> dict:
    tuned = {"where": "dsv4.csv:3", "us": us, "us1": "1", "us2": "2"} if us else None
    return {"id": "r", "path": "FlyDSL + FlyDSL", "kernels": list(kernels), "tuned": tuned,
            "cost": cost.row_cost(PADDED_ROW, launches)}


def test_the_table_shows_the_tuned_time_and_the_bytes_and_the_upgrade_before_and_after():
    head, base = _fact("24.4433", flydsl_launches()), _fact(None, flydsl_launches(pad2=0), ("heuristic", "heuristic"))
    assert table.tuned_us(head) == "24.4433 us" and table.tuned_us(base) == "heuristic"
    assert cost.cost_text(base["cost"]).startswith("29.2 MB x1.1111 (s1 768x7168 x1 / s2 7168x512 x1.3333)")
    rows = group.diff_tables([head], [base], [], [])
    assert rows[0]["check"] == "upgrade dispatch: r", rows
    assert "(heuristic, heuristic; reads 29.2 MB x1.1111" in rows[0]["detail"]
    assert "(dsv4.csv:3, 24.4433 us; reads 26.3 MB x1" in rows[0]["detail"]
    assert head["base"] == {"path": "FlyDSL + FlyDSL", "kernels": ["heuristic", "heuristic"], "tuned_us": "heuristic",
                            "bytes": base["cost"]["bytes"], "ratio": 1.1111}
    same = group.diff_tables([_fact("24.4433", flydsl_launches())], [_fact("24.4433", flydsl_launches())], [], [])
    assert [r["check"] for r in same] == ["upgrade dispatch: rows compared"]


def test_every_stage_op_has_a_launch_shape():
    assert set(cost.LAUNCHES) == set(table.STAGE_OPS)


#: one padded DeepSeek-V4-Pro TP8 row per path e4048607 takes (align 256: I 384 padded to 512)
AA_ROWS = {"dsv4-pro tp8/ep1 align256 a16w4 M=1": (1.0, "CK-tile + CK-tile"),
           "dsv4-pro tp8/ep1 align256 a16w4 M=9": (1.3333, "CK 2-stage + CK 2-stage"),  # ck2stage-pad-not-passed
           "dsv4-pro tp8/ep1 align256 a8w4 M=1": (1.0, "FlyDSL + FlyDSL"),
           "dsv4-pro tp8/ep1 align256 a8w4 M=65": (1.0, "FlyDSL + Opus")}


@pytest.mark.slow
def test_an_aa_run_gives_bit_identical_cost_facts_and_the_ratio_per_path():
    """The same tree twice (two dispatch children): the cost facts are bit-identical; per path, R on
    e4048607 (CK 2-stage takes no pad: the known ck2stage-pad-not-passed, on paper 1.3333)."""
    from dispatch_rows import HAVE_TREE, TREE, catalogue_rows, run

    if not HAVE_TREE:
        pytest.skip(f"{TREE} absent")
    rows = catalogue_rows(list(AA_ROWS))
    a, b = run(TREE, rows), run(TREE, rows)
    assert json.dumps({k: f["cost"] for k, f in a.items()}, sort_keys=True) == \
        json.dumps({k: f["cost"] for k, f in b.items()}, sort_keys=True)
    assert {k: (f["cost"]["ratio"], f["path"]) for k, f in a.items()} == AA_ROWS
