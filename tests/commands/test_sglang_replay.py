"""``fp4moe-gate sglang-replay`` on a results fixture (``--from-results``: no network, no clone, no
child): the table it prints and writes between the markers, its exit code per kind of cell, and
the cannot-run lines for a replay it could not make."""

from __future__ import annotations

import json
import shutil

import pytest

from fp4moe.commands import sglang_replay
from fp4moe.infra.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "fixtures" / "sglang-replay" / "results.json"
BOTH = ["--aiter", "current=e4048607a5", "--aiter", "pre-4130=a360328e73"]


def _replay(gate, *argv, results=FIXTURE):
    return gate("sglang-replay", "--from-results", "--results", results, *argv, inputs=[results])


def test_the_table_has_one_row_per_release_and_one_column_per_aiter(gate, tmp_path):
    r = _replay(gate, *BOTH, "--json", tmp_path / "replay.json")
    assert r.rc == 1, r.err  # 0.5.16 fails: the replay measured it
    rows = [ln for ln in r.out.splitlines() if ln.startswith("| 0.")]
    assert [ln.split(" | ")[0] for ln in rows] == ["| 0.5.11", "| 0.5.16", "| 0.5.23"], r.out
    assert r.out.splitlines()[0] == "| SGLang | aiter current (e4048607a5) | aiter pre-4130 (a360328e73) |"
    cells = {ln.split(" | ")[0][2:]: ln.split(" | ")[1:] for ln in rows}
    # a cannot-run record and a bare stderr line give the same cell text
    assert cells["0.5.11"][0] == cells["0.5.11"][1].rstrip(" |") == (
        "cannot run (exit 2): sglang/srt/layers/quantization/fp8.py has no DeepSeek-V4 FP4 aiter branch")
    assert cells["0.5.16"][0] == ("**FAIL** (exit 1): pro-tp8: processed_bytes (padded to 512); pro-tp8: pad_contract "
                                  "(384->512, told 0); pro-tp8: footprint (1.325x budget)")
    assert cells["0.5.23"][0] == "**PASS** (exit 0)"
    rec = json.loads((tmp_path / "replay.json").read_text())
    assert rec["gate"] == "sglang-replay" and rec["status"] == "regression" and len(rec["cells"]) == 6
    assert rec["table"] == "\n".join(ln for ln in r.out.splitlines() if ln.startswith("|"))


def test_every_cell_passing_or_refused_with_its_line_exits_0(gate, tmp_path):
    cells = json.loads(FIXTURE.read_text())
    kept = tmp_path / "results.json"
    kept.write_text(json.dumps({k: v for k, v in cells.items() if not k.startswith("0.5.16")}))
    assert _replay(gate, *BOTH, results=kept).rc == 0


@pytest.mark.parametrize("cell, says", [
    ({"version": "0.5.23", "rc": None, "seconds": 600.0, "message": "timed out"}, "no verdict"),
    ({"version": "0.5.23", "rc": 2, "seconds": 1.0}, "no verdict"),
    ({"version": "0.5.23", "rc": -9, "seconds": 1.0, "message": "killed"}, "no verdict"),
], ids=["timed-out", "exit-2-without-a-line", "killed"])
def test_a_cell_without_a_verdict_is_exit_2(gate, tmp_path, cell, says):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"0.5.23|current": cell}))
    r = _replay(gate, "--aiter", "current=e4048607a5", "--json", tmp_path / "r.json", results=results)
    assert r.rc == 2 and "cannot run (exit" in r.out, (r.rc, r.out)
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "cannot-run"


def test_write_doc_replaces_only_the_table_between_the_markers(gate, tmp_path):
    doc = tmp_path / "sglang-replay.md"
    shutil.copy(REPO_ROOT / "docs" / "evidence" / "sglang-replay.md", doc)
    before = doc.read_text()
    r = gate("sglang-replay", "--from-results", "--results", FIXTURE, *BOTH, "--write-doc", doc, inputs=[FIXTURE])
    assert r.rc == 1, r.err
    after = doc.read_text()
    b, e = sglang_replay.BEGIN, sglang_replay.END
    assert after.split(b)[0] == before.split(b)[0] and after.split(e)[1] == before.split(e)[1]
    assert after.split(b)[1].split(e)[0].strip() == "\n".join(ln for ln in r.out.splitlines() if ln.startswith("|"))


@pytest.mark.parametrize("argv, words", [
    (["--aiter", "current"], ["--aiter current", "NAME=REV"]),
    (["--aiter", "other=abc"], ["no cell for", "0.5.11|other"]),
], ids=["aiter-without-rev", "aiter-not-in-results"])
def test_options_the_replay_cannot_use_are_named(gate, argv, words):
    _replay(gate, *argv).cannot_run(*words)


def test_a_doc_without_markers_and_a_bad_results_file_are_named(gate, tmp_path):
    doc = tmp_path / "plain.md"
    doc.write_text("# no markers here\n")
    gate("sglang-replay", "--from-results", "--results", FIXTURE, *BOTH, "--write-doc", doc,
         inputs=[FIXTURE]).cannot_run(f"--write-doc {doc}", "sglang-replay:begin")
    assert doc.read_text() == "# no markers here\n"
    bad = tmp_path / "results.json"
    bad.write_text("[1, 2")
    _replay(gate, *BOTH, results=bad).cannot_run(f"--results {bad}", "not a results file")


def test_replaying_without_a_clone_is_refused_before_any_download(gate):
    gate("sglang-replay", "--aiter", "current=e4048607a5", "--version", "0.5.23").cannot_run("--aiter-git")
