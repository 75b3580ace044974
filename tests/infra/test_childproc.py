"""``fp4moe.infra.childproc``: time limits kill the whole process group (SIGKILL for a grandchild
that ignores SIGTERM), nothing of a finished child's group survives it, a record that is not
a JSON object is no verdict, atomic writes leave the old file or the new one.

Children are ``sh`` one-liners or ``python -c`` without heavy imports (tens of ms each).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.infra import childproc, files
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
    monkeypatch.setattr(childproc, "KILL_GRACE_S", 0.15)
    pid_file, tag = tmp_path / "pid", unique_tag()
    script = f"sh -c 'trap \"\" TERM; echo up > {pid_file}; exec sleep {tag}' & sleep 300"
    res = childproc.run_child(["sh", "-c", script], timeout_s=0.25, want_record=False)
    assert res.timed_out and res.rc is None and "timed out after" in res.why_no_record()
    assert _wait_gone(tag), f"grandchild {live_with_arg(tag)} survived the group kill"


def test_nothing_of_a_finished_childs_group_outlives_it(tmp_path):
    pid_file, tag = tmp_path / "pid", unique_tag()
    res = childproc.run_child(["sh", "-c", f"sh -c 'echo up > {pid_file}; exec sleep {tag}' >/dev/null 2>&1 & while [ ! -s {pid_file} ]; do sleep 0.01; done"], timeout_s=30,
                              want_record=False)
    assert res.rc == 0 and not res.timed_out and pid_file.read_text().strip() == "up"
    assert _wait_gone(tag), "a background process of the child outlived it"


@pytest.mark.parametrize(
    "body,expect",
    [
        ("w('[1, 2]')", "result record is a JSON list, not an object"),
        ("w('{\"ok\": ')", "unreadable result record"),
        ("pass", "exited 3 without a result record: last words"),
    ],
    ids=["list", "truncated", "none"],
)
def test_a_record_that_is_not_an_object_is_no_verdict(body, expect):
    code = ("import os, sys, json\n"
            "from fp4moe.infra import childproc\n"
            "key = bytes.fromhex(os.fdopen(int(os.environ['FP4MOE_CHILD_KEY_FD'])).read().strip())\n"
            "def w(t):\n    open(os.environ['FP4MOE_CHILD_RESULT'], 'w').write(json.dumps({'body': t, 'hmac': childproc._mac(key, t)}))\n"
            f"{body}\nprint('last words', file=sys.stderr)\nsys.exit(3)\n")
    res = childproc.run_child([sys.executable, "-c", code], timeout_s=30)
    assert res.record is None and res.rc == 3 and expect in res.why_no_record()


def test_a_record_is_read_and_the_exit_status_is_not_the_verdict():
    code = ("import sys\nfrom fp4moe.infra import childproc\n"
            "childproc.record_writer()({'verdict': 'pass'})\nsys.exit(0)\n")
    res = childproc.run_child([sys.executable, "-c", code], timeout_s=30)
    assert res.record == {"verdict": "pass"} and res.rc == 0


def test_record_path_is_fresh_per_run(monkeypatch, tmp_path):
    """A record a previous run left cannot be read as this run's."""
    stale = tmp_path / "record.json"
    stale.write_text('{"verdict": "pass"}')
    monkeypatch.setenv(childproc.RESULT_ENV, str(stale))
    res = childproc.run_child([sys.executable, "-c", "pass"], timeout_s=30)
    assert res.record is None


@pytest.mark.parametrize("t", [0, -1])
def test_non_positive_timeout_is_refused(t):
    with pytest.raises(ValueError, match="timeout"):
        childproc.run_child(["true"], timeout_s=t)


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
    with childproc._LIVE_LOCK:
        return any(str(pid_file) in " ".join(p.args) for p in childproc._LIVE)


