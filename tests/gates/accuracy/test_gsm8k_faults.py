"""``fp4moe-gate gsm8k`` fails closed and in bounded time.

Defects shown gone here: ``--threshold``/``--baseline``/``--k-sigma`` were
range-checked only after the whole lm-eval run, and that path wrote no results JSON (an
earlier ``"status": "pass"`` stayed); answers that are not numbers were a model FAIL with
``z = inf`` (sign lost); multi-megabyte completions hung lm-eval's answer regex; with defaults
a server that accepts and never answers held the gate 30 minutes; two runs in one folder
overwrote one results file. Cases that run lm-eval against the loopback replay server are
``slow`` (1-30 s each); the option checks run in the CPU tier.
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest

from fp4moe.completions import endpoint
from fp4moe.completions.data import MINI_DATA_DIR
from fp4moe.completions.replay_server import ReplayServer, load_records
from fp4moe.gates.accuracy import gsm8k
from fp4moe.gates.accuracy.verdict import FilterScore, decide

pytestmark = pytest.mark.reliability  # a fault table: `pytest -m reliability` selects every one

RECORDS = load_records(MINI_DATA_DIR / "test.jsonl")
requires_lm_eval = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                                      reason="lm-eval not installed (pip install -e '.[eval]')")


def _argv(out, *extra, url="http://127.0.0.1:9"):
    return ["gsm8k", "--base-url", url, "--model", "replay-gsm8k", "--data-dir", MINI_DATA_DIR,
            "--json", out, *extra]


@pytest.fixture
def earlier_pass(tmp_path):
    """A results file an earlier, passing run left behind."""
    out = tmp_path / "gsm8k.json"
    out.write_text(json.dumps({"gate": "gsm8k", "status": "pass"}))
    return out


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--threshold", "1.5"], ["--threshold 1.5"]),
        (["--threshold", "-0.1"], ["--threshold -0.1"]),
        (["--threshold", "nan"], ["--threshold nan"]),
        (["--threshold", "1e400"], ["--threshold inf"]),
        (["--baseline", "2"], ["--baseline 2.0"]),
        (["--threshold", "0.9", "--k-sigma", "0"], ["--k-sigma 0.0"]),
        (["--baseline", "0.9", "--k-sigma=-inf"], ["--k-sigma -inf"]),
        (["--threshold", "0.9", "--limit", "0"], ["--limit"]),
        (["--threshold", "0.9", "--max-gen-toks", "0"], ["--max-gen-toks"]),
        (["--threshold", "0.9", "--deadline", "0"], ["--deadline"]),
        (["--threshold", "0.9", "--timeout", "-5"], ["--timeout"]),
        (["--threshold", "0.9", "--deadline", "1e12"], ["--deadline", "at most"]),
        (["--threshold", "0.9", "--max-gen-toks", "1000000000"], ["--max-gen-toks", "<= 65536"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_out_of_range_options_exit_2_before_lm_eval_and_replace_the_earlier_pass(gate, monkeypatch, earlier_pass,
                                                                                   extra, words):
    monkeypatch.setattr(gsm8k, "evaluate", lambda cfg: pytest.fail("lm-eval ran before the options were checked"))
    gate(*_argv(earlier_pass, *extra)).cannot_run(*words)
    record = json.loads(earlier_pass.read_text())
    assert record["status"] == "cannot-run" and words[0].split()[0] in record["reason"]


@pytest.mark.parametrize("extra", [["--limit", "8.9"], ["--threshold", "abc"], ["--num-fewshot", "x"]])
def test_unparseable_numbers_name_the_option(gate, tmp_path, extra):
    gate(*_argv(tmp_path / "o.json", *extra)).cannot_run(extra[0])


def test_non_utf8_data_file_names_the_file_and_line(gate, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    good = (MINI_DATA_DIR / "test.jsonl").read_bytes().splitlines(keepends=True)
    (data / "test.jsonl").write_bytes(b"".join(good[:2]) + b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    (data / "train.jsonl").write_bytes((MINI_DATA_DIR / "train.jsonl").read_bytes())
    out = tmp_path / "o.json"
    r = gate("gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9", "--data-dir", data,
             "--json", out, inputs=[data])
    r.cannot_run(f"{data / 'test.jsonl'}:3: not UTF-8 text")
    assert json.loads(out.read_text())["status"] == "cannot-run"


def test_unwritable_output_fails_before_any_work(gate, tmp_path, monkeypatch):
    monkeypatch.setattr(gsm8k, "evaluate", lambda cfg: pytest.fail("ran with an unwritable --output"))
    gate(*_argv(tmp_path / "missing" / "o.json", "--threshold", "0.9")).cannot_run("--json", "does not exist")


def test_no_results_file_where_none_was_asked_for(gate, tmp_path, monkeypatch):
    """Results only where --json names them: no file in the current folder, on a usage error
    or a failed run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gsm8k, "evaluate", lambda cfg: (_ for _ in ()).throw(gsm8k.GateCannotRun("server down")))
    gate("gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9").cannot_run("server down")
    gate("gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m").cannot_run("--threshold")
    assert list(tmp_path.iterdir()) == []


