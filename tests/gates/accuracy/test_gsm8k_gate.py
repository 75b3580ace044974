"""``fp4moe-gate gsm8k`` end to end without a model: real lm-eval, real HTTP, a scripted server.

The replay server (fp4moe.completions.replay_server) answers each question from a seeded script:
the reference worked solution (correct under both filters), the solution with a wrong final
number (wrong under both), or the right number written as prose without "#### " (correct only
under flexible-extract). The tests compute the expected scores from their own script:
strict = correct / n exactly, flexible = (correct + unformatted) / n exactly.

Every test here runs with outbound network blocked except loopback, and HF_HUB_OFFLINE=1; the gate
runs against replay servers all happen in one background child (``gsm8k_runs_child.py``, same guard).
"""

import builtins
import importlib.util
import json
import socket
from pathlib import Path

import numpy as np
import pytest

from fp4moe.commands.main import main
from fp4moe.completions.data import MINI_DATA_DIR
from fp4moe.completions.replay_server import load_records

LIMIT = 30  # questions scored per run: enough for distinct fractions, ~1 s of lm-eval
RECORDS = load_records(MINI_DATA_DIR / "test.jsonl")
SEED = 20240607


def _kinds(seed=SEED):
    rng = np.random.default_rng(seed)
    return rng.choice(["correct", "wrong", "unformatted"], size=len(RECORDS), p=[0.6, 0.25, 0.15]).tolist()


KINDS = _kinds()
N_CORRECT = KINDS[:LIMIT].count("correct")
N_UNFORMATTED = KINDS[:LIMIT].count("unformatted")


