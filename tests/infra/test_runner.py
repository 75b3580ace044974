"""``fp4moe.infra.runner``, the one child runner, as a fault table: every accident of the code
under test (raise, exit, hang, fork or daemonize, flood, write caches, leave children, return a
broken record) ends in its documented verdict, and the parent judges what comes back.

Children are ``sh`` one-liners or ``python`` without heavy imports (tens of ms each); only the
judged child's ``ok`` mode imports torch.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.infra import deadline, files, runner
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.reliability  # a fault table: `pytest -m reliability` selects every one


def _wait_gone(tag: str, seconds: float = 5.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not live_with_arg(tag):
            return True
        time.sleep(0.02)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, parent not reaping: it was reparented) counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_timeout_kills_a_grandchild_that_ignores_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "KILL_GRACE_S", 0.15)
    pid_file, tag = tmp_path / "pid", unique_tag()
    script = f"sh -c 'trap \"\" TERM; echo up > {pid_file}; exec sleep {tag}' & sleep 300"
    res = runner.run_child(["sh", "-c", script], timeout_s=0.25, want_record=False)
    assert res.timed_out and res.rc is None and "timed out after" in res.why_no_record()
    assert _wait_gone(tag), f"grandchild {live_with_arg(tag)} survived the group kill"


def test_nothing_of_a_finished_childs_group_outlives_it(tmp_path):
    pid_file, tag = tmp_path / "pid", unique_tag()
    res = runner.run_child(["sh", "-c", f"sh -c 'echo up > {pid_file}; exec sleep {tag}' >/dev/null 2>&1 & while [ ! -s {pid_file} ]; do sleep 0.01; done"], timeout_s=30,
                              want_record=False)
    assert res.rc == 0 and not res.timed_out and pid_file.read_text().strip() == "up"
    assert _wait_gone(tag), "a background process of the child outlived it"


@pytest.mark.parametrize(
    "body,expect",
    [
        ("w('[1, 2]')", "result record is a JSON list, not an object"),
        ("w('{\"ok\": ')", "unreadable result record"),
        ("pass", "exited 3 without a result record: \"last words\""),
    ],
    ids=["list", "truncated", "none"],
)
def test_a_record_that_is_not_an_object_is_no_verdict(body, expect):
    code = ("import os, sys\n"
            "def w(t):\n    open(os.environ['FP4MOE_CHILD_RESULT'], 'w').write(t)\n"
            f"{body}\nprint('last words', file=sys.stderr)\nsys.exit(3)\n")
    res = runner.run_child([sys.executable, "-c", code], timeout_s=30)
    assert res.record is None and res.rc == 3 and expect in res.why_no_record()


def test_a_record_is_read_and_the_exit_status_is_not_the_verdict():
    code = ("import sys\nfrom fp4moe.infra import runner\n"
            "runner.record_writer()({'verdict': 'pass'})\nsys.exit(0)\n")
    res = runner.run_child([sys.executable, "-c", code], timeout_s=30)
    assert res.record == {"verdict": "pass"} and res.rc == 0


def test_record_path_is_fresh_per_run(monkeypatch, tmp_path):
    """A record a previous run left cannot be read as this run's."""
    stale = tmp_path / "record.json"
    stale.write_text('{"verdict": "pass"}')
    monkeypatch.setenv(runner.RESULT_ENV, str(stale))
    res = runner.run_child([sys.executable, "-c", "pass"], timeout_s=30)
    assert res.record is None


@pytest.mark.parametrize("t", [0, -1])
def test_non_positive_timeout_is_refused(t):
    with pytest.raises(ValueError, match="timeout"):
        runner.run_child(["true"], timeout_s=t)


