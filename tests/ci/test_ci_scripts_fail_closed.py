"""Every script CI calls keeps the gates' exit contract (issue #48 item 3): 0 held; 1 a measured
regression (a score fell, a test failed); 2 could not judge, with ONE stderr line naming the
file -- never a traceback, never 1 for an input that is not what it should be.

One table of malformed inputs per script: ``ci/mutation.py`` in-process (``main()`` on a tiny
tree, mutmut never run: ``--no-run`` scores what ``mutants/`` holds), the shell scripts with
stubs for python, docker and curl on ``PATH`` (milliseconds each). Each table also holds the
cases that must pass and the one that must fail, so that it can tell the three apart."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from fp4moe.infra.paths import REPO_ROOT

if "ci_mutation" in sys.modules:
    mutation = sys.modules["ci_mutation"]
else:
    _spec = importlib.util.spec_from_file_location("ci_mutation", REPO_ROOT / "ci" / "mutation.py")
    mutation = importlib.util.module_from_spec(_spec)
    sys.modules["ci_mutation"] = mutation  # dataclasses look their module up by name
    _spec.loader.exec_module(mutation)

UNIT = "fp4moe/mx/a.py"
KEY = "fp4moe.mx.a.x_f__mutmut_{}"


def _meta(killed: int, survived: int) -> dict:
    codes = {KEY.format(i): 1 if i <= killed else 0 for i in range(1, killed + survived + 1)}
    return {"exit_code_by_key": codes, "durations_by_key": {k: 0.0 for k in codes}}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A checkout of one measured file, its record (score 0.9) and mutmut's result (9 of 10 killed)."""
    (tmp_path / "fp4moe/mx").mkdir(parents=True)
    (tmp_path / UNIT).write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "ci").mkdir()
    (tmp_path / "mutants/fp4moe/mx").mkdir(parents=True)
    for name, value in (("REPO", tmp_path), ("SCORES", tmp_path / "ci/scores.json"),
                        ("MUTANTS", tmp_path / "mutants"), ("TRIAGE", tmp_path / "ci/triage.toml"),
                        ("REFERENCE_CPU", ()), ("VERDICT_FUNCTIONS", {})):
        monkeypatch.setattr(mutation, name, value)
    (tmp_path / "ci/scores.json").write_text(json.dumps(
        {"schema": 1, "files": {UNIT: {"score": 0.9, "measured": "2026-01-01T00:00:00Z", "sha256": "x"}}}))
    (tmp_path / "ci/triage.toml").write_text('[mutant."fp4moe.mx.a.x_f__mutmut_99"]\nverdict = "accepted"\nwhy = "w"\n')
    (tmp_path / "mutants" / (UNIT + ".meta")).write_text(json.dumps(_meta(9, 1)))
    return tmp_path


def _sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)  # a hole: no block is written, no byte allocated


def _fifo(path):
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _zero(path):
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def _write(text):
    return lambda p: p.write_text(text)


