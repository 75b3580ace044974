"""The tuned-CSV row a dispatch row's kernels came from (``table.csv_row_for``): the row at the
padded token count holding either selected kernel, else the largest smaller token count holding
both (aiter's tier fallback), among rows of the same shape and dtypes on gfx950 with 256 CUs.
The lookup reads the rows grouped by that key (``table.CsvIndex``); a plain list is scanned. CPU
tier; the e4048607 table (1660 rows of the full scope) gave the same row both ways (evidence:
docs/evidence/lean-gate.md)."""

from __future__ import annotations

from fp4moe.targets.aiter.dispatch import table

SHAPE = ("7168", "384", "384", "6")
DTYPES = ("torch.bfloat16", "torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "QuantType.per_1x32")


def _row(token, k1, k2, *, shape=SHAPE, gfx="gfx950", cu="256", us="1.0"):
    md, inter, e, topk = shape
    return {"token": str(token), "model_dim": md, "inter_dim": inter, "expert": e, "topk": topk, "dtype": DTYPES[0],
            "q_dtype_a": DTYPES[1], "q_dtype_w": DTYPES[2], "q_type": DTYPES[3], "gfx": gfx, "cu_num": cu,
            "kernelName1": k1, "kernelName2": k2, "us1": us, "us2": us, "us": us}


ROWS = [
    ("t.csv:2", _row(16, "s1a", "s2a")),
    ("t.csv:3", _row(32, "s1b", "s2b", gfx="gfx942")),  # another arch: never read
    ("t.csv:4", _row(32, "s1b", "s2b", cu="80")),  # another CU count: never read
    ("t.csv:5", _row("x", "s1b", "s2b")),  # not a number: never read
    ("t.csv:6", _row(32, "s1b", "s2b", us="2.0")),
    ("t.csv:7", _row(32, "s1b", "s2b", us="3.0")),  # the same token again: the first wins
    ("t.csv:8", _row(64, "s1c", "s2c", shape=("7168", "512", "384", "6"))),  # another shape
    ("t.csv:9", _row(128, "s1b", "s2x")),
]


def _args(token, *, dtype=DTYPES[0]):
    md, inter, e, topk = (int(x) for x in SHAPE)
    return [token, md, inter, e, topk, dtype, *DTYPES[1:], True, "silu", False]


def _both(args, k1, k2):
    idx = table.CsvIndex(ROWS)
    got = table.csv_row_for(args, k1, k2, idx)
    assert got == table.csv_row_for(args, k1, k2, list(ROWS))  # grouped and scanned agree
    return got


def test_the_row_at_the_token_count_with_either_kernel():
    assert _both(_args(32), "s1b", "other")["where"] == "t.csv:6"
    assert _both(_args(32), "other", "s2b")["us"] == "2.0"
    assert _both(_args(128), "s1b", "nope")["where"] == "t.csv:9"


def test_the_tier_fallback_takes_the_largest_smaller_token_holding_both_kernels():
    got = _both(_args(100), "s1b", "s2b")
    assert got["where"] == "t.csv:6 (tier fallback from token 100)" and got["token"] == 32
    assert _both(_args(100), "s1a", "s2a")["token"] == 16
    assert _both(_args(100), "s1b", "s2x") is None  # 128 is above the token count
    assert _both(_args(8), "s1a", "s2a") is None


def test_rows_of_another_arch_cu_count_shape_or_dtype_are_never_taken():
    assert _both(_args(64), "s1c", "s2c") is None
    assert _both(_args(32, dtype="torch.float16"), "s1b", "s2b") is None
    assert _both(_args(32)[:11], "s1b", "s2b") is None  # too few recorded arguments


def test_an_unhashable_recorded_argument_is_compared_row_by_row():
    assert _both(_args(32, dtype={"dtype": "torch.bfloat16"}), "s1b", "s2b") is None
