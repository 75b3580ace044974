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

pytest.importorskip("tomllib", reason="ci/mutation.py reads its triage file with tomllib (Python >= 3.11)")
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
                                            "fp4moe/stats/report.py", "fp4moe/stats/family.py", "fp4moe/stats/history.py"}
    assert {x.path.rsplit("/", 1)[1] for x in u["reference"]} == set(mutation.REFERENCE_CPU)
    # a new module of reference/ is measured or named GPU-bound here: never left out silently
    gpu_bound = {"grouped_moe.py", "grouped_moe_kernels.py"}
    with_code = {p.name for p in (REPO_ROOT / "fp4moe" / "reference").glob("*.py") if "def " in p.read_text()}
    assert with_code == set(mutation.REFERENCE_CPU) | gpu_bound, sorted(with_code ^ (set(mutation.REFERENCE_CPU) | gpu_bound))
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
    assert "ci/mutation.py --stale" in block and "--ratchet" in block and "--budget" in block
    # a fresh clone of main has origin/main == HEAD: a scope by git refs would find nothing there
    assert "origin/main" not in block.split("\n#", 1)[0] and "--changed-since" not in block
    # its status is kept (the later steps still run) and decides the exit when the last step passes
    assert "|| MUTATION_RC=$?" in block
    tail = text.split("# ---- end mutation ratchet ----", 1)[1]
    assert 'rc=$MUTATION_RC' in tail and tail.index('rc=$MUTATION_RC') < tail.index('exit "$rc"')


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
    # a file without a record is held to the floor; --record then starts its own ratchet
    assert mutation.fell("f.py", _score(mutation.FLOOR), None) is None
    assert "score 0.1000 < the floor 0.9000" in mutation.fell("f.py", _score(0.1), None)


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


# ---- the ratchet's scope: records whose content moved (on a temporary tree) ----