META, TRIAGE_F, SCORES_F = "mutants/fp4moe/mx/a.py.meta", "ci/triage.toml", "ci/scores.json"
#: (case, file, how it is spoiled, what the one line says after the file's name)
MUTATION_FAULTS = [
    ("meta not JSON", META, _write("{not json"), "not JSON"),
    ("meta not UTF-8", META, lambda p: p.write_bytes(b'{"\xff": 1}'), "not UTF-8"),
    ("meta without its key", META, _write('{"exit_codes": {}}'), "no exit_code_by_key"),
    ("meta a list", META, _write("[1, 2]"), "no exit_code_by_key"),
    ("meta codes a list", META, _write('{"exit_code_by_key": [1]}'), "no exit_code_by_key"),
    ("meta a code that is text", META, _write(json.dumps({"exit_code_by_key": {KEY.format(1): "1"}})), "not an integer"),
    ("meta a code that is true", META, _write(json.dumps({"exit_code_by_key": {KEY.format(1): True}})), "not an integer"),
    ("meta durations text", META, _write(json.dumps({**_meta(9, 1), "durations_by_key": {KEY.format(1): "3s"}})),
     "durations_by_key"),
    ("meta deeply nested", META, _write("[" * 200_000 + "]" * 200_000), "nested too deeply"),
    ("meta padded to 2 GiB", META, lambda p: _sparse(p, 2 << 30), "bytes, more than"),
    ("meta a FIFO", META, _fifo, "is a FIFO"),
    ("meta /dev/zero", META, _zero, "is a character device"),
    ("meta a folder", META, lambda p: (p.unlink(), p.mkdir()), "is a folder"),
    ("triage not TOML", TRIAGE_F, _write("[mutant\nverdict = "), "not TOML"),
    ("triage rows not tables", TRIAGE_F, _write("mutant = 3\n"), "[mutant.NAME] tables"),
    ("triage a FIFO", TRIAGE_F, _fifo, "is a FIFO"),
    ("triage deeply nested", TRIAGE_F, _write("x = " + "[" * 100_000 + "]" * 100_000 + "\n"), "nested too deeply"),
    ("scores not JSON", SCORES_F, _write("{"), "not JSON"),
    ("scores deeply nested", SCORES_F, _write('{"schema": 1, "files": ' + "[" * 200_000 + "]" * 200_000 + "}"),
     "nested too deeply"),
    ("scores a measured time that is a number", SCORES_F,
     _write(json.dumps({"schema": 1, "files": {UNIT: {"score": 0.9, "measured": 1767225600}}})), "measured is int"),
    ("scores a score that is text", SCORES_F, _write(json.dumps({"schema": 1, "files": {UNIT: {"score": "0.9"}}})),
     "no numeric score"),
    ("scores followed by 3 GiB of NULs", SCORES_F, lambda p: _sparse(p, 3 << 30), "bytes, more than"),
]


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


def test_mutation_controls_pass_and_fail(tree, capsys):
    """The table's two controls: the record held (exit 0), a score that fell (exit 1)."""
    assert mutation.main([UNIT, "--no-run", "--ratchet"]) == 0, capsys.readouterr().err
    (tree / META).write_text(json.dumps(_meta(8, 2)))
    assert mutation.main([UNIT, "--no-run", "--ratchet"]) == 1
    assert "fell: fp4moe/mx/a.py: score 0.8000 < recorded 0.9000" in capsys.readouterr().err


@pytest.mark.parametrize("case,rel,spoil,says", MUTATION_FAULTS, ids=[c[0] for c in MUTATION_FAULTS])
def test_mutation_malformed_input_cannot_judge_naming_the_file(tree, capsys, case, rel, spoil, says):
    spoil(tree / rel)
    before = None if rel == SCORES_F else (tree / SCORES_F).read_bytes()
    rc = mutation.main([UNIT, "--no-run", "--ratchet", "--record"])
    line = _one_line(capsys.readouterr().err)
    assert rc == 2, line
    assert line.startswith("mutation: cannot judge: ") and str(tree / rel) in line and says in line, line
    if before is not None:
        assert (tree / SCORES_F).read_bytes() == before  # nothing recorded from a run that could not judge


MERGE_FAULTS = [
    ("a shard with a number for a time", json.dumps({"schema": 1, "files": {"b.py": {"score": 1, "measured": 5}}}),
     "measured is int"),
    ("a shard not JSON", "{\x1b[2J exit 0", "not JSON"),
    ("a shard of the wrong schema", json.dumps({"schema": 2, "files": {}}), "not a schema-1 score file"),
    ("a shard deeply nested", "[" * 200_000 + "]" * 200_000, "nested too deeply"),
]