def test_kill_all_children_ends_live_groups(tmp_path):
    """What the gate's SIGINT/SIGTERM path calls: a child started in another thread dies. The
    kill waits for an explicit readiness (pid written and registered), not for time: under
    load the thread may not yet have registered the child when the pid file appears."""
    import threading

    pid_file, tag = tmp_path / "pid", unique_tag()
    out = {}
    t = threading.Thread(target=lambda: out.update(r=childproc.run_child(
        ["sh", "-c", f"echo up > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; exec sleep {tag}"],
        timeout_s=300, want_record=False)))
    t.start()
    t0 = time.monotonic()
    while not _registered(pid_file):
        assert t.is_alive() and time.monotonic() - t0 < 120, "the child never became ready"
        time.sleep(0.02)
    childproc.kill_all_children()
    t.join(60)
    assert not t.is_alive() and out["r"].rc == -signal.SIGTERM
    assert _wait_gone(tag)


# --------------------------------------------------------------------------- hostile inputs


def test_a_record_written_by_the_code_under_test_is_no_verdict():
    """Probe "the verdict channel is visible": code under test sees $FP4MOE_CHILD_RESULT and
    writes a passing record itself (plain, or shaped like the harness's), then exits."""
    code = ("import json, os\np = os.environ['FP4MOE_CHILD_RESULT']\n"
            "open(p, 'w').write(json.dumps({'body': json.dumps({'verdict': 'pass'}), 'hmac': '0' * 64}))\n")
    res = childproc.run_child([sys.executable, "-c", code], timeout_s=30)
    assert res.record is None and "not authenticated" in res.why_no_record()
    plain = "import json, os\nopen(os.environ['FP4MOE_CHILD_RESULT'], 'w').write(json.dumps({'verdict': 'pass'}))\n"
    res = childproc.run_child([sys.executable, "-c", plain], timeout_s=30)
    assert res.record is None and "not authenticated" in res.why_no_record()


def test_code_under_test_cannot_take_a_second_writer_or_overwrite_the_harness_record():
    """The harness takes the writer first; code under test asking for one (the public API) is
    refused, and its overwrite of the record file (an atexit forgery) voids the verdict."""
    code = ("import json, os, sys\nfrom fp4moe.infra import childproc\n"
            "w = childproc.record_writer()\n"
            "try:\n    childproc.record_writer()({'verdict': 'pass'})\nexcept RuntimeError as e:\n    print('refused:', e)\n"
            "w({'verdict': 'fail'})\nprint('env:', os.environ.get('FP4MOE_CHILD_KEY_FD'))\n"
            "if sys.argv[1] == 'overwrite':\n"
            "    open(os.environ['FP4MOE_CHILD_RESULT'], 'w').write(json.dumps({'verdict': 'pass'}))\n")
    res = childproc.run_child([sys.executable, "-c", code, "keep"], timeout_s=30)
    assert res.record == {"verdict": "fail"} and "refused:" in res.stdout
    assert "env: None" in res.stdout  # the key's fd number is gone from the environment too
    res = childproc.run_child([sys.executable, "-c", code, "overwrite"], timeout_s=30)
    assert res.record is None and "not authenticated" in res.why_no_record()


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
NAMESPACE = [pytest.param(True, id="pid-namespace"), pytest.param(False, id="sweep-only")]


@pytest.mark.parametrize("namespace", NAMESPACE)
def test_a_detached_daemon_holding_the_pipes_is_killed_and_does_not_hold_the_gate(tmp_path, namespace):
    """Probe "processes that outlive the gate": code under test starts a process in its own
    session (setsid) that keeps stdout/stderr open and sleeps; the child itself finishes at
    once. The run returns in about a second (not at its 60 s limit) and the daemon is dead:
    killed with the PID namespace, or found by the sweep without one."""
    if namespace and childproc.containment()[0] is None:
        pytest.skip(f"[cpu tier] {childproc.containment()[1]}")
    pid_file, tag = tmp_path / "pid", unique_tag()
    t0 = time.monotonic()
    res = childproc.run_child([sys.executable, "-c", DAEMON, str(pid_file), "inherit", tag], timeout_s=60,
                              want_record=False, namespace=namespace)
    assert time.monotonic() - t0 < 10 and not res.timed_out and res.rc == 0, res.stderr
    assert pid_file.read_text().strip() == "up" and _wait_gone(tag)
    assert res.contained.processes != childproc.Hold.SWEEP if namespace else \
        (res.swept >= 1 and res.contained.processes == childproc.Hold.SWEEP)


