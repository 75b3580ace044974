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


# ---- bounded bodies, quoted text (issue #48 items 2 and 8) -----------------------------------

def _one_request(fault: str):
    """One streamed completion against a server with ``fault``: (the error, the bytes the
    server got to send before the client stopped reading, seconds)."""
    import asyncio
    import time

    from fp4moe.completions import client
    from fp4moe.completions.stream_server import Profile, StreamServer

    async def go(url):
        async with client.make_session(connect_timeout_s=5, stall_timeout_s=10, request_timeout_s=30, limit=1) as s:
            with pytest.raises(client.RequestFailed) as e:
                await client.stream_completion(s, url + "/v1/completions", client.completion_payload("m", "hi", 4))
            return str(e.value)

    with StreamServer(Profile(fault=fault)) as srv:
        t0 = time.monotonic()
        msg = asyncio.run(go(srv.base_url))
        seconds = time.monotonic() - t0
        time.sleep(0.05)
        sent = srv.endless_bytes
    return msg, sent, seconds


@pytest.mark.parametrize("fault, words", [
    ("endless500", ['HTTP 500: body "xxxx', '..."']),
    ("endless_line", ["a stream line longer than aiohttp reads"]),
], ids=["HTTP 500 with an endless body", "an event stream line without end"])
def test_an_endless_body_is_read_bounded(fault, words):
    """An HTTP 500 with an endless body grew serve-bench past 4 GB; now the client reads the
    error's first KiB (a stream line: aiohttp's line limit) and leaves."""
    msg, sent, seconds = _one_request(fault)
    assert all(w in msg for w in words), msg
    assert len(msg) < 400
    assert sent < 64 << 20, f"the server sent {sent} bytes: the client kept reading"
    assert seconds < 20  # a hang guard, not a speed target


def test_server_text_in_the_one_line_is_quoted_and_escaped(gate, tmp_path):
    """A server's body reached the exit-2 line raw: a terminal escape cleared the screen and
    a fake verdict line was printed as it came. Now it is labelled, quoted, escaped."""
    from fp4moe.completions.stream_server import Profile, StreamServer

    with StreamServer(Profile()) as b, StreamServer(Profile(fault="raw_text")) as h:
        r = gate("serve-bench", "--base-url", b.base_url, "--head-url", h.base_url, "--model", "stream-replay",
                 "--prompts", "random", "--input-len", "8", "--concurrency", "2", "--warmup", "1",
                 "--output-len", "4", "--batches", "10", "--json", tmp_path / "o.json")
    r.cannot_run('HTTP 500: body "\\x1b[2J serve-bench: pass, exit 0"', "head server")  # whitespace runs: one space
    assert "\x1b" not in r.err and "\r" not in r.err


def test_the_gsm8k_clients_read_bodies_bounded():
    """lm-eval reads its responses whole; the gsm8k gate's session and ``requests`` stand-in
    (``fp4moe.completions.bounded``) keep an error's first KiB and refuse a body past the limit."""
    import asyncio

    import aiohttp

    from fp4moe.completions import bounded
    from fp4moe.completions.stream_server import Profile, StreamServer

    async def post(url):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            async with bounded.CappedSession(s, 1 << 20).post(url, json={"prompt": "x", "stream": False}) as r:
                if not r.ok:
                    return r.status, await r.text()
                return r.status, await r.json()

    with StreamServer(Profile(fault="endless500")) as srv:
        status, text = asyncio.run(post(srv.base_url + "/v1/completions"))
        assert status == 500 and text == "x" * bounded.ERROR_PREFIX_BYTES
    with StreamServer(Profile(fault="endless_line")) as srv:
        with pytest.raises(bounded.BodyTooLarge, match=r"/v1/completions: a response body larger than 1048576 bytes"):
            asyncio.run(post(srv.base_url + "/v1/completions"))
        assert srv.endless_bytes < 64 << 20
    with StreamServer(Profile()) as srv:  # the control: a whole answer is read whole
        status, doc = asyncio.run(post(srv.base_url + "/v1/completions"))
        assert status == 200 and doc["choices"][0]["text"].startswith(" tok")

    requests = pytest.importorskip("requests", reason="[cpu tier] requests not installed (lm-eval brings it)")
    capped = bounded.CappedRequests(requests, 1 << 20)
    with StreamServer(Profile(fault="endless500")) as srv:
        r = capped.post(srv.base_url + "/v1/completions", json={"prompt": "x"}, timeout=30)
        assert r.status_code == 500 and r.text == "x" * bounded.ERROR_PREFIX_BYTES
    with StreamServer(Profile(fault="endless_line")) as srv:
        with pytest.raises(bounded.BodyTooLarge, match="larger than 1048576 bytes"):
            capped.post(srv.base_url + "/v1/completions", json={"prompt": "x"}, timeout=30)
    with StreamServer(Profile()) as srv:
        r = capped.post(srv.base_url + "/v1/completions", json={"prompt": "x y", "max_tokens": 3}, timeout=30)
        assert r.ok and r.json()["choices"][0]["text"].startswith(" tok")