def _tree(tmp_path, monkeypatch):
    """A measured tree of two mx files and one verdict function, with a fresh score file."""
    for rel, text in {"fp4moe/mx/a.py": "def f(x):\n    return x + 1\n",
                      "fp4moe/mx/b.py": "def g(x):\n    return x * 2\n",
                      "fp4moe/gates/v.py": "def judge(x):\n    return x > 0\n\ndef other():\n    return 3\n",
                      "fp4moe/stats/k.py": "K = 1\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nonly_mutate = ["fp4moe/mx/*", "fp4moe/gates/*"]\n')
    (tmp_path / "ci").mkdir()
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    monkeypatch.setattr(mutation, "SCORES", tmp_path / "ci" / "mutation-scores.json")
    monkeypatch.setattr(mutation, "MUTANTS", tmp_path / "mutants")
    monkeypatch.setattr(mutation, "RUN_LOG", tmp_path / "mutants" / "mutation-run.log")
    monkeypatch.setattr(mutation, "TRIAGE", tmp_path / "ci" / "none.toml")
    monkeypatch.setattr(mutation, "REFERENCE_CPU", ())
    monkeypatch.setattr(mutation, "VERDICT_FUNCTIONS", {"fp4moe/gates/v.py": ("x_judge",)})
    files = {}
    for u in mutation.select(["all"], None):
        files[u.path] = {**json.loads(json.dumps(vars(_score(0.95)))), "scope": u.scope,
                         "functions": list(u.functions), "sha256": mutation.source_sha256(u)}
    (tmp_path / "ci" / "mutation-scores.json").write_text(json.dumps({"schema": 1, "files": files}))
    return tmp_path


def _fake_mutmut(monkeypatch, kills_of):
    """mutmut replaced by its results: ``kills_of[path]`` = (killed, survived); the runs are logged."""
    runs = []

    def run(chosen, max_children, budget_s, names=None, tests=None):
        runs.append(sorted(u.path for u in chosen))
        return 2.0

    def results(unit):
        k, s = kills_of[unit.path]
        return {f"{unit.module}.x_f__mutmut_{i}": 1 if i <= k else 0 for i in range(1, k + s + 1)}

    monkeypatch.setattr(mutation, "run_mutmut", run)
    monkeypatch.setattr(mutation, "results_of", results)
    return runs


def test_fresh_records_cost_nothing(tmp_path, monkeypatch, capsys):
    _tree(tmp_path, monkeypatch)
    runs = _fake_mutmut(monkeypatch, {})
    assert mutation.main(["--stale", "--ratchet"]) == 0
    assert runs == []
    assert capsys.readouterr().out.endswith("recorded score is fresh (sha256): nothing to do\n")


def test_a_content_change_makes_exactly_that_file_stale_and_it_is_held_to_its_record(tmp_path, monkeypatch, capsys):
    root = _tree(tmp_path, monkeypatch)
    (root / "fp4moe/mx/b.py").write_text("def g(x):\n    return x * 3\n")  # one byte
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/b.py": (19, 1)})  # 0.95: at its record
    assert mutation.main(["--stale", "--ratchet"]) == 0
    assert runs == [["fp4moe/mx/b.py"]]
    assert "mutation: stale: fp4moe/mx/b.py: its content differs from the measured one" in capsys.readouterr().out
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/b.py": (18, 2)})  # 0.90 < 0.95
    assert mutation.main(["--stale", "--ratchet"]) == 1
    assert "fell: fp4moe/mx/b.py: score 0.9000 < recorded 0.9500" in capsys.readouterr().err
    # the verdict file: a change outside the measured function leaves its record fresh (mutmut's
    # mutants of judge are the same); a change inside it, or a decorator on it, does not
    (root / "fp4moe/mx/b.py").write_text("def g(x):\n    return x * 2\n")  # back: fresh again
    v = root / "fp4moe/gates/v.py"
    v.write_text(v.read_text().replace("3", "4"))
    runs = _fake_mutmut(monkeypatch, {"fp4moe/gates/v.py": (5, 0)})
    assert mutation.main(["--stale", "--ratchet"]) == 0 and runs == []
    for edit in ("x >= 0", "x > 0  # a comment"):
        v.write_text(v.read_text().replace("x > 0", edit))
        assert mutation.main(["--stale", "--ratchet"]) == 0 and runs[-1] == ["fp4moe/gates/v.py"]
        assert "stale: fp4moe/gates/v.py: its measured functions' source differs" in capsys.readouterr().out
        v.write_text(v.read_text().replace(edit, "x > 0"))
    v.write_text("import functools\n\n@functools.cache\n" + v.read_text())
    assert mutation.main(["--stale", "--ratchet"]) == 0 and len(runs) == 3


def test_a_verdict_records_hash_is_its_functions_source_and_a_lost_function_is_stale(tmp_path, monkeypatch):
    root = _tree(tmp_path, monkeypatch)
    unit = mutation.Unit("fp4moe/gates/v.py", "verdict", ("x_judge",))
    h = mutation.source_sha256(unit)
    assert h not in ("", mutation.file_sha256(unit.path))
    assert mutation.staleness(unit, {"functions": ["x_judge"], "sha256": mutation.file_sha256(unit.path)}) is None  # older records
    (root / unit.path).write_text("class C:\n    def judge(self, x):\n        return x > 0\n")
    assert mutation.source_sha256(unit) == ""  # a method of that name is another function
    assert mutation.staleness(unit, {"functions": ["x_judge"], "sha256": h}) == "its measured functions' source differs"
    method = mutation.Unit(unit.path, "verdict", ("x\u01c1C\u01c1judge",))
    assert mutation.source_sha256(method) not in ("", h)


def test_records_without_a_hash_with_other_functions_or_none_are_stale(tmp_path, monkeypatch):
    root = _tree(tmp_path, monkeypatch)
    book = mutation.recorded()
    units = {u.path: u for u in mutation.select(["all"], None)}
    assert mutation.stale_units(list(units.values()), book) == []
    book["files"]["fp4moe/mx/a.py"]["sha256"] = ""
    book["files"]["fp4moe/gates/v.py"]["functions"] = ["x_judge", "x_other"]
    book["files"]["fp4moe/mx/b.py"]["tests"] = "tests/mx"  # a lower bound: still the bar while the content holds
    assert dict((u.path, why) for u, why in mutation.stale_units(list(units.values()), book)) == {
        "fp4moe/mx/a.py": "no recorded sha256", "fp4moe/gates/v.py": "its measured functions changed"}
    del book["files"]["fp4moe/mx/a.py"]
    assert mutation.staleness(units["fp4moe/mx/a.py"], None) == "no recorded score"
    assert (root / "fp4moe/stats/k.py").is_file() and "fp4moe/stats/k.py" not in units  # no function, no mutant


def test_a_file_without_a_record_is_held_to_the_floor(tmp_path, monkeypatch, capsys):
    root = _tree(tmp_path, monkeypatch)
    (root / "fp4moe/mx/c.py").write_text("def h(x):\n    return -x\n")
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/c.py": (9, 1)})  # exactly 0.90
    assert mutation.main(["--stale", "--list"]) == 0 and runs == []  # what CI would measure, and why
    assert capsys.readouterr().out == "mutation: stale: fp4moe/mx/c.py: no recorded score\nfp4moe/mx/c.py\n"
    assert mutation.main(["--stale", "--ratchet"]) == 0
    assert "stale: fp4moe/mx/c.py: no recorded score" in capsys.readouterr().out
    _fake_mutmut(monkeypatch, {"fp4moe/mx/c.py": (89, 11)})  # 0.89
    assert mutation.main(["--stale", "--ratchet"]) == 1
    assert "fp4moe/mx/c.py: score 0.8900 < the floor 0.9000" in capsys.readouterr().err
    assert mutation.fell("c.py", _score(math.nextafter(mutation.FLOOR, 0)), None) is not None


def test_the_refresh_records_hashes_and_leaves_nothing_stale(tmp_path, monkeypatch, capsys):
    root = _tree(tmp_path, monkeypatch)
    (root / "fp4moe/mx/a.py").write_text("def f(x):\n    return x - 1\n")
    monkeypatch.setattr(mutation, "_mutmut_version", lambda: "3.8.1")
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/a.py": (20, 0)})
    assert mutation.main(["--stale", "--record"]) == 0 and runs == [["fp4moe/mx/a.py"]]
    entry = mutation.recorded()["files"]["fp4moe/mx/a.py"]
    assert entry["sha256"] == mutation.file_sha256("fp4moe/mx/a.py") and entry["score"] == 1.0
    assert mutation.main(["--stale", "--ratchet"]) == 0 and runs == [["fp4moe/mx/a.py"]]  # no second run
    assert capsys.readouterr().out.endswith("nothing to do\n")


def test_a_spent_budget_cannot_judge_and_names_the_option(tmp_path, monkeypatch, capsys):
    import subprocess

    root = _tree(tmp_path, monkeypatch)
    (root / "fp4moe/mx/a.py").write_text("def f(x):\n    return x - 1\n")
    before = (root / "ci" / "mutation-scores.json").read_bytes()

    def spent(cmd, env, log, budget_s):
        raise subprocess.TimeoutExpired(cmd, budget_s)

    monkeypatch.setattr(mutation, "run_in_group", spent)
    assert mutation.main(["--stale", "--ratchet", "--record", "--budget", "7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the budget of 7 s (--budget) ran out before 1 file(s) were judged" in err
    assert (root / "ci" / "mutation-scores.json").read_bytes() == before
    assert mutation.main(["--stale", "--changed-since", "main"]) == 2
    assert "--stale and --changed-since are two scopes" in capsys.readouterr().err


def test_mutmut_mutates_exactly_the_measured_files():
    import fnmatch

    import tomllib

    only = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    measured = {u.path for u in mutation.select(["all"], None)}
    mutated = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "fp4moe").rglob("*.py")
               if any(fnmatch.fnmatch(p.relative_to(REPO_ROOT).as_posix(), pat) for pat in only)}
    mutated = {p for p in mutated if "def " in (REPO_ROOT / p).read_text()}  # a module of constants has no mutant
    assert mutated == measured, f"mutated, not measured: {sorted(mutated - measured)}; " \
                                f"measured, not mutated: {sorted(measured - mutated)}"


def test_every_tracked_entry_at_the_root_reaches_mutmuts_copy():
    """mutmut runs the suite in ``mutants/``, a copy holding its source paths, ``tests/``,
    ``pyproject.toml`` and ``also_copy``; a file the suite reads that is left out (the slow
    tier's ``.test_durations``) fails a test there, and mutmut's coverage pass stops on it."""
    import subprocess

    import tomllib

    if not (REPO_ROOT / ".git").exists():
        pytest.skip(f"{REPO_ROOT}: not a git checkout (mutmut's own copy, or an installed package)")
    listing = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z"], capture_output=True, check=True)
    tracked = {p.split("/", 1)[0] for p in listing.stdout.decode().split("\0") if p}
    cfg = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    copied = {p.rstrip("/") for p in [*cfg["source_paths"], *cfg["also_copy"], "tests", "pyproject.toml"]}
    assert tracked and tracked <= copied, f"tracked at the root, not copied into mutants/: {sorted(tracked - copied)}"


_SCRATCH_TESTS = '''
import os


def test_stats_mode_is_the_process_alone():
    assert os.environ.get("MUTANT_UNDER_TEST") != "stats"


def test_reads_a_missing_file():
    raise FileNotFoundError("no such file: .test_durations")
'''


@pytest.mark.slow
@pytest.mark.parametrize("mode, named", [("stats", True), ("", True),
                                         ("fp4moe.infra.errors.x_exit_code_of__mutmut_1", False)])
def test_the_plugin_names_a_failing_test_of_a_run_that_must_pass(tmp_path, mode, named):
    """ci/mutation_pytest.py in a pytest child started from a scratch folder (as mutmut's
    fork-server child runs, its output dropped): in the coverage pass (``stats``) and the clean
    run (no mutant) a failing test is written to ``$FP4MOE_MUTATION_FAILURES`` with its cause;
    a mutant's run, which fails by design, writes nothing. In the coverage pass the mode is the
    test process's alone (its children run unmutated code)."""
    import os
    import subprocess

    pytest.importorskip("mutmut", reason="the plugin runs inside mutmut (the `mutation` extra)")
    (tmp_path / "test_scratch.py").write_text(_SCRATCH_TESTS)
    failures = tmp_path / "failures.log"
    env = {**os.environ, "MUTANT_UNDER_TEST": mode, "FP4MOE_MUTATION_FAILURES": str(failures),
           "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "ci.mutation_pytest",
                        "test_scratch.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    if not named:
        assert not failures.exists()
        return
    lines = failures.read_text().splitlines()
    assert lines == ["test_scratch.py::test_reads_a_missing_file (call): "
                     "FileNotFoundError: no such file: .test_durations"], lines


def _gone(pid: int) -> bool:
    """``pid`` ended (or is a zombie) within 5 s: SIGKILL is delivered at once, reaping may take a moment."""
    import os
    import time

    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_spent_budget_kills_the_whole_process_group(tmp_path):
    """mutmut forks a server and workers; the budget ends all of them, not only its first process."""
    import os
    import subprocess

    pidfile = tmp_path / "grandchild.pid"
    with open(tmp_path / "log", "w") as log, pytest.raises(subprocess.TimeoutExpired):
        mutation.run_in_group(["sh", "-c", f"sleep 60 & echo $! > '{pidfile}'; wait"], dict(os.environ), log, 1.0)
    assert _gone(int(pidfile.read_text())), "the grandchild outlived the budget"


def test_a_sigterm_to_the_runner_kills_the_whole_process_group(tmp_path):
    """A cancelled CI job (SIGTERM to ci/mutation.py) leaves no mutmut running: the runner kills
    the group it started, then ends with 128 + SIGTERM."""
    import signal
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "grandchild.pid"
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import mutation; "
            f"mutation.run_in_group(['sh', '-c', \"sleep 60 & echo $! > '{pidfile}'; wait\"], dict(os.environ), "
            "open(os.devnull, 'w'), 60.0)")
    runner = subprocess.Popen([sys.executable, "-c", code, str(mutation.REPO / "ci")], cwd=tmp_path)
    for _ in range(100):
        if pidfile.is_file() and pidfile.read_text().strip():
            break
        time.sleep(0.1)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    assert _gone(int(pidfile.read_text())), "the grandchild outlived the runner"


def test_a_ratchet_re_measure_runs_with_the_tests_its_records_were_judged_with(tmp_path, monkeypatch, capsys):
    """The union of the stale records' ``--tests`` lists (a superset of each record's tests: a
    score under the record is a real fall); any record of the default suite, or none: the default suite."""
    root = _tree(tmp_path, monkeypatch)
    book = json.loads((root / "ci" / "mutation-scores.json").read_text())
    book["files"]["fp4moe/mx/a.py"]["tests"] = "tests/mx,tests/stats"
    book["files"]["fp4moe/mx/b.py"]["tests"] = "tests/model,tests/mx"
    (root / "ci" / "mutation-scores.json").write_text(json.dumps(book))
    seen = []
    monkeypatch.setattr(mutation, "run_mutmut", lambda chosen, mc, b, names=None, tests=None: seen.append(tests) or 1.0)
    monkeypatch.setattr(mutation, "results_of", lambda unit: {f"{unit.module}.x_f__mutmut_1": 1})
    for rel in ("fp4moe/mx/a.py", "fp4moe/mx/b.py"):
        (root / rel).write_text((root / rel).read_text() + "\n")
    assert mutation.main(["--stale", "--ratchet"]) == 0
    assert seen == [["tests/model", "tests/mx", "tests/stats"]]
    assert "judged with the test paths their records were judged with: tests/model,tests/mx,tests/stats" in capsys.readouterr().out
    (root / "fp4moe/gates/v.py").write_text((root / "fp4moe/gates/v.py").read_text().replace("x > 0", "x > 1"))
    assert mutation.main(["--stale", "--ratchet"]) == 0 and seen[-1] is None  # v.py's record: the default suite
    assert mutation.main(["--stale", "--ratchet", "--tests", "tests/x"]) == 0 and seen[-1] == ["tests/x"]  # told: as told


def test_recorded_only_re_measures_the_recorded_and_owes_the_never_measured(tmp_path, monkeypatch, capsys):
    """CI's step: a stale file with a record is re-measured and held to it; a file never measured
    is named as owed (exit 2: not judged), never run against the whole suite in CI's budget."""
    root = _tree(tmp_path, monkeypatch)
    (root / "fp4moe/mx/c.py").write_text("def h(x):\n    return -x\n")  # no record
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/c.py": (10, 0)})
    assert mutation.main(["--stale", "--ratchet", "--recorded-only"]) == 2 and runs == []
    assert capsys.readouterr().err == ("mutation: cannot judge: 1 file(s) without a record, owed to the full run "
                                       "(--recorded-only): fp4moe/mx/c.py\n")
    (root / "fp4moe/mx/b.py").write_text("def g(x):\n    return x * 3\n")  # recorded, stale
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/b.py": (19, 1)})
    assert mutation.main(["--stale", "--ratchet", "--recorded-only"]) == 2 and runs == [["fp4moe/mx/b.py"]]
    assert "owed to the full run (--recorded-only): fp4moe/mx/c.py" in capsys.readouterr().err
    runs = _fake_mutmut(monkeypatch, {"fp4moe/mx/b.py": (18, 2)})  # 0.90 < its 0.95: the fall decides
    assert mutation.main(["--stale", "--ratchet", "--recorded-only"]) == 1
    assert mutation.main(["--ratchet", "--recorded-only"]) == 2
    assert "--recorded-only narrows --stale" in capsys.readouterr().err