def test_atomic_write_keeps_mode_and_leaves_no_temp_on_failure(tmp_path):
    f = tmp_path / "results.json"
    f.write_text("old")
    f.chmod(0o640)
    files.atomic_write_text(f, "new")
    assert f.read_text() == "new" and stat.S_IMODE(f.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.json"
    files.atomic_write_json(fresh, {"a": 1})
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644 and fresh.read_text() == '{"a": 1}\n'
    with pytest.raises(TypeError):
        files.atomic_write_text(f, object())  # fails mid-write
    assert f.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["fresh.json", "results.json"]
    with pytest.raises(OSError, match="cannot write here"):
        files.atomic_write_text(tmp_path / "no" / "x.json", "x")


def _registered(pid_file) -> bool:
    """Whether the child is ready to be killed: it wrote its file (the shell ran) and
    ``run_child`` has it among the live children (the thread got past ``Popen``)."""
    if not pid_file.is_file():
        return False
    with runner._LIVE_LOCK:
        return any(str(pid_file) in " ".join(p.args) for p in runner._LIVE)


def test_kill_all_children_ends_live_groups(tmp_path):
    """What the gate's SIGINT/SIGTERM path calls: a child started in another thread dies. The
    kill waits for an explicit readiness (pid written and registered), not for time: under
    load the thread may not yet have registered the child when the pid file appears."""
    import threading

    pid_file, tag = tmp_path / "pid", unique_tag()
    out = {}
    t = threading.Thread(target=lambda: out.update(r=runner.run_child(
        ["sh", "-c", f"echo up > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; exec sleep {tag}"],
        timeout_s=300, want_record=False)))
    t.start()
    t0 = time.monotonic()
    while not _registered(pid_file):
        assert t.is_alive() and time.monotonic() - t0 < 120, "the child never became ready"
        time.sleep(0.02)
    runner.kill_all_children()
    t.join(60)
    assert not t.is_alive() and out["r"].rc == -signal.SIGTERM
    assert _wait_gone(tag)


# --------------------------------------------------------------------------- hostile inputs


#: code under test that starts a daemon in a session of its own (``env``: its environment,
#: None to inherit) and returns once the daemon is up (``sleep <argv[3]>``: found by that here)
DAEMON = """
import os, subprocess, sys, time
pid_file, env = sys.argv[1], None if sys.argv[2] == "inherit" else {}
subprocess.Popen(["sh", "-c", "echo up > " + pid_file + ".t; mv " + pid_file
                  + ".t " + pid_file + "; exec sleep " + sys.argv[3]], start_new_session=True, env=env)
while not os.path.exists(pid_file):
    time.sleep(0.01)
"""


@pytest.mark.parametrize("env", ["inherit", "clear"])
def test_a_detached_daemon_is_killed_and_does_not_hold_the_gate(tmp_path, env):
    """A process in its own session (setsid) that keeps stdout/stderr open and sleeps, started by
    a child that finishes at once: the run returns at once (not at its 60 s limit) and the daemon
    is dead, found by the marker it inherited or (environment cleared) by the pipes it holds."""
    pid_file, tag = tmp_path / "pid", unique_tag()
    t0 = time.monotonic()
    res = runner.run_child([sys.executable, "-c", DAEMON, str(pid_file), env, tag], timeout_s=60, want_record=False)
    assert time.monotonic() - t0 < 30 and not res.timed_out and res.rc == 0, res.stderr
    assert pid_file.read_text().strip() == "up" and _wait_gone(tag) and res.swept >= 1


def test_output_is_bounded_head_and_tail_kept():
    """40 MiB printed: the capture keeps the first and last bytes and counts the rest."""
    code = ("import os\nos.write(1, b'HEAD' + b'x' * (40 << 20) + b'TAIL')\nos.write(2, b'e' * (8 << 20) + b'LAST')\n")
    res = runner.run_child([sys.executable, "-c", code], timeout_s=60, want_record=False)
    limit = runner.CAPTURE_HEAD + runner.CAPTURE_TAIL + 200
    assert len(res.stdout) < limit and len(res.stderr) < limit
    assert res.stdout.startswith("HEAD") and res.stdout.endswith("TAIL") and "bytes of output dropped" in res.stdout
    assert res.stderr.endswith("LAST")


def test_child_writes_no_bytecode():
    res = runner.run_child([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], timeout_s=30,
                           want_record=False)
    assert res.stdout.strip() == "True"


@pytest.mark.slow
def test_a_child_that_stops_itself_is_killed_at_its_limit(monkeypatch, tmp_path):
    """A stopped child handles no SIGTERM: SIGKILL after the grace ends it; the run timed out."""
    monkeypatch.setattr(runner, "KILL_GRACE_S", 0.1)
    res = runner.run_child(["sh", "-c", f"echo up > {tmp_path / 'pid'}; kill -STOP $$"], timeout_s=1.0,
                           want_record=False)
    assert res.timed_out and res.rc is None and "timed out after" in res.why_no_record()
    assert (tmp_path / "pid").is_file() and _wait_gone(str(tmp_path / "pid"))


_DISPOSITIONS = (
    "import signal, sys; from fp4moe.infra import runner; runner.install_signal_cleanup(); "
    "name = lambda h: h if isinstance(h, str) else {signal.SIG_IGN: 'ign', signal.SIG_DFL: 'dfl', "
    "signal.default_int_handler: 'kbint'}.get(h, 'handler'); "
    "print(' '.join(name(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)))"
)


@pytest.mark.parametrize("inherited, expected", [
    (signal.SIG_DFL, "handler handler handler"),  # a terminal's foreground job: each kills the children first
    (signal.SIG_IGN, "ign ign handler"),  # `cmd &` from a script / nohup: ignored stays ignored, SIGTERM works
], ids=["foreground", "background-nohup"])
def test_inherited_ignores_are_kept_and_sigterm_is_always_handled(inherited, expected):
    def preexec():
        for s in (signal.SIGINT, signal.SIGHUP):
            signal.signal(s, inherited)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    out = subprocess.run([sys.executable, "-c", _DISPOSITIONS], capture_output=True, text=True, timeout=60,
                         preexec_fn=preexec, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == expected.split()


# --------------------------------------------------------------------------- judged children

CHILD = str(Path(__file__).with_name("runner_child.py"))
SCHEMA = runner.RecordSchema("runner-test", 1, {"mode": str, "n": int})


def _x():
    import torch

    return torch.randn(5, 3, generator=torch.Generator().manual_seed(7))


def _judged(mode: str, *args, timeout_s: float = 60.0, **kw):
    try:
        return runner.run_judged(CHILD, [mode, *args], label=f"test child ({mode})", timeout_s=timeout_s, schema=SCHEMA,
                                 inputs={"inp": {"x": _x()}} if mode == "ok" else None, **kw)
    except GateCannotRun as e:
        return e


def test_json_outputs_come_back_validated():
    out = _judged("json")
    assert not isinstance(out, GateCannotRun), out
    assert out.record == {"mode": "json", "n": 3} and out.json("meta") == {"rows": [1, 2, 3]} and out.names() == ["meta"]
    with pytest.raises(GateCannotRun, match="no output 'nope'"):
        out.json("nope")


@pytest.mark.slow
def test_outputs_come_back_validated_and_bitwise():
    import torch

    out = _judged("ok")
    assert not isinstance(out, GateCannotRun), out
    assert out.record == {"mode": "ok", "n": 15}
    assert torch.equal(out.tensors("out")["y"], _x() * 2)
    assert out.json("meta") == {"rows": 5} and out.names() == ["meta", "out"]
    with pytest.raises(GateCannotRun, match="no output 'nope'"):
        out.tensors("nope")


# mode -> what the one cannot-run line must say (the code under test's own text quoted, escaped)
JUDGED_FAULTS = {
    "raise": r'test child \(raise\): ValueError while running mode raise; it said: "boom \\u001b\[2J exit 0 x',
    "exit": r"called sys.exit\(0\) while running mode exit",
    "osexit": r"exited 0 without a result record while running mode osexit",
    "flood": r"exited 0 without a result record: \"y+\.\.\.\" while running mode flood",
    "symlink": r"output 'out': .*not a regular file",
    "fifo": r"output 'out': .*not a regular file",
    "schema": r"unknown key\(s\) \['extra'\]",
    "not-a-list": r"'outputs' is not a list of file names",
    "no-finish": r"ended without a result while running mode no-finish",
}


@pytest.mark.parametrize("mode", sorted(JUDGED_FAULTS))
def test_a_judged_child_accident_is_one_named_bounded_line(mode):
    import re

    got = _judged(mode)
    assert isinstance(got, GateCannotRun), f"mode {mode}: the child's outputs were accepted: {got!r}"
    line = str(got)
    assert "\n" not in line and "\x1b" not in line and len(line) <= runner.MAX_LINE_CHARS, line
    assert re.search(JUDGED_FAULTS[mode], line), line


def test_caches_and_daemons_of_a_judged_child_do_not_outlive_it(tmp_path):
    """HOME, TMPDIR and the compiler caches point into the scratch folder, removed afterwards; a
    daemon the child left is killed."""
    tag = unique_tag()
    out = _judged("daemon", tag)
    assert not isinstance(out, GateCannotRun) and _wait_gone(tag) and out.result.swept >= 1
    out = _judged("caches")
    assert not isinstance(out, GateCannotRun), out
    home = Path(out.result.stdout.split()[2])
    assert not home.exists() and not home.parent.exists() and not Path.home().joinpath("left-by-the-child").exists()


@pytest.mark.slow
def test_a_hung_child_is_killed_at_the_one_deadline_and_named(monkeypatch):
    monkeypatch.setattr(runner, "KILL_GRACE_S", 0.2)
    d = deadline.Deadline(1.0)
    got = _judged("hang", timeout_s=600, deadline=d)
    assert isinstance(got, GateCannotRun) and re_search(r"killed at the deadline \(--timeout 1 s.*while running mode hang", got)
    got = _judged("ok", deadline=d)
    assert isinstance(got, GateCannotRun) and "--timeout 1: spent before test child (ok) could start" in str(got)


def re_search(pattern: str, e) -> bool:
    import re

    return re.search(pattern, str(e)) is not None


def test_schema_names_missing_keys_and_wrong_types():
    s = runner.RecordSchema("r", 2, {"a": int, "b": str}, optional=frozenset({"b"}))
    assert s.validate({"schema": "r", "schema_version": 2, "a": 1}, "L") == {"a": 1}
    for rec, msg in (({"schema": "r", "schema_version": 1, "a": 1}, "version 1, the judge reads 'r' version 2"),
                     ({"schema": "r", "schema_version": 2}, r"missing key\(s\) \['a'\]"),
                     ({"schema": "r", "schema_version": 2, "a": "1"}, "'a' is str, not int"),
                     ({"schema": "r", "schema_version": 2, "a": True}, "'a' is bool, not int")):
        with pytest.raises(GateCannotRun, match=msg):
            s.validate(rec, "L")


def test_quote_is_one_bounded_line_with_control_characters_escaped():
    q = runner.quote("a\nb\x1b[2J" + "c" * 1000, 50)
    assert q.startswith('"a b\\u001b[2J') and q.endswith('..."') and "\x1b" not in q


def test_the_command_lines_deadline_counts_from_its_process_start():
    """``fp4moe-gate ... --timeout T`` bounds the whole process: a process 0.5 s old when it makes
    its Deadline(10) has at most 9.5 s left (anchored on /proc); an unanchored one the full 10."""
    code = ("import time; time.sleep(0.5); from fp4moe.infra import deadline; t0 = time.monotonic(); "
            "print(deadline.Deadline(10)._end - t0); deadline.anchor_to_process_start(); "
            "print(deadline.Deadline(10)._end - time.monotonic())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    plain, anchored = (float(x) for x in r.stdout.split())
    assert plain >= 9.99 and 0 < anchored <= 10 - 0.5 + 0.02, r.stdout
