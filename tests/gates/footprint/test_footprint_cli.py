"""``fp4moe-gate footprint``: JSON bytes to the byte, both units in the table, clear errors.

Expected byte counts are written as arithmetic on DeepSeek-V4-Pro's dimensions (E 384, H 7168,
I_p 3072/8 = 384), independent of ``fp4moe.reference.footprint``.
"""

from __future__ import annotations

import json

import pytest

import fp4moe.commands.main as cli
import fp4moe.gates.footprint as footprint_gate
from fp4moe.model.catalogue import catalogue_rows

E, H = 384, 7168


@pytest.fixture(autouse=True)
def only_footprint_subcommand(monkeypatch):
    """Run the real ``fp4moe-gate`` entry point (its exit codes and error printing) without
    importing the other gates' modules, which belong to other test files' budgets."""
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ("fp4moe.commands.footprint",))


def main(argv):
    return cli.main(argv)


def _json(capsys, *argv):
    assert main(["footprint", *argv, "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("align,p", [(128, 384), (256, 512)])
def test_pro_tp8_json_matches_independent_arithmetic(capsys, align, p):
    out = _json(capsys, "--model", "dsv4-pro", "--tp", "8", "--align", str(align))
    assert out["units"] == {"bytes": 1, "GiB": 2**30, "GB": 10**9}
    (row,) = out["rows"]
    assert (row["tp"], row["ep"], row["intermediate_per_partition"], row["padded_intermediate"]) == (8, 1, 384, p)
    assert row["intermediate_pad"] == p - 384
    t = row["tensors"]
    assert t["w13"]["bytes"] == E * 2 * p * H // 2
    assert t["w13_scale"]["bytes"] == E * 2 * p * H // 32
    assert t["w2"]["bytes"] == E * H * p // 2
    assert t["w2_scale"]["bytes"] == E * H * p // 32
    before = E * 2 * p * H // 2 + E * 2 * p * H // 32 + E * H * p // 2 + E * H * p // 32
    assert row["per_layer"]["routed_before_shuffle"]["bytes"] == before
    assert before == {128: 1_684_537_344, 256: 2_246_049_792}[align]
    # after shuffle growth: w2 scale columns P/32 rounded up to a multiple of 8
    after = before + E * H * (-(-(p // 32) // 8) * 8 - p // 32)
    assert row["per_layer"]["routed"]["bytes"] == after
    assert row["per_layer"]["routed"]["GiB"] == after / 2**30
    assert row["per_layer"]["routed"]["GB"] == after / 10**9
    assert row["per_model"]["routed"]["bytes"] == 61 * after
    assert t["w2_scale"]["shuffled_shape"] == [E * H, 16]


def test_table_lists_every_catalogue_row_and_both_units(capsys):
    assert main(["footprint"]) == 0
    out = capsys.readouterr().out
    assert "GiB" in out and "GB" in out and "2^30" in out and "10^9" in out
    body = [line for line in out.splitlines() if line.startswith("dsv4-")]
    assert len(body) == 2 * len(catalogue_rows())  # x align {128, 256}
    assert any("2,246,049,792" in line for line in body) and any("1,695,547,392" in line for line in body)


def test_assumed_non_routed_terms_are_labelled(capsys):
    out = _json(capsys, "--model", "dsv4-pro", "--tp", "8", "--align", "256", "--shared", "fp8-block128", "--router", "bf16")
    row = out["rows"][0]
    assert row["non_routed"]["assumption"] == "shared=fp8-block128,router=bf16"
    assert row["per_layer"]["total_with_non_routed"]["bytes"] == 2_246_049_792 + 13_764_576


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--model", "dsv4-max"], "valid models: dsv4-flash, dsv4-pro"),
        (["--model", "dsv4-pro", "--tp", "5"], "valid moe_tp values"),
        (["--model", "dsv4-pro", "--tp", "14", "--ep", "7"], "valid ep values"),
        (["--model", "dsv4-pro", "--tp", "8", "--ep", "5"], "--ep 5 must divide --tp 8"),
        (["--align", "64"], "valid values are 128, 256"),
        (["--ep", "x"], "an integer or 'all'"),
    ],
)
def test_bad_options_exit_2_with_a_message_listing_what_is_valid(capsys, argv, needle):
    assert main(["footprint", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_check_budget_exit_codes(capsys, monkeypatch):
    """Exit 0 within budget, 1 over it (a budget lowered by one byte), on the cheapest rows."""
    rows = [c for c in catalogue_rows() if c.tp == 16]
    monkeypatch.setattr(footprint_gate, "catalogue_rows", lambda: rows)
    assert main(["footprint", "--check-budget"]) == 0
    real = footprint_gate.load_budget()

    def tightened():
        return [
            type(e)(**{**e.__dict__, "max_bytes_per_layer": e.max_bytes_per_layer - 1}) if e.tp == 16 and e.ep == 8 else e
            for e in real
        ]

    monkeypatch.setattr(footprint_gate, "load_budget", tightened)
    capsys.readouterr()
    assert main(["footprint", "--check-budget", "--json", "-"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert len(out["failures"]) == 2  # dsv4-pro and dsv4-flash at tp16 ep8
    assert all("+1 B" in f for f in out["failures"])