@pytest.fixture(autouse=True)
def no_network(monkeypatch, loopback_only):
    """Refuse any connection that is not to loopback (tests/conftest.py), and set the hub offline."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _gate(tmp_path, url, *extra):
    out = tmp_path / "gsm8k.json"
    argv = ["gsm8k", "--base-url", url, "--model", "replay-gsm8k", "--data-dir", str(MINI_DATA_DIR),
            "--concurrency", "8", "--json", str(out), *extra]
    rc = main(argv)
    return rc, (json.loads(out.read_text()) if out.exists() else None)


def test_lm_eval_missing_is_cannot_run(tmp_path, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_lm_eval(name, *args, **kwargs):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError(f"No module named {name!r} (simulated)")
        return real_import(name, *args, **kwargs)

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real_find_spec(name, *a))
    rc, payload = _gate(tmp_path, "http://127.0.0.1:9", "--threshold", "0.5")
    assert rc == 2
    assert "lm-eval is not installed" in capsys.readouterr().err and "[eval]" in payload["reason"]
    assert payload["status"] == "cannot-run"


def test_missing_reference_option_is_a_usage_error(tmp_path, capsys):
    rc, payload = _gate(tmp_path, "http://127.0.0.1:9")
    assert rc == 2 and payload["status"] == "cannot-run"  # an exit 2 always leaves its own record
    assert "--threshold X, --baseline X, or --model-key" in capsys.readouterr().err


requires_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None, reason="lm-eval not installed (pip install -e '.[eval]')"
)


STRICT, FLEXIBLE = N_CORRECT / LIMIT, (N_CORRECT + N_UNFORMATTED) / LIMIT
FLEXIBLE_SE = float(np.sqrt(FLEXIBLE * (1 - FLEXIBLE) / (LIMIT - 1)))
BROKEN = {  # server mode -> words the one line must hold
    "garbage": "lm-eval could not complete",
    "http500": "500",
    "no_choices": "lm-eval could not complete",
    "null_text": "null text for 3 question(s)",
    "sleep": "longer than --timeout",
}
#: run name -> (replay-server mode, the gate's options). Every run is a real ``fp4moe-gate gsm8k``
#: against a replay server; all of them in ONE child started when collection ends (a background
#: child, tests/conftest.py): lm-eval runs on the second core while the CPU tier runs on the first.
RUNS = {
    # threshold between the two scores: the flexible (deciding) score clears it
    "threshold": ("normal", ["--limit", str(LIMIT), "--threshold", str(STRICT)]),
    # decided on strict-match, a threshold one question above the score must fail
    "below": ("normal", ["--limit", str(LIMIT), "--filter", "strict-match", "--threshold", str((N_CORRECT + 1) / LIMIT)]),
    # 1.5 stderr below a baseline: pass at the default k=2, and the output states k
    "baseline": ("normal", ["--limit", str(LIMIT), "--baseline", str(FLEXIBLE + 1.5 * FLEXIBLE_SE)]),
    # one attempt, 1 s timeout: a broken server must end the run quickly and never pass
    **{f"broken-{mode}": (mode, ["--limit", "3", "--max-retries", "1", "--timeout", "1", "--threshold", "0.0"])
       for mode in BROKEN},
}
CHILD = Path(__file__).with_name("gsm8k_runs_child.py")


def _gate_runs(environ: dict) -> dict:
    from fp4moe.infra import runner

    env = dict(environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    res = runner.run_python(["-W", "ignore", str(CHILD), json.dumps(RUNS), json.dumps(KINDS)], timeout_s=300,
                               env=env)
    assert res.record is not None, res.why_no_record()
    return res.record


EARLY_CHILDREN = {"gate_runs": _gate_runs}
#: the xdist group of the tests that read ``gate_runs``: ``--dist loadgroup`` keeps them on one worker, where
#: the child runs once (spread over the slow step's three workers, each ran it: 3 x ~6 CPU s)
GATE_RUNS_GROUP = "gsm8k-gate-runs"


@pytest.fixture(scope="session")
def gate_runs(early):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-eval not installed (pip install -e '.[eval]')")
    return early("gate_runs", _gate_runs)


@pytest.mark.xdist_group(GATE_RUNS_GROUP)
@pytest.mark.slow
@requires_lm_eval
def test_score_is_the_scripted_fraction_and_threshold_passes(gate_runs):
    assert 0 < N_CORRECT < LIMIT and N_UNFORMATTED > 0  # the script exercises all three kinds
    run = gate_runs["threshold"]
    rc, out = run["rc"], run["json"]
    s = out["scores"]
    assert s["strict-match"]["n"] == LIMIT
    assert s["strict-match"]["exact_match"] == pytest.approx(STRICT, abs=1e-12)
    assert s["flexible-extract"]["exact_match"] == pytest.approx(FLEXIBLE, abs=1e-12)
    # lm-eval's stderr of a 0/1 mean: sqrt(p(1-p)/(n-1))
    assert s["strict-match"]["stderr"] == pytest.approx(np.sqrt(STRICT * (1 - STRICT) / (LIMIT - 1)), rel=1e-9)
    assert rc == 0 and out["status"] == "pass" and out["verdict"]["filter"] == "flexible-extract"
    assert f"exact_match[strict-match] = {STRICT:.4f}" in run["out"] and "GSM8K PASS" in run["out"]
    assert [r["strict-match"]["exact_match"] for r in run["samples"]] == [float(k == "correct") for k in KINDS[:LIMIT]]


@pytest.mark.xdist_group(GATE_RUNS_GROUP)
@pytest.mark.slow
@requires_lm_eval
def test_below_threshold_fails_with_exit_1(gate_runs):
    run = gate_runs["below"]
    assert run["rc"] == 1 and run["json"]["status"] == "regression"
    assert run["json"]["verdict"]["score"] == pytest.approx(STRICT, abs=1e-12)
    assert "GSM8K FAIL" in run["out"]


@pytest.mark.xdist_group(GATE_RUNS_GROUP)
@pytest.mark.slow
@requires_lm_eval
def test_baseline_rule_passes_within_k_stderr(gate_runs):
    run = gate_runs["baseline"]
    assert run["rc"] == 0 and run["json"]["verdict"]["rule"] == "baseline" and run["json"]["verdict"]["k_sigma"] == 2.0
    assert "k=2" in run["out"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@requires_lm_eval
def test_server_down_is_cannot_run(tmp_path, capsys):
    rc, out = _gate(tmp_path, f"http://127.0.0.1:{_free_port()}", "--threshold", "0.5")
    assert rc == 2 and out["status"] == "cannot-run"
    assert "not reachable" in capsys.readouterr().err


@pytest.mark.xdist_group(GATE_RUNS_GROUP)
@pytest.mark.slow
@requires_lm_eval
@pytest.mark.parametrize("mode", BROKEN)
def test_broken_server_is_cannot_run(gate_runs, mode):
    run = gate_runs[f"broken-{mode}"]
    assert run["rc"] == 2, run["err"]
    assert run["json"]["status"] == "cannot-run" and BROKEN[mode] in run["err"]


@pytest.mark.xdist_group(GATE_RUNS_GROUP)
@pytest.mark.slow
@requires_lm_eval
def test_completion_cap_is_applied_as_lm_eval_parses(gate_runs):
    """5 MB of text in one choice: lm-eval's parser (the gate's capped model) hands on 4096
    characters, counts the over-cap answer and remembers the longest (run in the child)."""
    cap = gate_runs["_completion_cap"]
    assert cap == {"lengths": [4096, 6], "over_cap": 1, "longest": 5_000_000}, cap
