"""``fp4moe-gate perf ab`` against hostile workers: each side imports
only its own checkout, a reply is cut at its deadline however it is written, a reply that is
not a time is no time, the design is bounded, and nothing the worker starts outlives the gate.

The checkouts are fake: ``fp4moe/__init__.py`` plus a ``fp4moe/gates/perf/child/ab_worker.py`` that
speaks the protocol with ``os.write`` (no torch, no fp4moe.infra in it: ~50 ms a worker), so
every case here is CPU-tier cheap; the real worker end to end is the slow test in
test_perf_ab.py.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.gates.perf import ab
from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.reliability

FAKE_WORKER = textwrap.dedent("""
    import json, os, sys, time
    fd = int(os.environ["FP4MOE_WORKER_FD"])
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    how = open(os.path.join(os.path.dirname(here), "HOW")).read().strip()
    def say(obj):
        os.write(fd, (json.dumps(obj) + "\\n").encode())
    loaded = sorted(os.path.abspath(m.__file__) for n, m in list(sys.modules.items())
                    if n.split(".")[0] == "fp4moe" and getattr(m, "__file__", None))
    if how == "outside":
        loaded.append("/elsewhere/fp4moe/infra/runner.py")
    for line in sys.stdin:
        op = json.loads(line)["op"]
        if op == "hello":
            if how == "silent-hello":
                time.sleep(300)
            if how == "daemon":
                import subprocess
                tag = open(os.path.join(os.path.dirname(here), "TAG")).read().strip()
                subprocess.Popen(["sleep", tag], start_new_session=True)  # returns once sleep is exec'd
            if how == "write-outside":
                for path in (os.path.join(os.path.dirname(here), "escaped"), os.path.join(os.environ["TMPDIR"], "inside")):
                    try:
                        open(path, "w").write("x")
                    except OSError:
                        pass
                    else:
                        os.write(2, ("wrote " + path + "\\n").encode())
            say({"fp4moe": here, "python": "x", "executable": sys.executable})
        elif op == "setup":
            say({"benchmarks": {"b": {"timer": "host", "shape": "s"}}, "available": ["b"], "loaded": loaded})
        elif op == "run":
            if how == "half-line":
                os.write(fd, b'{"seconds": 0.00')
                time.sleep(300)
            say({"seconds": True if how == "seconds-true" else 0.001})
        elif op == "quit":
            say({"bye": True, "loaded": loaded})
            break