@pytest.mark.parametrize("namespace", NAMESPACE)
def test_a_daemon_that_clears_its_environment_is_found_by_the_pipes_it_holds(tmp_path, namespace):
    if namespace and childproc.containment()[0] is None:
        pytest.skip(f"[cpu tier] {childproc.containment()[1]}")
    pid_file, tag = tmp_path / "pid", unique_tag()
    res = childproc.run_child([sys.executable, "-c", DAEMON, str(pid_file), "clear", tag], timeout_s=60,
                              want_record=False, namespace=namespace)
    assert res.rc == 0 and pid_file.read_text().strip() == "up" and _wait_gone(tag), res.stderr


def test_output_is_bounded_head_and_tail_kept():
    """Probe "memory grows with the input": 40 MiB printed; the capture keeps the first and last
    bytes and counts the rest (the gate's memory does not grow with it)."""
    code = ("import os\nos.write(1, b'HEAD' + b'x' * (40 << 20) + b'TAIL')\nos.write(2, b'e' * (8 << 20) + b'LAST')\n")
    res = childproc.run_child([sys.executable, "-c", code], timeout_s=60, want_record=False)
    limit = childproc.CAPTURE_HEAD + childproc.CAPTURE_TAIL + 200
    assert len(res.stdout) < limit and len(res.stderr) < limit
    assert res.stdout.startswith("HEAD") and res.stdout.endswith("TAIL") and "bytes of output dropped" in res.stdout
    assert res.stderr.endswith("LAST")


def test_child_writes_no_bytecode():
    res = childproc.run_child([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], timeout_s=30,
                              want_record=False)
    assert res.stdout.strip() == "True"


def _worker(tmp_path, body: str, ready: bytes, namespace: bool = True):
    """A worker that answers ``hello`` (with ``ready``: bytes written in the same ``write``
    as the reply, so they are read with it), then reads one request and runs ``body``."""
    script = tmp_path / "w.py"
    script.write_text("import os, sys, time\nfd = int(os.environ['FP4MOE_WORKER_FD'])\nsys.stdin.readline()\n"
                      f"os.write(fd, b'{{\"hello\": 1}}\\n' + {ready!r})\nsys.stdin.readline()\n" + body)
    return childproc.Worker([sys.executable, str(script)], name="test worker", namespace=namespace)


#: (body after the hello, bytes sent with the hello reply, the request's limit, the error); a
#: deterministic wait: every case starts timing only after the worker answered ``hello`` (its
#: start, ~0.1 s in a PID namespace and more under load, is outside the limit), and only the
#: cases that must time out get a short limit -- the others get 60 s and end on their own
WORKER_FAULTS = {
    "half-line-then-sleep": ("time.sleep(300)\n", b'{"seconds": 0.00', 0.25, "took more than 0.25 s (a partial reply"),
    "silence": ("time.sleep(300)\n", b"", 0.25, "took more than 0.25 s"),
    "half-line-then-exit": ("os.write(fd, b'{\"seconds\": 0.00')\n", b"", 60, "died during request 'time' (exit"),
    "endless-line": ("os.write(fd, b'x' * (3 << 20))\ntime.sleep(300)\n", b"", 60, "longer than"),
}


@pytest.mark.parametrize("namespace", NAMESPACE)
@pytest.mark.parametrize("case", WORKER_FAULTS)
def test_worker_reply_has_a_deadline_for_the_whole_line(tmp_path, case, namespace):
    """Probe "worker replies that hang": half a reply line and a sleep is cut at the request's
    deadline (it used to wait for readability, then readline() forever); in a PID namespace
    (how perf ab's workers run) as without one."""
    if namespace and childproc.containment()[0] is None:
        pytest.skip(f"[cpu tier] {childproc.containment()[1]}")
    body, ready, limit, expect = WORKER_FAULTS[case]
    w = _worker(tmp_path, body, ready, namespace)
    assert w.request({"op": "hello"}, timeout_s=120) == {"hello": 1}
    assert (w.contained.processes != childproc.Hold.SWEEP) == namespace
    t0 = time.monotonic()
    with pytest.raises(childproc.WorkerError, match=expect.replace("(", r"\(")):
        w.request({"op": "time"}, timeout_s=limit)
    assert time.monotonic() - t0 < limit + 30
    assert w.proc.poll() is not None


