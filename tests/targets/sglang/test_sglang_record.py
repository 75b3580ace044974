"""The SGLang child's record has one schema (``fp4moe.targets.sglang.record``): the child writes
it, the parent validates it before any check reads it, and a record with an unknown or a missing
key -- at the top or in a row -- is a cannot-run line naming the key and the row, not a KeyError.

No SGLang and no child process here: the parent is given records as the harness would read them
back (``runner.run_python`` replaced), so the module stays in the CPU tier."""

from __future__ import annotations

import pytest

from fp4moe.infra import runner
from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.sglang import record, source, target


def _driven_row(label: str) -> dict:
    row = {k: {} for k, t in record.DRIVEN_ROW.fields.items() if t is dict}
    row.update(label=label, shuffle_calls=[], is_shuffled=True, act_mode="a16w4", a8w4_via="x")
    return row


def _final(**change) -> dict:
    rec = record.initial("0.5.23", None)
    rec.update(stage="done", mode="cpu", rows=[_driven_row("dsv4-pro-tp16")])
    rec.update(change)
    return {"schema": record.NAME, "schema_version": record.VERSION, **rec, "outputs": {}}


def test_the_initial_record_is_the_whole_schema():
    rec = record.initial("0.5.23", "no Landlock")
    assert set(rec) == set(record.FIELDS) and rec["writes_confined"] is False
    body = record.SCHEMA.validate({"schema": record.NAME, "schema_version": record.VERSION, **rec}, "t")
    assert body["unconfined"] == "no Landlock"


@pytest.mark.parametrize("change, says", [
    ({"surprise": 1}, "unknown key(s) ['surprise']"),
    ({"mode_why": "x", "flags": None}, "'flags' is NoneType, not dict"),
    ({"schema_version": record.VERSION + 1}, f"the judge reads 'sglang-drive' version {record.VERSION}"),
])
def test_a_top_level_key_the_schema_does_not_know_is_named(change, says):
    with pytest.raises(GateCannotRun, match=None) as e:
        record.SCHEMA.validate(_final(**change), "sglang 0.5.23: the SGLang child")
    assert says in str(e.value) and str(e.value).startswith("sglang 0.5.23: the SGLang child"), str(e.value)


def test_a_missing_top_level_key_is_named():
    rec = _final()
    del rec["shuffle_source"]
    with pytest.raises(GateCannotRun, match=r"missing key\(s\) \['shuffle_source'\]"):
        record.SCHEMA.validate(rec, "t")


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.pop("footprint"), "row dsv4-pro-tp16: record sglang-drive.row v1: missing key(s) ['footprint']"),
    (lambda r: r.update(extra=1), "row dsv4-pro-tp16: record sglang-drive.row v1: unknown key(s) ['extra']"),
    (lambda r: r.update(error="E"), "row dsv4-pro-tp16: record sglang-drive.failed-row v1: unknown key(s)"),
    (lambda r: r.update(is_shuffled=1), "'is_shuffled' is int, not bool"),
])
def test_a_row_key_the_schema_does_not_know_or_lacks_is_named(edit, says):
    body = record.SCHEMA.validate(_final(), "t")
    edit(body["rows"][0])
    with pytest.raises(GateCannotRun) as e:
        record.validate_rows(body, "sglang 0.5.23: the SGLang child")
    assert says in str(e.value), str(e.value)


def test_a_failed_row_and_a_row_without_pre_permute_are_valid():
    body = record.SCHEMA.validate(_final(), "t")
    body["rows"] = [{"label": "a", "error": "E: x", "where": [], "step": "load", "setup": True},
                    {k: v for k, v in _driven_row("b").items() if k not in ("a8w4_via", "pre_permute_output")}]
    assert [r["label"] for r in record.validate_rows(body, "t")] == ["a", "b"]


class _Result:
    timed_out, seconds, rc, partial = False, 1.0, 0, None

    def __init__(self, rec):
        self.record = rec


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.update(surprise=1), "unknown key(s) ['surprise']"),
    (lambda r: r.pop("mutant"), "missing key(s) ['mutant']"),
    (lambda r: r["rows"][0].pop("empty_batch"), "row dsv4-pro-tp16: record sglang-drive.row v1: missing key(s) ['empty_batch']"),
])
def test_the_drive_refuses_a_record_off_the_schema_before_any_check(tmp_path, monkeypatch, gate_free_env, edit, says):
    """Through the parent: the record the harness reads back is validated in ``target.drive``,
    so the gate's line (exit 2) names the key, and no check ever sees the record."""
    rec = _final()
    edit(rec)
    monkeypatch.setattr(target, "missing_deps", lambda: [])
    monkeypatch.setattr(runner, "run_python", lambda args, **kw: _Result(rec))
    src = source.SGLangSource(root=tmp_path, origin="test", version="0.5.23")
    (tmp_path / source.FP8_FILE).parent.mkdir(parents=True)
    (tmp_path / source.FP8_FILE).write_text("if _use_aiter and layer.is_fp4_expert:\n    pass\n")
    with pytest.raises(GateCannotRun) as e:
        target.drive(src, [target.Row("dsv4-pro", 16)], mode="cpu")
    line = str(e.value)
    assert line.startswith("sglang 0.5.23 (test): the SGLang child: ") and says in line and "\n" not in line, line


@pytest.fixture
def gate_free_env(tmp_path, monkeypatch):
    import tempfile

    t = tmp_path / "tmpdir"
    t.mkdir()
    monkeypatch.setenv("TMPDIR", str(t))
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield
    assert list(t.iterdir()) == [], "the drive's folders are gone after a refused record"