""")


def _fake(root, how="ok"):
    (root / "fp4moe" / "gates" / "perf").mkdir(parents=True)
    (root / "fp4moe" / "__init__.py").write_text("")
    (root / "fp4moe" / "gates" / "__init__.py").write_text("")
    (root / "fp4moe" / "gates" / "perf" / "__init__.py").write_text("")
    (root / "fp4moe" / "gates" / "perf" / "child").mkdir(parents=True, exist_ok=True)
    (root / "fp4moe" / "gates" / "perf" / "child" / "ab_worker.py").write_text(FAKE_WORKER)
    (root / "HOW").write_text(how)
    (root / "TAG").write_text(unique_tag())  # the daemon's sleep argument
    return root


def _ab(gate, tmp_path, head_how, *extra):
    base, head = _fake(tmp_path / "base"), _fake(tmp_path / "head", head_how)
    t0 = time.monotonic()
    run = gate("perf", "ab", "--device", "cpu", "--base", base, "--head", head, "--first", "10", "--step", "10",
               "--max-rounds", "10", *extra)
    return run, time.monotonic() - t0


def test_a_clean_pair_of_fake_checkouts_passes(gate, tmp_path):
    """The control: the same fakes, well behaved, exit 0 (so the faults below are the faults)."""
    run, _ = _ab(gate, tmp_path, "ok")
    assert run.rc == 0, run.err


#: the limits the hanging cases are given: long enough that the well-behaved base side answers
#: every request within them on a loaded runner (its worker starts in a PID namespace), so the
#: run can only end on the head's fault; the deterministic 0.25 s cases are below
HANG_LIMIT_S = 5


@pytest.mark.parametrize("how, extra, words, within", [
    pytest.param("half-line", ["--timeout", str(HANG_LIMIT_S)],
                 ["head worker", "'run'", f"more than {HANG_LIMIT_S} s", "partial reply"], 60, marks=pytest.mark.slow),
    pytest.param("silent-hello", ["--setup-timeout", str(HANG_LIMIT_S)],
                 ["head worker", "'hello'", f"more than {HANG_LIMIT_S} s"], 60, marks=pytest.mark.slow),
    ("seconds-true", [], ["head worker", "seconds=True"], 30),
    ("outside", [], ["--head", "/elsewhere/fp4moe/infra/runner.py", "outside the checkout"], 30),
], ids=["half-line-then-sleep", "hello-never-answered", "seconds-true", "loaded-outside-its-checkout"])
def test_worker_faults_are_exit_2_within_the_limit(gate, tmp_path, how, extra, words, within):
    """Probes: half a reply line and a sleep was never cut (--timeout 5); the first request
    ignored --setup-timeout (hard-coded 900 s); ``{"seconds": true}`` was read as 1.0 s and
    reported a regression (exit 1)."""
    run, took = _ab(gate, tmp_path, how, *extra)
    run.cannot_run(*words)
    assert took < within, f"took {took:.1f} s"


def test_a_hello_never_answered_is_cut_at_the_setup_limit(tmp_path):
    """The same probe, deterministic: only the head's worker, asked ``hello`` with 0.25 s; it
    never answers, so the limit is what ends it (its start included: no race with the base)."""
    side = ab.resolve_side("head", str(_fake(tmp_path / "head", "silent-hello")))
    t0 = time.monotonic()
    with pytest.raises(ab.WorkerError, match=r"head worker .*request 'hello' took more than 0.25 s \(killed\)"):
        ab._start(side, 0.25, "cpu", tmp_path / "scratch")
    assert time.monotonic() - t0 < 15


def test_a_half_reply_is_cut_at_the_run_limit(tmp_path):
    """Half a ``run`` reply and a sleep, cut at 0.25 s: timed after the worker's hello and setup
    (its start is outside the limit), so only the limit ends it."""
    side = ab.resolve_side("head", str(_fake(tmp_path / "head", "half-line")))
    w, _ = ab._start(side, 120, "cpu", tmp_path / "scratch")
    try:
        w.request({"op": "setup", "device": "cpu", "patterns": []}, timeout_s=120)
        t0 = time.monotonic()
        with pytest.raises(ab.WorkerError, match=r"request 'run' took more than 0.25 s \(a partial reply"):
            w.request({"op": "run", "name": "b", "index": 0}, timeout_s=0.25)
        assert time.monotonic() - t0 < 15
    finally:
        w.close(kill=True)


def test_a_head_checkout_lacking_a_module_fails_instead_of_importing_the_gates_copy(tmp_path):
    """Regression: with ``fp4moe/infra/runner.py`` removed from the head checkout, its worker
    imported the module from the editable install of the gate and the run passed."""
    head = tmp_path / "head"
    shutil.copytree(REPO_ROOT / "fp4moe", head / "fp4moe", ignore=shutil.ignore_patterns("__pycache__"))
    (head / "fp4moe" / "infra" / "runner.py").unlink()
    side = ab.resolve_side("head", str(head))
    with pytest.raises(ab.WorkerError, match=r"died during request 'hello'.*(No module named 'fp4moe.infra.runner'|import name 'runner' from 'fp4moe.infra')"):
        ab._start(side, 30, "cpu", tmp_path / "scratch")


def test_a_checkout_worker_reports_only_files_of_its_own_checkout(tmp_path):
    side = ab.resolve_side("base", str(REPO_ROOT))
    w, hello = ab._start(side, 60, "cpu", tmp_path / "scratch")
    try:
        loaded = ab.check_loaded(side, w.request({"op": "quit"}, timeout_s=30))
    finally:
        w.close()
    assert loaded and all(f.startswith(str(REPO_ROOT.resolve()) + os.sep) for f in loaded)
    assert any(f.endswith(os.path.join("gates", "perf", "child", "ab_worker.py")) for f in loaded)


def test_a_daemon_the_worker_detaches_is_gone_when_the_gate_returns(gate, tmp_path):
    """Regression: a process started in its own session by the code under test outlived the gate."""
    run, _ = _ab(gate, tmp_path, "daemon")
    assert run.rc == 0, run.err  # so it started: a Popen that failed would have ended the worker (exit 2)
    tag = (tmp_path / "head" / "TAG").read_text()
    t0 = time.monotonic()
    while (left := live_with_arg(tag)) and time.monotonic() - t0 < 5:
        time.sleep(0.02)
    assert not left, f"daemon {left} outlived the gate"




@pytest.mark.parametrize("extra, words", [
    (["--max-rounds", "100000000", "--step", "1"], ["--max-rounds 100000000"]),
    (["--max-rounds", "5000", "--step", "1"], ["--max-rounds 5000 --step 1", "looks"]),
    (["--timeout", "0"], ["--timeout 0"]),
    (["--timeout", "inf"], ["--timeout inf"]),
    (["--setup-timeout", "-1"], ["--setup-timeout -1"]),
    (["--step", "0"], ["--step 0"]),
    (["--first", "0"], ["--first 0"]),
    (["--first", "20", "--max-rounds", "15"], ["--max-rounds 15", "--first 20"]),
], ids=["max-rounds-1e8", "too-many-looks", "timeout-0", "timeout-inf", "setup-timeout-negative", "step-0", "first-0",
        "max-rounds-below-first"])
def test_design_and_limits_are_bounded_and_named(gate, tmp_path, extra, words):
    """Probes: ``--max-rounds 1e8 --step 1`` ended in MemoryError; ``--timeout 0`` did not name
    the option; perf ab --first 0 said "first look: 0 rounds", not the option.
    Stale --json/--markdown/--plot are replaced or removed."""
    base, head = _fake(tmp_path / "base"), _fake(tmp_path / "head")
    out, md, png = tmp_path / "o.json", tmp_path / "o.md", tmp_path / "o.png"
    out.write_text('{"gate": "perf ab", "status": "pass"}')
    md.write_text("stale pass")
    png.write_bytes(b"stale")
    gate("perf", "ab", "--device", "cpu", "--base", base, "--head", head, *extra, "--json", out, "--markdown", md,
         "--plot", png).cannot_run(*words)
    assert json.loads(out.read_text())["status"] == "cannot-run" and "could not run" in md.read_text()
    assert not png.exists()
