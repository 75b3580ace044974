"""``fp4moe-gate serve-bench``: options that would quietly mean something else are refused with one line naming them, before any request (no server is needed:
the base URL points at a closed loopback port)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reliability

pytest.importorskip("aiohttp", reason="[cpu tier] serve-bench needs aiohttp (pip install -e '.[serve]')")

BASE = ["serve-bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--prompts", "random"]


@pytest.mark.parametrize("extra, words", [
    (["--input-len", "0"], ["--input-len 0"]),
    (["--input-len", "-5"], ["--input-len -5"]),
    (["--stall-timeout", "0"], ["--stall-timeout 0"]),
    (["--request-timeout", "-1"], ["--request-timeout -1"]),
    (["--connect-timeout", "inf"], ["--connect-timeout inf"]),
], ids=["input-len-0", "input-len-negative", "stall-timeout-0", "request-timeout-negative", "connect-timeout-inf"])
def test_options_are_refused_naming_themselves(gate, extra, words):
    """Probes: ``--input-len 0`` measured 1024-token prompts; ``--stall-timeout 0`` and
    ``--request-timeout -1`` were accepted."""
    gate(*BASE, *extra).cannot_run(*words)


def test_json_and_markdown_naming_one_file_is_refused(gate, tmp_path):
    """Regression: ``--json X --markdown X`` let one output overwrite the other."""
    out = tmp_path / "x"
    gate(*BASE, "--json", out, "--markdown", tmp_path / "." / "x").cannot_run("--json", "--markdown", "same file")
    assert not out.exists()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unserved_model_and_dead_head_is_one_line(gate, tmp_path):
    """Probe ``sb-head-dead``: the base server serves another model than ``--model`` and the
    head server is dead. The "--model is not among the served models" warning used to be its
    own stderr line before the exit-2 line; now it is folded into the one line (and the record)."""
    import json

    from fp4moe.completions.stream_server import Profile, StreamServer

    port, out = _closed_port(), tmp_path / "o.json"
    with StreamServer(Profile()) as b:
        r = gate("serve-bench", "--base-url", b.base_url, "--head-url", f"http://127.0.0.1:{port}", "--model", "m",
                 "--prompts", "random", "--input-len", "8", "--output-len", "4", "--json", out)
        assert b.requests == 0
    r.cannot_run(f"127.0.0.1:{port}", "not reachable", "--model 'm' is not among the base server's served models",
                 "stream-replay")
    assert "is not among" in json.loads(out.read_text())["reason"]


def test_unserved_model_warning_follows_a_verdict(gate):
    """Probe ``sb-head-dead``, the other side: when the gate goes on to measure, the unserved-model
    warning is printed after the results (exit 0 may say more than one line), not before."""
    from fp4moe.completions.stream_server import Profile, StreamServer

    with StreamServer(Profile(per_token_s=0.0002, prefill_s=0.0)) as b:
        r = gate("serve-bench", "--base-url", b.base_url, "--model", "m", "--prompts", "random", "--input-len", "8",
                 "--output-len", "2", "--concurrency", "1", "--batches", "2", "--warmup", "0")
    assert r.rc == 0, r.err
    assert r.lines()[-1] == "serve-bench: warning: --model 'm' is not among the base server's served models ['stream-replay']"
    assert "is not among" in r.out  # the tables' notes say it too
