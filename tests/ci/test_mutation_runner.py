"""ci/mutation.py, the mutation run's driver: what it measures still exists, every measured file
sits in exactly one shard of the scheduled workflow, the score and the ratchet at their
boundaries, the merge of shards, and the CI step (one delimited block of .ci/run). mutmut itself
is not run here (that is the ratchet step's job)."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import shlex
import sys

import pytest

from fp4moe.infra.paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location("ci_mutation", REPO_ROOT / "ci" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("ci_mutation", mutation)  # dataclasses look their module up by name
_spec.loader.exec_module(mutation)


def _mangled_functions(path) -> set[str]:
    tree = ast.parse((REPO_ROOT / path).read_text())
    names = {f"x_{n.name}" for n in tree.body if isinstance(n, ast.FunctionDef)}
    for c in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"x\u01c1{c.name}\u01c1{m.name}" for m in c.body if isinstance(m, ast.FunctionDef)}
    return names


def test_every_verdict_function_named_exists():
    for path, functions in mutation.VERDICT_FUNCTIONS.items():
        missing = set(functions) - _mangled_functions(path)
        assert not missing, f"{path}: {sorted(missing)} renamed or gone: the verdict scope would shrink silently"


def test_scopes_cover_the_floors():
    u = mutation.units()
    assert {x.path for x in u["mx"]} == {"fp4moe/mx/e8m0.py", "fp4moe/mx/block_scale.py", "fp4moe/mx/mxfp4.py",
                                         "fp4moe/mx/mxfp8.py"}
    assert {x.path for x in u["stats"]} == {"fp4moe/stats/compare.py", "fp4moe/stats/sequential.py",
                                            "fp4moe/stats/report.py"}
    assert {x.path.rsplit("/", 1)[1] for x in u["reference"]} == set(mutation.REFERENCE_CPU)
    for x in (y for ys in u.values() for y in ys):
        assert (REPO_ROOT / x.path).is_file(), x.path


def test_unit_patterns_own_exactly_their_functions():
    whole = mutation.Unit("fp4moe/mx/e8m0.py", "mx")
    assert whole.owns("fp4moe.mx.e8m0.x_decode__mutmut_3") and not whole.owns("fp4moe.mx.mxfp4.x_decode__mutmut_3")
    some = mutation.Unit("fp4moe/gates/serve_bench.py", "verdict", ("x_judge",))
    assert some.owns("fp4moe.gates.serve_bench.x_judge__mutmut_12")
    assert not some.owns("fp4moe.gates.serve_bench.x_judge_row__mutmut_1")
    assert not some.owns("fp4moe.gates.serve_bench.x_prompts_needed__mutmut_1")


def test_every_measured_file_is_in_exactly_one_shard_of_the_workflow():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((REPO_ROOT / "ci" / "workflows" / "mutation.yml").read_text())
    rows = wf["jobs"]["shard"]["strategy"]["matrix"]["include"]
    seen: dict[str, str] = {}
    for row in rows:
        for u in mutation.select(shlex.split(row["targets"]), None):
            assert u.path not in seen, f"{u.path} in shards {seen[u.path]} and {row['shard']}"
            seen[u.path] = row["shard"]
    assert set(seen) == {u.path for u in mutation.select(["all"], None)}
    triggers = wf[True] if True in wf else wf["on"]
    assert "schedule" in triggers


def test_the_ci_step_is_one_delimited_block_running_the_ratchet():
    text = (REPO_ROOT / ".ci" / "run").read_text()
    assert text.count("# ---- mutation ratchet") == 1 and text.count("# ---- end mutation ratchet ----") == 1
    block = text.split("# ---- mutation ratchet", 1)[1].split("# ---- end mutation ratchet ----", 1)[0]
    assert "ci/mutation.py --changed-since" in block and "--ratchet" in block and "--budget" in block
    assert "nothing to do" in block and "origin/main" in block and "HEAD~1" in block


def _codes(**groups):
    out, i = {}, 0
    for code, n in groups.items():
        for _ in range(n):
            i += 1
            out[f"fp4moe.mx.e8m0.x_decode__mutmut_{i}"] = {"k": 1, "s": 0, "t": 36, "n": 33, "y": 34}[code]
    return out


def test_score_counts_each_outcome():
    u = mutation.Unit("fp4moe/mx/e8m0.py", "mx")
    codes = _codes(k=17, s=2, t=1, n=1, y=1)
    eq = next(k for k, v in codes.items() if v == 0)
    s = mutation.score_of(u, codes, {eq: {"verdict": "equivalent", "why": "x"}}, 3.0)
    assert (s.mutants, s.killed, s.survived, s.timeout, s.no_tests, s.skipped, s.other) == (22, 17, 2, 1, 1, 1, 0)
    assert (s.equivalent, s.accepted) == (1, 0)
    assert s.score == round(18 / 20, 4)  # the equivalent one and the skipped one leave the denominator
    assert mutation.untriaged(u, codes, {eq: {}}) == sorted(k for k, v in codes.items() if v in (0, 33) and k != eq)
    with pytest.raises(mutation.CannotJudge, match="1 mutant\\(s\\) not judged"):
        mutation.score_of(u, {**codes, "fp4moe.mx.e8m0.x_decode__mutmut_99": None}, {}, 1.0)


def _score(value):
    return mutation.FileScore("mx", [], 10, 9, 1, 0, 0, 0, 0, 0, 0, value, 1.0)


def test_ratchet_holds_at_the_recorded_value_and_falls_one_ulp_below():
    rec = {"score": 0.95}
    assert mutation.fell("f.py", _score(0.95), rec) is None
    assert mutation.fell("f.py", _score(1.0), rec) is None
    assert "score 0.9500 < recorded 0.9500" in mutation.fell("f.py", _score(math.nextafter(0.95, 0)), rec)
    # a file without a record has nothing to fall from: its score is printed, --record starts its ratchet
    assert mutation.fell("f.py", _score(0.1), None) is None


def test_nothing_to_do_when_no_measured_file_changed(monkeypatch, capsys):
    monkeypatch.setattr(mutation, "changed_files", lambda ref: {"README.md", "tests/mx/test_e8m0.py"})
    monkeypatch.setattr(mutation, "run_mutmut", lambda *a: pytest.fail("mutmut must not run"))
    assert mutation.main(["--changed-since", "origin/main", "--ratchet"]) == 0
    assert capsys.readouterr().out == "mutation: no measured file differs from origin/main: nothing to do\n"
    monkeypatch.setattr(mutation, "changed_files", lambda ref: {"fp4moe/mx/e8m0.py", "fp4moe/gates/footprint.py"})
    assert [u.path for u in mutation.select(["all"], "origin/main")] == ["fp4moe/mx/e8m0.py", "fp4moe/gates/footprint.py"]


def test_bad_target_and_bad_triage_cannot_judge(tmp_path, monkeypatch, capsys):
    assert mutation.main(["fp4moe/nope.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mutation: cannot judge: fp4moe/nope.py: not a scope") and err.count("\n") == 1
    bad = tmp_path / "triage.toml"
    bad.write_text('[mutant."fp4moe.mx.e8m0.x_decode__mutmut_1"]\nverdict = "fine"\nwhy = "x"\n')
    monkeypatch.setattr(mutation, "TRIAGE", bad)
    with pytest.raises(mutation.CannotJudge, match="needs verdict = equivalent|accepted"):
        mutation.load_triage()


def test_the_committed_triage_file_is_well_formed():
    rows = mutation.load_triage()
    assert all(r["verdict"] in ("equivalent", "accepted") and len(r["why"]) > 20 for r in rows.values())


def test_merge_keeps_the_newest_entry_per_file_and_writes_atomically(tmp_path, monkeypatch):
    book = tmp_path / "scores.json"
    old = {"score": 0.5, "measured": "2026-01-01T00:00:00Z"}
    new = {"score": 0.9, "measured": "2026-02-01T00:00:00Z"}
    book.write_text(json.dumps({"schema": 1, "files": {"a.py": old, "b.py": old}}))
    shard = tmp_path / "shard.json"
    shard.write_text(json.dumps({"schema": 1, "files": {"a.py": new, "b.py": old, "c.py": new}}))
    monkeypatch.setattr(mutation, "SCORES", book)
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    assert mutation.main(["--merge", str(shard)]) == 0
    got = json.loads(book.read_text())["files"]
    assert got == {"a.py": new, "b.py": old, "c.py": new}
    (tmp_path / "bad.json").write_text('{"schema": 1, "files": {"a.py": {"score": "high"}}}')
    before = book.read_bytes()
    assert mutation.main(["--merge", str(tmp_path / "bad.json")]) == 2
    assert book.read_bytes() == before


def test_the_committed_scores_are_a_score_file_whose_counts_add_up():
    book = mutation.recorded()
    measured = {u.path for u in mutation.select(["all"], None)}
    assert book["files"] and set(book["files"]) <= measured
    for path, e in book["files"].items():
        parts = e["killed"] + e["survived"] + e["timeout"] + e["no_tests"] + e["skipped"] + e["other"]
        assert e["mutants"] == parts, path
        judged = e["mutants"] - e["equivalent"] - e["skipped"]
        assert e["score"] == round((e["killed"] + e["timeout"]) / judged, 4), path