def test_zero_stderr_verdict_keeps_the_sign_of_z():
    v = decide(FilterScore("flexible-extract", 0.0, 0.0, 40), threshold=0.9)
    assert not v.passed and "z = -inf" in v.line()
    assert "z = +inf" in decide(FilterScore("flexible-extract", 1.0, 0.0, 40), threshold=0.9).line()


def test_default_limits_fail_a_stalled_server_in_minutes():
    """Stall at the start: preflight limit. Stall mid-run: timeout x retries (+ lm-eval's
    exponential back-off, at most 10 s per retry)."""
    cfg = gsm8k.RunConfig(base_url="http://127.0.0.1:9", model="m")
    assert endpoint.PREFLIGHT_TIMEOUT_S * 2 <= 60
    assert cfg.timeout_s * cfg.max_retries + 10 * cfg.max_retries <= 7 * 60
    assert 0 < cfg.deadline_s <= 2 * 3600


# (the completion cap applied as lm-eval parses: test_gsm8k_gate.py, in its background child)


# ------------------------------------------------------------------ against the replay server (slow)


def _script(text_of):
    return {r["question"]: text_of(r) for r in RECORDS}


@pytest.mark.slow
@requires_lm_eval
def test_answers_without_numbers_are_cannot_run_not_a_model_fail(gate, tmp_path, earlier_pass):
    with ReplayServer(_script(lambda r: " I would rather not say.")) as srv:
        r = gate(*_argv(earlier_pass, "--limit", "4", "--concurrency", "2", "--threshold", "0.5", url=srv.base_url))
    r.cannot_run("none of the 4 answers contains a number")
    assert json.loads(earlier_pass.read_text())["status"] == "cannot-run"


@pytest.mark.slow
@requires_lm_eval
def test_multi_megabyte_completions_are_cut_and_not_judged(gate, tmp_path):
    """5 MB per answer: past the body limit (``gsm8k.max_body_bytes``: ~1 MiB at 64 tokens) the
    response is not read further; lm-eval's regexes never see it; bounded time."""
    with ReplayServer(_script(lambda r: " 12 " + "9 " * 2_500_000)) as srv:
        t0 = time.perf_counter()
        r = gate(*_argv(tmp_path / "o.json", "--limit", "2", "--concurrency", "2", "--max-gen-toks", "64",
                        "--threshold", "0.5", url=srv.base_url))
        seconds = time.perf_counter() - t0
    r.cannot_run("a response body larger than", "ignores max_tokens")
    print(f"multi-MB completions: cannot-run after {seconds:.1f} s")


