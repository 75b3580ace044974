"""Warm starts (``fp4moe/infra/zygote.py``, ``childproc.Zygote``): a child forked from the zygote is,
to everything a verdict reads, the child a fresh interpreter would have been.

Each case runs one command both ways (``FP4MOE_WARM_START=0``: a fresh interpreter) and compares
what came back: the process as the child saw it (argv, sys.path, working folder, descriptors,
environment, signal dispositions, bytecode writing, its pid in the namespace), and the exit
status, stdout and stderr of the ways a child ends (exit codes, an uncaught exception's
traceback, death by a signal, KeyboardInterrupt, atexit, a non-daemon thread, unflushed output).
Then what must start cold, a zygote that is gone, and the zygote's own lifetime.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fp4moe.infra import childproc

pytestmark = pytest.mark.reliability

HOW, WHY = childproc.containment()
needs_ns = pytest.mark.skipif(HOW is None, reason=f"warm starts are for namespaced children only: {WHY}")

PROBE = r'''
import os, signal, sys, tempfile, warnings
from fp4moe.infra import childproc
write = childproc.record_writer()
env = {k: v for k, v in os.environ.items() if k not in ("FP4MOE_CHILD_TAG", "FP4MOE_CHILD_RESULT")}
sig = {n: str(signal.getsignal(getattr(signal, n))) for n in ("SIGINT", "SIGHUP", "SIGTERM", "SIGPIPE", "SIGCHLD")}
write({"argv": sys.argv, "path": sys.path, "cwd": os.getcwd(), "fds": sorted(os.listdir("/proc/self/fd")),
       "env": env, "signals": sig, "dont_write_bytecode": sys.dont_write_bytecode, "pid": os.getpid(),
       "own_group": os.getpgid(0) == os.getpid(), "name": __name__, "warnoptions": sys.warnoptions,
       # the filters -W options and the interpreter make (any message, any module, a built-in category);
       # the preloads add their own (numpy's RankWarning, torch's messages), there in a warm child from its start
       "option_filters": [(f[0], f[2].__name__) for f in warnings.filters
                          if f[1] is None and f[3] is None and f[2].__module__ == "builtins"],
       "tempdir": tempfile.gettempdir(), "tag_set": bool(os.environ.get("FP4MOE_CHILD_TAG")), "recursion": sys.getrecursionlimit(),
       "flags": list(sys.flags), "hash_randomized": sys.flags.hash_randomization})
'''


def _both(args, *, env=None, cwd=None, timeout_s=60.0, **kw):
    """(warm, cold) results of ``python ARGS``; the warm one must have been warm."""
    base = dict(os.environ if env is None else env)
    warm = childproc.run_python(args, env={**base, childproc.WARM_ENV: "1"}, cwd=cwd, timeout_s=timeout_s, **kw)
    cold = childproc.run_python(args, env={**base, childproc.WARM_ENV: "0"}, cwd=cwd, timeout_s=timeout_s, **kw)
    z = childproc._ZYGOTE
    assert warm.warm and not cold.warm, (warm.warm, cold.warm, childproc._ZYGOTE_WHY, z and sorted(set(childproc._import_env(base).items()) ^ set(z.import_env.items())))
    return warm, cold


@needs_ns
@pytest.mark.parametrize("lead", [[], ["-W", "ignore"], ["-W", "error::DeprecationWarning", "-W", "ignore::UserWarning"]],
                         ids=["plain", "W-ignore", "W-categories"])
def test_a_warm_child_sees_the_process_a_fresh_interpreter_sees(tmp_path, lead):
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))  # a folder of this run's own, as the zoo gives
    warm, cold = _both([*lead, "-c", PROBE, "one", "two words"], cwd=tmp_path, env=env)
    assert warm.rc == cold.rc == 0, (warm.tail, cold.tail)
    w, c = warm.record, cold.record
    w["env"].pop(childproc.WARM_ENV)
    c["env"].pop(childproc.WARM_ENV)
    assert w == c
    assert c["argv"] == ["-c", "one", "two words"] and c["cwd"] == str(tmp_path) and c["fds"] == ["0", "1", "2", "3"]
    assert c["tempdir"] == str(tmp_path / "tmp")
    assert c["tag_set"] and c["dont_write_bytecode"] and c["own_group"] and c["name"] == "__main__"


@needs_ns
def test_a_warm_module_run_is_python_dash_m(tmp_path):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    warm, cold = _both(["-m", "probe_mod", "x"], env=env, cwd=tmp_path)
    w, c = warm.record, cold.record
    for r in (w, c):
        r["env"].pop(childproc.WARM_ENV)
    assert w == c and c["argv"] == [str(tmp_path / "probe_mod.py"), "x"] and c["path"][0] == str(tmp_path)


ENDINGS = {
    "exit 3": "import sys; sys.exit(3)",
    "exit with a message": "import sys; sys.exit('bye now')",
    "uncaught exception": "def f():\n    raise ValueError('boom')\nf()",
    "killed by SIGTERM": "import os, signal; print('before', flush=True); os.kill(os.getpid(), signal.SIGTERM)",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "atexit": "import atexit; atexit.register(print, 'at exit'); print('body')",
    "unflushed output": "import sys; sys.stdout.write('no newline'); sys.stderr.write('err too')",
    "a non-daemon thread": "import threading, time\n"
                           "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()",
    "os._exit": "import os; print('lost', end=''); os._exit(5)",
}


@needs_ns
@pytest.mark.parametrize("code", ENDINGS.values(), ids=ENDINGS.keys())
def test_a_warm_child_ends_as_a_fresh_interpreter_does(code):
    warm, cold = _both(["-c", code], want_record=False)
    assert (warm.rc, warm.stdout, warm.stderr) == (cold.rc, cold.stdout, cold.stderr)


@needs_ns
def test_a_warm_script_and_its_traceback(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint(sys.argv, sys.path[0])\nraise RuntimeError('from a script')\n")
    warm, cold = _both([str(script), "arg"], want_record=False)
    assert (warm.rc, warm.stdout, warm.stderr) == (cold.rc, cold.stdout, cold.stderr)
    assert cold.rc == 1 and f"['{script}', 'arg'] {tmp_path}" in cold.stdout and "from a script" in cold.stderr


@needs_ns
def test_a_warm_child_is_cut_at_its_time_limit():
    t0 = time.monotonic()
    res = childproc.run_python(["-c", "import time; time.sleep(60)"], timeout_s=1.0, want_record=False,
                               env=dict(os.environ, **{childproc.WARM_ENV: "1"}))
    assert res.warm and res.timed_out and res.rc is None and time.monotonic() - t0 < 10


@needs_ns
def test_a_warm_worker_answers_like_a_cold_one():
    code = ("import json, sys\nfrom fp4moe.infra import childproc\n"
            "for line in sys.stdin:\n    childproc.worker_reply({'got': json.loads(line)['x'] * 2})\n")
    for flag in ("1", "0"):
        with childproc.Worker([sys.executable, "-c", code], name="w",
                              env=dict(os.environ, **{childproc.WARM_ENV: flag})) as w:
            assert getattr(w.proc, "warm", False) == (flag == "1")
            assert [w.request({"op": "x", "x": i}, timeout_s=30)["got"] for i in (1, 2)] == [2, 4]


def test_only_what_the_zygote_can_start_in_place_is_eligible():
    py = sys.executable
    assert childproc.warm_eligible([py, "-m", "x"]) and childproc.warm_eligible([py, "-c", "pass"])
    assert childproc.warm_eligible([py, "-W", "ignore", "-c", "pass"]) and childproc.warm_eligible([py, "s.py"])
    for cmd in ([py, "-I", "-c", "pass"], [py, "-u", "-c", "x"], [py], [py, "-m"], ["/other/python", "-c", "x"],
                ["sh", "-c", "true"], [py, "-W", "ignore"]):
        assert not childproc.warm_eligible(cmd), cmd


@needs_ns
@pytest.mark.parametrize("change", ["OMP_NUM_THREADS", "PYTHONHASHSEED", "no namespace", "torch on PYTHONPATH"])
def test_a_child_the_zygote_cannot_stand_for_starts_cold(change, tmp_path):
    env = dict(os.environ, **{childproc.WARM_ENV: "1"})
    kw = {}
    if change == "no namespace":
        kw["namespace"] = False
    elif change == "torch on PYTHONPATH":
        (tmp_path / "torch").mkdir()
        env["PYTHONPATH"] = str(tmp_path)
    else:
        env[change] = "7" if env.get(change) != "7" else "8"
    assert childproc.run_python(["-c", "pass"], env=dict(os.environ, **{childproc.WARM_ENV: "1"}),
                                timeout_s=60, want_record=False).warm  # the zygote is up
    res = childproc.run_python(["-c", "print('ran')"], env=env, timeout_s=60, want_record=False, **kw)
    assert not res.warm and res.rc == 0 and res.stdout == "ran\n"


@needs_ns
def test_a_killed_zygote_means_cold_starts_not_lost_children():
    env = dict(os.environ, **{childproc.WARM_ENV: "1"})
    assert childproc.run_python(["-c", "pass"], env=env, timeout_s=60, want_record=False).warm
    z = childproc._ZYGOTE
    os.killpg(z.proc.pid, signal.SIGKILL)
    z.proc.wait(10)
    res = childproc.run_python(["-c", "print('still runs')"], env=env, timeout_s=60, want_record=False)
    assert not res.warm and res.rc == 0 and res.stdout == "still runs\n"
    childproc.stop_zygote()
    assert childproc.run_python(["-c", "pass"], env=env, timeout_s=60, want_record=False).warm  # a new one


@needs_ns
def test_the_zygote_holds_no_run_secret_and_dies_with_its_owner(tmp_path):
    owner = (
        "import os, sys\nfrom fp4moe.infra import childproc\n"
        "r = childproc.run_python(['-c', 'pass'], timeout_s=60, want_record=True)\n"
        "print(childproc._ZYGOTE.proc.pid, r.warm, flush=True)\nos._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", owner], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, **{childproc.WARM_ENV: "1"}), check=True).stdout.split()
    zpid, warm = int(out[0]), out[1] == "True"
    assert warm
    t0 = time.monotonic()
    while os.path.exists(f"/proc/{zpid}") and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{zpid}"), "the zygote outlived its owner"
    z = childproc.warm_zygote(dict(os.environ))
    with open(f"/proc/{z.proc.pid}/environ", "rb") as f:
        names = {e.split(b"=", 1)[0].decode() for e in f.read().split(b"\0") if e}
    assert not names & {childproc.TAG_ENV, childproc.RESULT_ENV, childproc.KEY_FD_ENV, childproc.Worker.FD_ENV}
    # no pipe or socket of this process (a child's output, a key pipe) is open in the zygote
    def targets(pid):
        found = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except FileNotFoundError:  # the listing's own descriptor, closed since
                pass
        return found
    shared = {t for t in targets(z.proc.pid) & targets(os.getpid()) if t.startswith(("pipe:", "socket:"))}
    assert not shared, shared


@needs_ns
def test_a_zygote_started_from_a_thread_outlives_the_thread():
    """The suite starts its first children from a background thread (``EARLY_CHILDREN``): the
    zygote that thread started must still answer once the thread is gone."""
    import threading

    env = dict(os.environ, **{childproc.WARM_ENV: "1"})
    childproc.stop_zygote()
    got = []
    t = threading.Thread(target=lambda: got.append(childproc.run_python(["-c", "pass"], env=env, timeout_s=60,
                                                                        want_record=False).warm))
    t.start()
    t.join()
    time.sleep(0.2)
    res = childproc.run_python(["-c", "print('after')"], env=env, timeout_s=60, want_record=False)
    assert got == [True] and res.warm and res.stdout == "after\n"


def test_the_zygotes_own_constants_are_childprocs():
    """``zygote.py`` is run by path and imports nothing of the package: its names for the marker
    and the room variable are copies, held equal here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_zygote_consts", childproc.ZYGOTE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (mod.TAG_ENV, mod.ROOM_ENV) == (childproc.TAG_ENV, childproc.ZYGOTE_ROOM_ENV)


@needs_ns
def test_a_zygote_that_cannot_start_means_cold_starts_and_says_why(monkeypatch):
    monkeypatch.setattr(childproc, "WARM_PRELOAD", ("fp4moe_no_such_module",))
    childproc.stop_zygote()
    monkeypatch.setattr(childproc, "_ZYGOTE_WHY", "")
    res = childproc.run_python(["-c", "print('cold')"], env=dict(os.environ, **{childproc.WARM_ENV: "1"}),
                               timeout_s=60, want_record=False)
    assert not res.warm and res.rc == 0 and res.stdout == "cold\n"
    assert childproc._ZYGOTE is None and "fp4moe_no_such_module" in childproc._ZYGOTE_WHY, childproc._ZYGOTE_WHY