@pytest.mark.parametrize("case,text,says", MERGE_FAULTS, ids=[c[0] for c in MERGE_FAULTS])
def test_mutation_merge_of_a_malformed_shard_cannot_judge(tree, capsys, case, text, says):
    shard = tree / "shard.json"
    shard.write_text(text)
    before = (tree / SCORES_F).read_bytes()
    assert mutation.main(["--merge", str(shard)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(shard) in line and says in line and "\x1b" not in line, line
    assert (tree / SCORES_F).read_bytes() == before


def test_mutation_a_missing_shard_and_an_unwritable_record_cannot_judge(tree, capsys, monkeypatch):
    assert mutation.main(["--merge", str(tree / "nope.json")]) == 2
    assert "nope.json: no such score file" in _one_line(capsys.readouterr().err)
    good = tree / "good.json"
    good.write_text(json.dumps({"schema": 1, "files": {}}))
    monkeypatch.setattr(mutation, "SCORES", tree / SCORES_F / "inner.json")  # its folder is a file
    assert mutation.main(["--merge", str(good)]) == 2
    assert str(tree / SCORES_F / "inner.json") in _one_line(capsys.readouterr().err)


def test_mutation_an_unforeseen_error_is_exit_2_not_1(tree, capsys, monkeypatch):
    monkeypatch.setattr(mutation, "score_of", lambda *a: {}["boom"])
    assert mutation.main([UNIT, "--no-run", "--ratchet"]) == 2
    assert _one_line(capsys.readouterr().err).startswith("mutation: cannot judge: internal error: KeyError")


def test_mutation_logs_are_read_by_their_tail_and_quoted(tree, monkeypatch):
    """mutmut's log and the failures file come from code under test: only their last bytes are
    read, and what reaches the one line is quoted with control characters escaped."""
    monkeypatch.setattr(mutation, "RUN_LOG", tree / "mutants/run.log")
    monkeypatch.setattr(mutation, "FAILURES_LOG", tree / "mutants/failures.log")
    def mutmut(*a):  # a failed test's line after 1 GiB of NULs (a sparse file: nothing allocated)
        _sparse(tree / "mutants/failures.log", 1 << 30)
        with open(tree / "mutants/failures.log", "ab") as f:
            f.write(b"\ntests/x.py::t (call): \x1b[2J\rmutation: every file held, exit 0\n")
        return 1

    mutmut()
    assert mutation._failed_tests() == ["tests/x.py::t (call): \x1b[2J\rmutation: every file held, exit 0"]
    monkeypatch.setattr(mutation, "run_in_group", mutmut)
    monkeypatch.setattr(mutation, "refresh_unmutated_copies", lambda: 0)
    with pytest.raises(mutation.CannotJudge) as e:
        mutation.run_mutmut([], 1, 10.0)
    assert '(first "tests/x.py::t (call): \\x1b[2J\\rmutation: every file held, exit 0")' in str(e.value)
    assert "\x1b" not in str(e.value) and "\r" not in str(e.value)


# ---- the shell scripts: stubs on PATH stand in for python, docker and curl -------------------

def _stub(folder, name, body):
    p = folder / name
    p.write_text("#!/usr/bin/env bash\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _bash(script, env, *args, cwd=None):
    env = {"PATH": os.environ["PATH"], "HOME": env.pop("HOME", "/nonexistent"), **env}
    return subprocess.run(["bash", str(REPO_ROOT / "ci" / script), *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=cwd)


def _gate_python(tmp_path, check_rc, test_rc, junit):
    """python for ci/gfx950-gate.sh: aiter-check exits ``check_rc``, pytest writes ``junit`` (None:
    nothing) and exits ``test_rc``; the summary (``python -``) runs on the real interpreter."""
    write = "" if junit is None else f"""printf '%s' '{junit}' > "$FP4MOE_GATE_OUT/junit.xml";"""
    return _stub(tmp_path, "py", f'''case "$2" in
  fp4moe.commands.main) echo "| aiter table |"; exit {check_rc} ;;
  pytest) {write} exit {test_rc} ;;
esac
[ "$1" = - ] && exec {sys.executable} "$@"
exit 99''')


JUNIT_OK = '<testsuite tests="2" failures="0" errors="0" skipped="0"><testcase classname="t" name="a"/></testsuite>'
JUNIT_FAIL = ('<testsuite tests="2" failures="1" errors="0" skipped="0"><testcase classname="t" name="a">'
              '<failure message=""/></testcase></testsuite>')
#: (case, aiter-check's exit, pytest's exit, junit, the gate's exit)
GFX950 = [
    pytest.param("both held", 0, 0, JUNIT_OK, 0, marks=pytest.mark.slow),
    pytest.param("a test failed", 0, 1, JUNIT_FAIL, 1, marks=pytest.mark.slow),
    pytest.param("aiter-check measured a regression", 1, 0, JUNIT_OK, 1, marks=pytest.mark.slow),
    ("a regression outranks could not judge", 2, 1, JUNIT_FAIL, 1),
    pytest.param("aiter-check could not judge", 2, 0, JUNIT_OK, 2, marks=pytest.mark.slow),
    ("no tests collected (pytest 5)", 0, 5, JUNIT_OK, 2),
    pytest.param("a required capability missing (pytest 4)", 0, 4, None, 2, marks=pytest.mark.slow),
    pytest.param("pytest interrupted (2)", 0, 2, None, 2, marks=pytest.mark.slow),
    pytest.param("pytest killed by a signal (137)", 0, 137, "<testsuite", 2, marks=pytest.mark.slow),
    pytest.param("aiter-check crashed (127: no python)", 127, 0, JUNIT_OK, 2, marks=pytest.mark.slow),
    ("a junit XML cut mid-write", 0, 0, '<testsuite tests="2"><testcase', 0),
    pytest.param("a junit XML with a count that is no number", 0, 0, '<testsuite tests="two"/>', 0, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case,check_rc,test_rc,junit,want", GFX950, ids=[c.values[0] if hasattr(c, "values") else c[0] for c in GFX950])
def test_gfx950_gate_exit_folds_both_verdicts(tmp_path, case, check_rc, test_rc, junit, want):
    py = _gate_python(tmp_path, check_rc, test_rc, junit)
    r = _bash("gfx950-gate.sh", {"PYTHON": str(py), "FP4MOE_GATE_OUT": str(tmp_path / "out")})
    assert r.returncode == want, r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    assert r.stderr.splitlines()[-1] == f"gfx950-gate: exit {want} (aiter-check exited {check_rc}, pytest {test_rc})"
    summary = (tmp_path / "out/summary.md").read_text()
    assert f"aiter-check (exit {check_rc})" in summary and "| aiter table |" in summary
    if junit and "two" in junit or junit and not junit.endswith(">"):
        assert "the junit XML is unreadable" in summary


@pytest.fixture
def serve_stubs(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stub(bin_, "curl", "exit 0")
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "BASE_IMAGE": "base:1", "HEAD_IMAGE": "head:1",
           "MODEL": "/models/m", "FP4MOE_GATE_OUT": str(tmp_path / "out"), "LAUNCH_TIMEOUT_S": "1"}
    return bin_, env


#: (case, docker run -d's exit, the gate container's exit, the script's exit, its last line says)
SERVE = [
    pytest.param("held", 0, 0, 0, None, marks=pytest.mark.slow),
    ("a regression", 0, 1, 1, None),
    pytest.param("the gate could not run", 0, 2, 2, None, marks=pytest.mark.slow),
    ("the gate container did not start (docker 125)", 0, 125, 2, "the gate's container exited 125"),
    pytest.param("install.sh failed in the container", 0, 127, 2, "the gate's container exited 127", marks=pytest.mark.slow),
    pytest.param("killed (137)", 0, 137, 2, "the gate's container exited 137", marks=pytest.mark.slow),
    pytest.param("a server did not start", 1, 0, 2, "docker run of base:1 (the base server) failed", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case,launch_rc,gate_rc,want,says", SERVE, ids=[c.values[0] if hasattr(c, "values") else c[0] for c in SERVE])
def test_serve_bench_script_keeps_the_contract(serve_stubs, case, launch_rc, gate_rc, want, says):
    bin_, env = serve_stubs
    _stub(bin_, "docker", f'''case "$1 $2" in
  "run -d") exit {launch_rc} ;;
  "run --rm") exit {gate_rc} ;;
esac
exit 0''')
    r = _bash("serve-bench.sh", env)
    assert r.returncode == want, r.stderr[-2000:]
    if says:
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("serve-bench:")]
        assert len(lines) == 1 and lines[0].startswith("serve-bench: cannot run: ") and says in lines[0], r.stderr


@pytest.mark.slow
def test_serve_bench_script_a_server_that_never_answers_is_2(serve_stubs):
    bin_, env = serve_stubs
    _stub(bin_, "docker", "exit 0")
    _stub(bin_, "curl", "exit 7")
    _stub(bin_, "sleep", "exit 0")
    r = _bash("serve-bench.sh", {**env, "LAUNCH_TIMEOUT_S": "0"})
    assert r.returncode == 2 and "did not answer /health within 0 s" in r.stderr.splitlines()[-1]


@pytest.mark.parametrize("script,env,says", [
    ("install.sh", {}, 'install.sh: cannot run: ""$PY" -m pip install -q "torch==2.13.0"" exited 3'),
    ("fetch_amd_aiter_wheel.sh", {}, "fetch_amd_aiter_wheel: cannot run: "),
], ids=["install.sh pip fails", "fetch wheel pip fails"])
def test_install_scripts_that_cannot_install_exit_2_not_pips_code(tmp_path, script, env, says):
    py = _stub(tmp_path, "py", "exit 3")
    r = _bash(script, {"PYTHON": str(py), "FP4MOE_WHEEL_DIR": str(tmp_path / "w"), "FP4MOE_QUIET": "1", **env})
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1].startswith(says), r.stderr


def test_install_sh_a_missing_wheel_is_2(tmp_path):
    r = _bash("install.sh", {"PYTHON": sys.executable}, str(tmp_path / "nope.whl"))
    assert r.returncode == 2 and r.stderr.strip() == f"install.sh: {tmp_path / 'nope.whl'}: no such wheel"


def test_installed_package_without_a_venv_is_2(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stub(bin_, "python3", "exit 1")
    r = _bash("installed-package.sh", {"PATH": f"{bin_}:{os.environ['PATH']}", "TMPDIR": str(tmp_path),
                                       "FP4MOE_CI_WHEEL_VENV": str(tmp_path / "venv")})
    assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith("installed-package: cannot run: python3 -m venv")


def test_installed_package_with_a_base_that_is_no_venv_is_2(tmp_path):
    r = _bash("installed-package.sh", {"TMPDIR": str(tmp_path), "FP4MOE_CI_WHEEL_VENV": str(tmp_path / "venv"),
                                       "FP4MOE_CI_WHEEL_BASE": str(tmp_path / "nope")})
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == \
        f"installed-package: cannot run: FP4MOE_CI_WHEEL_BASE={tmp_path / 'nope'}: no venv there", r.stderr
    assert not (tmp_path / "venv").exists()


def test_minimal_image_script_that_cannot_build_its_venv_is_2(tmp_path):
    """ci/minimal-image.sh: a venv it cannot make is exit 2 with one line naming it (never pytest's 0)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = subprocess.run(["bash", str(REPO_ROOT / "ci" / "minimal-image.sh")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, FP4MOE_MINIMAL_VENV=str(blocker / "venv"), FP4MOE_MINIMAL_FRESH="1"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and lines[-1].startswith("minimal-image: cannot run:") and str(blocker) in lines[-1], r.stderr


def test_every_script_ci_calls_is_in_a_table():
    """A new script in ci/ or a new call of one from .ci/run or a workflow needs its row here."""
    called = set()
    for f in [REPO_ROOT / ".ci/run", *(REPO_ROOT / "ci/workflows").glob("*.yml")]:
        text = f.read_text()
        called |= {n for n in ("mutation.py", "install.sh", "installed-package.sh", "fetch_amd_aiter_wheel.sh",
                               "gfx950-gate.sh", "serve-bench.sh", "minimal-image.sh") if f"ci/{n}" in text}
    scripts = {p.name for p in (REPO_ROOT / "ci").iterdir() if p.suffix in (".py", ".sh")}
    tabled = {"mutation.py", "install.sh", "installed-package.sh", "fetch_amd_aiter_wheel.sh", "gfx950-gate.sh",
              "serve-bench.sh", "minimal-image.sh", "mutation_pytest.py"}  # mutation_pytest.py: a pytest plugin, no exit of its own
    assert scripts <= tabled, f"scripts without a fault table: {sorted(scripts - tabled)}"
    assert called <= tabled
    assert shutil.which("bash")


def test_two_merges_at_once_leave_one_whole_record(tree):
    """Two runs at once writing the same record: the last writer wins, whole (a unique temporary
    file per writer, renamed over it)."""
    shards = []
    for i in range(2):
        s = tree / f"s{i}.json"
        s.write_text(json.dumps({"schema": 1, "files": {f"f{j}.py": {"score": 0.5, "measured": f"2026-0{i + 1}"}
                                                        for j in range(300)}}))
        shards.append(s)
    rcs = []
    threads = [threading.Thread(target=lambda s=s: rcs.extend(mutation.main(["--merge", str(s)]) for _ in range(5)))
               for s in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rcs == [0] * 10
    book = json.loads((tree / SCORES_F).read_text())
    assert len(book["files"]) == 301
    assert not [p for p in (tree / "ci").iterdir() if p.name.endswith(".tmp")]


def test_a_second_mutation_run_in_one_checkout_cannot_judge(tree, capsys, monkeypatch):
    """Two runs at once would share mutants/: the second is exit 2 naming the lock, before
    mutmut starts; the lock goes with the first run's end (main returns)."""
    monkeypatch.setattr(mutation, "RUN_LOG", tree / "mutants/run.log")
    monkeypatch.setattr(mutation, "FAILURES_LOG", tree / "mutants/failures.log")
    monkeypatch.setattr(mutation, "refresh_unmutated_copies", lambda: 0)
    started = []
    monkeypatch.setattr(mutation, "run_in_group", lambda *a: started.append(1) or 0)
    first = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                              "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                              "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
                              str(tree / "mutants/.mutation.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "held\n"
        assert mutation.main([UNIT, "--ratchet"]) == 2
        line = _one_line(capsys.readouterr().err)
        assert str(tree / "mutants/.mutation.lock") in line and "another ci/mutation.py run" in line
        assert started == []
    finally:
        first.kill()
        first.wait()
    assert mutation.main([UNIT, "--ratchet"]) == 0 and started == [1]  # alone: its own verdict
    assert mutation._HELD == {}


def test_mutmut_runs_the_suite_with_its_asserts(tree, monkeypatch):
    """PYTHONOPTIMIZE=1 in CI's environment would strip the suite's asserts in mutmut's runs:
    every mutant would survive and every score fall (exit 1). It is left out of mutmut's env."""
    monkeypatch.setattr(mutation, "RUN_LOG", tree / "mutants/run.log")
    monkeypatch.setattr(mutation, "FAILURES_LOG", tree / "mutants/failures.log")
    monkeypatch.setattr(mutation, "refresh_unmutated_copies", lambda: 0)
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    seen = {}
    monkeypatch.setattr(mutation, "run_in_group", lambda cmd, env, log, budget: seen.update(env) or 0)
    assert mutation.main([UNIT, "--ratchet"]) == 0
    assert seen and "PYTHONOPTIMIZE" not in seen


def test_gfx950_gate_runs_the_suite_with_its_asserts(tmp_path):
    """A runner's PYTHONOPTIMIZE=1 would strip every assert of the suite: a green run that checked
    nothing. The script unsets it for pytest and the gate alike."""
    py = _stub(tmp_path, "py", f'''[ -z "${{PYTHONOPTIMIZE:-}}" ] || exit 42
case "$2" in
  fp4moe.commands.main) exit 0 ;;
  pytest) printf '%s' '{JUNIT_OK}' > "$FP4MOE_GATE_OUT/junit.xml"; exit 0 ;;
esac
exec {sys.executable} "$@"''')
    r = _bash("gfx950-gate.sh", {"PYTHON": str(py), "FP4MOE_GATE_OUT": str(tmp_path / "out"), "PYTHONOPTIMIZE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