_DISPOSITIONS = (
    "import signal, sys; from fp4moe.infra import childproc; childproc.install_signal_cleanup(); "
    "name = lambda h: h if isinstance(h, str) else {signal.SIG_IGN: 'ign', signal.SIG_DFL: 'dfl', "
    "signal.default_int_handler: 'kbint'}.get(h, 'handler'); "
    "print(' '.join(name(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)))"
)


@pytest.mark.parametrize("inherited, expected", [
    (signal.SIG_DFL, "kbint handler handler"),  # a terminal's foreground job: Ctrl-C and hangup end it
    (signal.SIG_IGN, "ign ign handler"),  # `cmd &` from a script / nohup: ignored stays ignored, SIGTERM works
], ids=["foreground", "background-nohup"])
def test_inherited_ignores_are_kept_and_sigterm_is_always_handled(inherited, expected):
    """POSIX background-job convention (childproc's docstring): SIGINT/SIGHUP inherited ignored
    stay ignored; SIGTERM always ends the gate, children first."""
    import subprocess

    def preexec():
        for s in (signal.SIGINT, signal.SIGHUP):
            signal.signal(s, inherited)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    out = subprocess.run([sys.executable, "-c", _DISPOSITIONS], capture_output=True, text=True, timeout=60,
                         preexec_fn=preexec, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == expected.split()


# --------------------------------------------------------------------------- the PID namespace

REFORKER = """
import os, sys, time
pid_file = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    for fd in range(3):
        os.close(fd)
    os.environ.clear()
    with open(pid_file + ".t", "w") as f:
        f.write(os.readlink("/proc/self"))
    os.rename(pid_file + ".t", pid_file)
    while True:  # a new process every 20 ms, each one the next daemon
        if os.fork():
            os._exit(0)
        time.sleep(0.02)
while not os.path.exists(pid_file):
    time.sleep(0.01)
"""


def _needs_namespace():
    if childproc.containment()[0] is None:
        pytest.skip(f"[cpu tier] {childproc.containment()[1]}")


def test_a_reforking_daemon_without_environment_or_pipes_dies_with_the_namespace(tmp_path):
    """Probes "a process that keeps re-forking outlives the sweep" and "a daemon that clears its
    environment and closes its pipes survives": neither marker nor pipe finds it; the PID
    namespace's end does. Checked by the script's path in every process's command line."""
    _needs_namespace()
    script = tmp_path / "reforker_probe.py"
    script.write_text(REFORKER)
    res = childproc.run_child([sys.executable, str(script), str(tmp_path / "pid")], timeout_s=60, want_record=False)
    assert res.rc == 0 and res.contained.processes != childproc.Hold.SWEEP, res.stderr
    t0 = time.monotonic()
    while live_with_arg(str(script)) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not live_with_arg(str(script)), "a re-forking daemon outlived its child"


def test_a_child_that_stops_its_parent_cannot_stop_the_gate():
    """Probe "a child sends SIGSTOP to its parent": inside the namespace its parent is PID 1,
    which the kernel shields from SIGSTOP sent from inside; this process runs on."""
    _needs_namespace()
    code = "import os, signal; os.kill(os.getppid(), signal.SIGSTOP); os.kill(1, signal.SIGSTOP); print(os.getppid())"
    res = childproc.run_child([sys.executable, "-c", code], timeout_s=30, want_record=False)
    assert res.rc == 0 and res.stdout.split() == ["1"], res.stderr


@pytest.mark.parametrize("script,rc", [("exit 7", 7), ("kill -KILL $$", -signal.SIGKILL),
                                       ("kill -TERM $$", -signal.SIGTERM), ("exec /nonexistent/x", 127)])
def test_the_namespace_keeps_the_exit_status(script, rc):
    _needs_namespace()
    assert childproc.run_child(["sh", "-c", script], timeout_s=30, want_record=False).rc == rc


def test_containment_falls_back_and_says_why(monkeypatch):
    monkeypatch.setattr(childproc, "_CONTAINMENT", None)
    monkeypatch.setattr(childproc, "PIDNS_INIT", childproc.PIDNS_INIT.with_name("no-such-starter.py"))
    how, why = childproc.containment()
    assert how is None and why.startswith("process group and sweep only (no PID namespace here:")
    res = childproc.run_child(["sh", "-c", "exit 3"], timeout_s=30, want_record=False)
    assert res.rc == 3 and res.contained.processes == childproc.Hold.SWEEP and res.contained.why == why


@pytest.mark.parametrize("namespace", NAMESPACE)
def test_a_child_that_stops_itself_is_killed_at_its_limit(monkeypatch, namespace, tmp_path):
    """A stopped child handles no SIGTERM: SIGKILL after the grace ends it (and, in a PID
    namespace, the namespace's end takes whatever it started); the run says it timed out."""
    if namespace:
        _needs_namespace()
    monkeypatch.setattr(childproc, "KILL_GRACE_S", 0.1)
    t0 = time.monotonic()
    res = childproc.run_child(["sh", "-c", f"echo up > {tmp_path / 'pid'}; kill -STOP $$"], timeout_s=1.5,
                              want_record=False, namespace=namespace)
    assert res.timed_out and res.rc is None and "timed out after" in res.why_no_record()
    assert time.monotonic() - t0 < 15 and (tmp_path / "pid").is_file() and _wait_gone(str(tmp_path / "pid"))


def test_the_namespace_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(childproc.PIDNS_ENV, "0")
    how, why = childproc.containment()
    assert how is None and "FP4MOE_PID_NAMESPACE=0" in why
    c = childproc.run_child(["sh", "-c", "exit 4"], timeout_s=30, want_record=False).contained
    assert c.processes == childproc.Hold.SWEEP and c.why == why


# --------------------------------------------------------------------------- its own /proc

#: a gate inside a namespaced child: it starts a sweep-only child of its own whose daemon (own
#: session, holding the pipes) only the sweep can find, and reports what its sweep did
NESTED_GATE = """
import json, os, sys
from fp4moe.infra import childproc
daemon = ("import subprocess, sys; subprocess.Popen(['sleep', sys.argv[1]], start_new_session=True)")
res = childproc.run_child([sys.executable, "-c", daemon, sys.argv[1]], timeout_s=60, want_record=False, namespace=False)
print(json.dumps({"swept": res.swept, "proc_is_ours": childproc.proc_is_ours(),
                  "procs": len([p for p in os.listdir("/proc") if p.isdigit()])}))
"""


def _proc_mounts() -> int:
    with open("/proc/self/mountinfo") as f:
        return sum(" - proc " in line for line in f)


def _own_proc_or_skip():
    how, why = childproc.containment()
    if how is None or not childproc.Hold(how).own_proc:
        pytest.skip(f"[slow tier] no PID namespace with its own /proc here: {why}")


@pytest.mark.slow
def test_a_gate_inside_a_namespaced_child_sweeps_its_own_children_through_its_own_proc():
    """Probe "a namespace shows the host's /proc": a gate running in a namespaced child (the
    zoo's suite) swept through the host's /proc and missed what it started. With its own /proc
    the nested sweep finds the daemon by its pipes and kills it; the child sees only its
    namespace's processes; the host's mount table gains no proc mount."""
    _own_proc_or_skip()
    tag, before = unique_tag(), _proc_mounts()
    res = childproc.run_child([sys.executable, "-c", NESTED_GATE, tag], timeout_s=120, want_record=False, own_proc=True)
    assert res.rc == 0 and res.contained.processes.own_proc, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["swept"] >= 1 and got["proc_is_ours"] and got["procs"] < 10, got
    assert _wait_gone(tag) and _proc_mounts() == before


@pytest.mark.slow
def test_in_a_namespace_with_the_hosts_proc_the_nested_sweep_refuses_to_kill_by_its_numbers():
    """The fallback's hazard, shown: in a PID namespace that kept the host's /proc a sweep would
    kill by host numbers that mean other processes here; it kills nothing (``proc_is_ours`` is
    False), and the namespace's end still takes the daemon."""
    _own_proc_or_skip()
    tag = unique_tag()
    cmd = [sys.executable, "-I", "-S", str(childproc.PIDNS_INIT), "--how", childproc.containment()[0].replace("+proc", ""),
           "--", sys.executable, "-c", NESTED_GATE, tag]
    res = childproc.run_child(cmd, timeout_s=120, want_record=False, namespace=False)
    assert res.rc == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["swept"] == 0 and not got["proc_is_ours"] and got["procs"] > 10, got
    assert _wait_gone(tag)


@pytest.mark.slow
def test_a_child_that_needs_its_own_proc_gets_the_sweep_where_the_namespace_has_the_hosts(monkeypatch):
    """``own_proc=True`` and a namespace here without its own /proc: no namespace (the sweep
    only), and the containment says why; a plain child still gets the namespace."""
    monkeypatch.setattr(childproc, "_CONTAINMENT", ("pid", "PID namespace (the host's /proc) (mount refused)"))
    res = childproc.run_child(["sh", "-c", "exit 5"], timeout_s=30, want_record=False, own_proc=True)
    assert res.rc == 5 and res.contained.processes == childproc.Hold.SWEEP and "host's" in res.contained.why
    assert childproc.run_child(["true"], timeout_s=30, want_record=False).contained.processes == childproc.Hold.PID


@pytest.mark.slow
def test_without_root_the_user_namespace_gives_its_own_proc_too():
    """As an unprivileged user (uid 65534 via setpriv, when this runs as root) the probe finds
    ``user+pid+proc`` (or says why not) and a run that way sees its own /proc."""
    import shutil

    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("[slow tier] needs root and setpriv to become an unprivileged user")
    import tempfile

    drop = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    with tempfile.TemporaryDirectory(prefix="fp4moe-userns-") as d:  # pytest's tmp_path is root's alone (0700)
        os.chmod(d, 0o755)
        init = Path(d) / "pidns.py"
        init.write_text(childproc.PIDNS_INIT.read_text())
        init.chmod(0o644)
        _userns_probe_and_run(drop, init)


def _userns_probe_and_run(drop: list[str], init) -> None:
    py = os.path.realpath(sys.executable)
    r = subprocess.run([*drop, py, "-I", "-S", str(init), "--probe"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"[slow tier] no user namespace for uid 65534 here: {r.stdout.strip()[:200]}")
    how = r.stdout.split()[0]
    assert how.startswith("user+pid"), r.stdout
    # the shell reads its own pid from /proc/self/stat: equal to $$ only in its namespace's own /proc
    r = subprocess.run([*drop, py, "-I", "-S", str(init), "--how", how, "--", "sh", "-c",
                        "id -u; read pid rest < /proc/self/stat; [ \"$pid\" = \"$$\" ] && echo own || echo host"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["65534", "own" if how.endswith("+proc") else "host"], \
        r.stdout + r.stderr


def test_every_child_is_counted_by_its_containment_for_the_record():
    """What every gate's ``contained`` field holds: one typed entry per distinct containment,
    with how many children had it; ``reset_contained`` (a gate run's start) clears it."""
    childproc.reset_contained()
    assert childproc.contained_summary() == []
    for namespace in (False, False, True):
        assert childproc.run_child(["true"], timeout_s=30, want_record=False, namespace=namespace).rc == 0
    got = {e["processes"]: e for e in childproc.contained_summary()}
    for e in got.values():
        assert {k: type(v) for k, v in e.items()} == childproc.CONTAINMENT_FIELDS, e
    how = childproc.containment()[0]
    assert got["sweep"]["children"] == (2 if how else 3) and got["sweep"]["why"].endswith("(asked)") is bool(how)
    if how:
        assert got[how]["children"] == 1 and got[how]["why"] == ""
    assert got["sweep"]["seccomp"] == "not asked" and got["sweep"]["landlock_abi"] == 0
    childproc.reset_contained()
    assert childproc.contained_summary() == []