@pytest.mark.slow
@requires_lm_eval
@pytest.mark.parametrize("concurrency", ["1", "2"], ids=["requests", "aiohttp"])
def test_an_http_500_with_an_endless_body_is_cannot_run_read_bounded(gate, tmp_path, concurrency):
    """An HTTP 500 whose body never ends: lm-eval reads a failed response's text whole (4 GB
    before it was killed, in serve-bench's twin); the gate's client keeps its first KiB."""
    with ReplayServer(_script(lambda r: " 1"), mode="endless500") as srv:
        r = gate(*_argv(tmp_path / "o.json", "--limit", "2", "--concurrency", concurrency, "--max-retries", "1",
                        "--threshold", "0.5", url=srv.base_url))
        sent = srv.endless_bytes
    r.cannot_run("lm-eval could not complete the run", "500")
    assert sent < 256 << 20, f"the server sent {sent} bytes: the client kept reading"


@pytest.mark.slow
@requires_lm_eval
def test_server_that_never_answers_fails_in_the_preflight_with_default_limits(gate, tmp_path):
    """Defaults only (no --timeout): GET /v1/models answers, completions hang (60 s here);
    the 1-token preflight completion gives up after PREFLIGHT_TIMEOUT_S."""
    with ReplayServer(_script(lambda r: " 1"), mode="sleep", sleep_s=60) as srv:
        t0 = time.perf_counter()
        r = gate(*_argv(tmp_path / "o.json", "--threshold", "0.5", url=srv.base_url))
        seconds = time.perf_counter() - t0
    r.cannot_run("does not answer")
    assert seconds < endpoint.PREFLIGHT_TIMEOUT_S + 20


@pytest.mark.slow
@requires_lm_eval
def test_deadline_ends_a_slow_run(gate, tmp_path):
    with ReplayServer(_script(lambda r: " " + r["answer"]), mode="sleep", sleep_s=0.5) as srv:
        t0 = time.perf_counter()
        r = gate(*_argv(tmp_path / "o.json", "--limit", "20", "--concurrency", "1", "--timeout", "5",
                        "--deadline", "2", "--threshold", "0.5", url=srv.base_url))
        seconds = time.perf_counter() - t0
    r.cannot_run("exceeded --deadline 2 s")
    assert seconds < 2 + 10  # the preflight (0.5 s) + deadline + lm-eval's setup


# --------------------------------------------------------------------------- hostile inputs


def _models_server(body_gen):
    """A loopback HTTP server whose GET /v1/models streams ``body_gen()``'s chunks."""
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                for chunk in body_gen():
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return srv


@pytest.mark.parametrize("kind, words", [
    ("huge", "larger than"),
    ("trickle", "did not arrive within the time limit"),
], ids=["50MB-models-list", "1-byte-a-second"])
def test_models_precheck_is_bounded_in_size_and_time(kind, words):
    """Regression: the gsm8k pre-check read ``/v1/models`` without a size limit (and a trickling
    server held it past --timeout)."""
    import time

    from fp4moe.completions import endpoint
    from fp4moe.infra.errors import GateCannotRun

    def huge():
        for _ in range(50):
            yield b"x" * (1 << 20)

    def trickle():
        for _ in range(60):
            yield b" "
            time.sleep(0.05)

    srv = _models_server(huge if kind == "huge" else trickle)
    try:
        t0 = time.monotonic()
        with pytest.raises(GateCannotRun, match=words):
            endpoint.preflight(f"http://127.0.0.1:{srv.server_address[1]}", "m", timeout_s=0.3)
        assert time.monotonic() - t0 < 4
    finally:
        srv.shutdown()


@pytest.mark.slow
@requires_lm_eval
def test_exit_2_outside_a_git_checkout_is_one_line_on_the_real_stderr(tmp_path, gate_child):
    """gsm8k against a server answering null text, run from a folder that is not
    a git checkout, printed lm-eval's "fatal: not a git repository" (from its `git describe`)
    before the gate's one line: the file descriptor is silenced while lm-eval runs."""
    import os

    out = tmp_path / "o.json"
    cwd = tmp_path / "not-a-checkout"
    cwd.mkdir()
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
    with ReplayServer(_script(lambda r: " 1"), mode="null_text") as srv:
        r = gate_child(*_argv(out, "--limit", "3", "--threshold", "0.5", url=srv.base_url), timeout_s=120,
                       env=env, cwd=cwd)
    assert r.rc == 2 and "fatal" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert "null text" in r.err
