"""sglang-check's judging pieces on synthetic child records, on any machine (the sglang tier
that drives SGLang itself skips where SGLang is absent): pad bytes inert or harmful at the
byte boundaries, the empty-batch record, the attributes aiter reads, why a run cannot be
judged, and a check missing for a row."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from fp4moe.gates import sglang_check as sc
from fp4moe.targets.sglang import checks as row_checks


@pytest.mark.parametrize("byte, harmful", [(0x00, False), (0x88, False), (0x08, False), (0x80, False),
                                           (0x01, True), (0x10, True), (0x89, True), (0x77, True), (0xF0, True)])
def test_a_weight_pad_byte_is_inert_exactly_when_both_codes_are_plus_or_minus_zero(byte, harmful):
    pad = torch.tensor([0x00, byte, 0x88], dtype=torch.uint8)
    why = row_checks.pad_bytes_harmful("w13", pad)
    assert (why != "") is harmful
    if harmful:
        assert why == f"1 weight pad bytes hold non-zero FP4 codes (first 0x{byte:02X})"


def test_weight_pad_counts_and_names_the_first_bad_byte():
    pad = torch.tensor([0x00, 0x21, 0x88, 0x03, 0x70], dtype=torch.uint8)
    assert row_checks.pad_bytes_harmful("w2", pad) == "3 weight pad bytes hold non-zero FP4 codes (first 0x21)"


@pytest.mark.parametrize("byte, harmful", [(0xFF, True), (0xFE, False), (0x7F, False), (0x00, False)])
def test_a_scale_pad_byte_is_harmful_only_as_e8m0_nan(byte, harmful):
    pad = torch.tensor([0x7F, byte, 0x7F], dtype=torch.uint8)
    assert row_checks.pad_bytes_harmful("w2_scale", pad) == ("1 scale pad bytes 0xFF (e8m0 NaN)" if harmful else "")
    assert row_checks.pad_bytes_harmful("w13_scale", torch.full((4,), 0xFF, dtype=torch.uint8)) == \
        "4 scale pad bytes 0xFF (e8m0 NaN)"


def test_pad_mask_marks_exactly_the_padded_channels():
    m = row_checks.pad_mask("w13", (2, 2 * 8, 3), ip=5, p=8)
    rows = m[0, :, 0].tolist()
    assert rows == [False] * 5 + [True] * 3 + [False] * 5 + [True] * 3 and bool(m[1].eq(m[0]).all())
    w2 = row_checks.pad_mask("w2", (1, 4, 8), ip=10, p=16)  # bytes: 5 real columns of 8
    assert w2[0, 0].tolist() == [False] * 5 + [True] * 3
    s2 = row_checks.pad_mask("w2_scale", (1, 4, 4), ip=64, p=128)  # scales: 2 real blocks of 4
    assert s2[0, 3].tolist() == [False, False, True, True]


def test_empty_batch_record():
    ok = {"output": {"shape": [0, 7168], "dtype": "bfloat16"}, "fused_moe_calls": 0}
    assert row_checks.empty_batch_problems(ok, 7168) == []
    assert row_checks.empty_batch_problems(None, 7168) == ["the child recorded no empty-batch run"]
    assert row_checks.empty_batch_problems({"error": "IndexError: x"}, 7168) == ["raised IndexError: x"]
    assert row_checks.empty_batch_problems({"output": {"shape": [0, 4096], "dtype": "bfloat16"}}, 7168) == \
        ["output bfloat16 [0, 4096] (expected bfloat16 [0, 7168])"]
    assert row_checks.empty_batch_problems({"output": {"shape": [0, 7168], "dtype": "float32"}}, 7168) == \
        ["output float32 [0, 7168] (expected bfloat16 [0, 7168])"]
    assert row_checks.empty_batch_problems({"output": "garbage"}, 8) == ["output None None (expected bfloat16 [0, 8])"]
    called = row_checks.empty_batch_problems({**ok, "fused_moe_calls": 1}, 7168)
    assert called == ["fused_moe called 1 time(s) with 0 tokens (aiter's fused_moe has no M == 0 guard; "
                      "SGLang's runner returns early)"]
    both = row_checks.empty_batch_problems({"error": "E", "fused_moe_calls": 2}, 7168)
    assert both[0] == "raised E" and both[1].startswith("fused_moe called 2 time(s)")


@dataclass
class _Attr:
    meaning: str
    where: tuple = ("aiter/fused_moe.py:10",)


def test_attributes_aiter_reads():
    shuffled = _Attr("layout_shuffled")
    assert row_checks.attr_ok(shuffled, True, True, 96) == (True, "True (the bytes are in aiter's pre-shuffled layout)")
    assert row_checks.attr_ok(shuffled, False, True, 96)[0] is False
    assert row_checks.attr_ok(shuffled, False, False, 96) == (True, "False (the bytes are not shuffled)")
    assert row_checks.attr_ok(shuffled, 1, True, 96)[0] is False  # True, not a truthy stand-in
    assert row_checks.attr_ok(shuffled, None, False, 96)[0] is False
    real = _Attr("real_intermediate")
    for got, ok in (("<absent>", True), (None, True), (96, True), (128, False), (95, False)):
        assert row_checks.attr_ok(real, got, True, 96) == (ok, "absent or 96 (the unpadded I_p)")
    fp4 = _Attr("fp4x2")
    assert row_checks.attr_ok(fp4, "torch.float4_e2m1fn_x2", True, 96) == (True, "torch.float4_e2m1fn_x2 (aiter dtypes.fp4x2)")
    assert row_checks.attr_ok(fp4, "torch.uint8", True, 96)[0] is False
    ok, why = row_checks.attr_ok(_Attr("new_flag", ("a.py:1", "b.py:2")), True, True, 96)
    assert not ok and why == "unknown to this gate: aiter reads it (a.py:1, b.py:2) and the table has no meaning for it"


def _drive(record, version="0.5.99"):
    return SimpleNamespace(record=record, source=SimpleNamespace(version=version), mutant="m1", rows=[],
                           tensors={}, inputs={}, aiter_src=None)


def test_runs_that_cannot_be_judged_say_why():
    assert sc.judge(_drive({"mutant": {"applied": False, "why": "no such function"}})) == \
        ([], "sglang 0.5.99: mutant 'm1' was not applied: no such function")
    assert sc.judge(_drive({"stage": "no branch", "error": "no FP4 aiter branch in 0.5.1"})) == \
        ([], "no FP4 aiter branch in 0.5.1")
    assert sc.judge(_drive({"sglang_version": "0.5.7", "error": "boom", "stage": "import",
                            "where": ["a.py:1", "b.py:2"]})) == \
        ([], "sglang 0.5.7: the child failed at import: boom (b.py:2 <- a.py:1)")
    checks, why = sc.judge(_drive({"missing_module": "msgspec"}))
    assert checks == [] and why.startswith("sglang 0.5.99: the SGLang child cannot import msgspec")


def test_an_applied_mutant_is_judged_and_a_failure_without_a_trail_still_says_where_it_stopped():
    assert sc._cannot_judge(_drive({"mutant": {"applied": True, "why": ""}})) is None
    assert sc._cannot_judge(_drive({"mutant": {"applied": True}, "error": "boom", "stage": "load"})) == \
        "sglang 0.5.99: the child failed at load: boom ()"


def test_a_row_the_harness_could_not_set_up_cannot_be_judged_and_names_the_recorded_version():
    d = _drive({"sglang_version": "0.5.7", "rows": [{"label": "r1", "error": "boom", "setup": True, "step": "load",
                                                     "where": ["a.py:1", "b.py:2"]}]})
    d.rows = [SimpleNamespace(label="r1")]
    assert sc.judge(d) == ([], "sglang 0.5.7: could not drive r1 (step load): boom at b.py:2 <- a.py:1")


def test_a_check_never_judged_for_a_row_is_a_failure():
    d = _drive({"sglang_version": "0.5.9"})
    ok = sc.Check("pad_bytes", "r1", True, "cmp")
    bad = sc.Check("pad_bytes", "r2", False, "cmp", "2 bytes")
    drove = sc.Check("drive", "r3", False, "cmp", "raised X")
    results = {("pad_bytes", "r1"): ok, ("pad_bytes", "r2"): bad, ("drive", "r3"): drove}
    assert sc.failure(d, results, "pad_bytes", "r1") is None
    assert sc.failure(d, results, "pad_bytes", "r2") == bad.line("0.5.9")
    assert sc.failure(d, results, "pad_bytes", "r3") == "pad_bytes was not judged for r3: " + drove.line("0.5.9")
    assert sc.failure(d, results, "pad_bytes", "r4") == "pad_bytes was not judged for r4: row not driven"
    assert bad.line("0.5.9").endswith("\n     sglang 0.5.9: 2 bytes") and bad.line("0.5.9").startswith("FAIL pad_bytes")


def _rows_drive(rows, record, tensors=None, inputs=None):
    d = _drive(record)
    d.rows = [SimpleNamespace(label=label) for label in rows]
    d.tensors = tensors or {}
    d.inputs = inputs or {label: {"x": label} for label in rows}
    return d


def test_each_driven_row_is_judged_with_its_own_record_tensors_inputs_mode_and_attributes(monkeypatch):
    seen = []

    def judge_row(ctx):
        seen.append(ctx)
        return [sc.Check("pad_bytes", ctx.label, ctx.label == "r1", "cmp")]

    monkeypatch.setattr(sc, "judge_row", judge_row)
    monkeypatch.setattr(sc, "load_budget", lambda: ["budget"])
    monkeypatch.setattr(sc.tensor_attrs, "attrs_for", lambda src: (["a", "b"], f"origin {src}"))
    r1, r2 = {"label": "r1", "step": "done"}, {"label": "r2", "step": "done"}
    d = _rows_drive(["r1", "r2"], {"mode": "gfx950", "rows": [r2, r1]}, tensors={"r1": {"output": 1}})
    d.aiter_src = "/tree"
    checks, why = sc.judge(d)
    assert why is None
    assert [(c.name, c.row, c.ok, c.compared, c.detail) for c in checks] == [
        (sc.DRIVE_CHECK, "r1", True, sc.DRIVEN, "1 fused_moe call"), ("pad_bytes", "r1", True, "cmp", ""),
        (sc.DRIVE_CHECK, "r2", True, sc.DRIVEN, "1 fused_moe call"), ("pad_bytes", "r2", False, "cmp", "")]
    assert [(c.rec, c.tensors, c.inputs, c.row, c.budget, c.mode, c.attrs, c.attrs_origin) for c in seen] == [
        (r1, {"output": 1}, {"x": "r1"}, d.rows[0], ["budget"], "gfx950", ("a", "b"), "origin /tree"),
        (r2, None, {"x": "r2"}, d.rows[1], ["budget"], "gfx950", ("a", "b"), "origin /tree")]


def test_a_record_without_a_mode_is_judged_as_the_cpu_mode_and_no_attributes_as_an_empty_tuple(monkeypatch):
    seen = []
    monkeypatch.setattr(sc, "judge_row", lambda ctx: seen.append(ctx) or [])
    monkeypatch.setattr(sc.tensor_attrs, "attrs_for", lambda src: (None, "none"))
    checks, why = sc.judge(_rows_drive(["r1"], {"mode": None, "rows": [{"label": "r1"}]}))
    assert why is None and [c.ok for c in checks] == [True]
    assert (seen[0].mode, seen[0].attrs, seen[0].attrs_origin) == ("cpu", (), "none")


def test_a_row_that_raised_fails_its_drive_check_and_one_never_reached_says_so(monkeypatch):
    monkeypatch.setattr(sc, "judge_row", lambda ctx: pytest.fail("a row that raised is not judged further"))
    raised = {"label": "r1", "error": "IndexError: 3", "step": "process", "where": ["a.py:1", "b.py:2"]}
    checks, why = sc.judge(_rows_drive(["r1", "r2"], {"rows": [raised]}))
    assert why is None
    assert [(c.name, c.row, c.ok, c.compared, c.detail) for c in checks] == [
        (sc.DRIVE_CHECK, "r1", False, sc.DRIVEN, "process raised IndexError: 3 at b.py:2 <- a.py:1"),
        (sc.DRIVE_CHECK, "r2", False, sc.DRIVEN, "not driven (the child stopped before this row)")]
    bare = {"label": "r1", "error": "E"}  # no step, no trail: still one line
    assert sc.judge(_rows_drive(["r1"], {"rows": [bare]}))[0][0].detail == "None raised E at "


def test_a_row_not_set_up_ends_the_judgement_and_keeps_what_was_judged_before_it(monkeypatch):
    monkeypatch.setattr(sc, "judge_row", lambda ctx: [])
    rows = [{"label": "r1"}, {"label": "r2", "error": "boom", "setup": True, "step": "load"}]
    checks, why = sc.judge(_rows_drive(["r1", "r2", "r3"], {"rows": rows}))
    assert [(c.row, c.ok) for c in checks] == [("r1", True)]
    assert why == "sglang 0.5.99: could not drive r2 (step load): boom at "
    unset = {"label": "r1", "error": "boom", "setup": False, "step": "load"}  # setup False: an ordinary failure
    assert sc.judge(_rows_drive(["r1"], {"rows": [unset]}))[1] is None


def test_a_record_without_rows_drove_none_of_them():
    checks, why = sc.judge(_rows_drive(["r1"], {}))
    assert why is None and [(c.row, c.ok, c.detail) for c in checks] == [
        ("r1", False, "not driven (the child stopped before this row)")]


def test_a_failure_names_the_resolved_version_when_the_child_recorded_none():
    bad = sc.Check("pad_bytes", "r1", False, "cmp", "2 bytes")
    assert sc.failure(_drive({}), {("pad_bytes", "r1"): bad}, "pad_bytes", "r1") == bad.line("0.5.99")
    assert bad.line("0.5.99").endswith("sglang 0.5.99: 2 bytes")
