"""sglang-check ``--known-defects``: a failure is KNOWN only where one registry entry names it
exactly (check, row, release, the recorded failure text): a new failure of the same check, another
release or another row is still a regression, and a registry that is not well formed is exit 2
naming the file."""

from __future__ import annotations

import json

import pytest

from fp4moe.gates import sglang_check as gate
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.paths import data_path
from fp4moe.targets.sglang.checks import Check

PACKAGED = data_path("sglang_known_defects.json")
SIG = "renorm: logits [-20.0, -21.0]: weights [nan, nan] (not finite: an unfloored 0/0)"


def _failed(name="router_numerics:hash_topk_triton", row="release", detail=SIG + "; renorm: logits [-50.0, -60.0]: ..."):
    return Check(name, row, False, "sqrtsoftplus vs float64", detail)


def test_the_packaged_registry_names_the_pinned_releases_router_findings():
    entries = gate.load_known(str(PACKAGED))
    assert {e["check"] for e in entries} == {"router_numerics:hash_topk_triton", "router_numerics:rocm_router_gate"}
    assert gate.known_entry(_failed(), "0.5.23", entries)["check"] == "router_numerics:hash_topk_triton"


@pytest.mark.parametrize("change", [
    {"detail": "renorm: logits [-20.0, -21.0]: weights [0.4, 0.6] (off by 0.1)"},  # a new failure of the same check
    {"row": "dsv4-pro-tp8"},
    {"name": "router_numerics:moe_fused_gate"},
], ids=["other-failure", "other-row", "other-check"])
def test_an_entry_hides_nothing_but_the_failure_it_was_recorded_with(change):
    entries = gate.load_known(str(PACKAGED))
    c = _failed(**change)
    assert gate.known_entry(c, "0.5.23", entries) is None
    assert gate.known_entry(_failed(), "0.5.24", entries) is None  # a release it was not recorded in
    assert gate.known_entry(Check("router_numerics:hash_topk_triton", "release", True, "x", SIG), "0.5.23", entries) is None


@pytest.mark.parametrize("doc, words", [
    ("{not json", "--known-defects"),
    ({"schema": "aiter-known-defects", "version": 1, "entries": []}, "not an sglang-known-defects version 1 registry"),
    ({"schema": "sglang-known-defects", "version": 1, "entries": [{"check": "router_numerics:*", "row": "release",
                                                                   "sglang": ["0.5.23"], "report": "r"}]}, "entry 0"),
    ({"schema": "sglang-known-defects", "version": 1, "entries": [{"check": "x", "row": "release", "sglang": ["0.5.23"],
                                                                   "signature": "nan", "report": "r"}]}, "20+ characters"),
], ids=["not-json", "other-schema", "no-signature", "short-signature"])
def test_a_malformed_registry_is_exit_2_naming_the_file(tmp_path, doc, words):
    f = tmp_path / "known.json"
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(GateCannotRun, match="--known-defects") as e:
        gate.load_known(str(f))
    assert words in str(e.value) and str(f) in str(e.value)


def _drive(router_numerics):
    """A recorded drive with no rows: only the record's per-release router numerics to judge."""
    from types import SimpleNamespace

    rec = {"sglang_version": "0.5.23", "rows": [], "mode": "cpu", "router_numerics": router_numerics}
    return SimpleNamespace(record=rec, source=SimpleNamespace(version="0.5.23"), rows=[], aiter_src=None,
                           inputs={}, tensors={}, mutant=None)


def test_the_judge_reads_the_records_router_numerics():
    """A router that raised in the child is a FAIL row of its own; numerics the child could not run
    are exit 2 unless the caller leaves them out (the sglang tier, which then skips them)."""
    checks, why = gate.judge(_drive({"moe_fused_gate": {"error": "RuntimeError: boom"}}))
    assert why is None
    assert [(c.name, c.row, c.ok, c.detail) for c in checks] == [
        ("router_numerics:moe_fused_gate", "release", False, "RuntimeError: boom")]
    checks, why = gate.judge(_drive({"not_judged": "triton 3.6.0 is too old"}))
    assert checks == [] and why == "sglang 0.5.23: router numerics: triton 3.6.0 is too old"
    assert gate.judge(_drive({"not_judged": "triton 3.6.0 is too old"}), require_router=False) == ([], None)
