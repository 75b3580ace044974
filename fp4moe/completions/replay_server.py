"""A scripted OpenAI-compatible completions server for testing the GSM8K gate without a model.

It serves ``POST /v1/completions`` and ``GET /v1/models`` on loopback (stdlib
``ThreadingHTTPServer`` in a daemon thread, port 0 = any free port). For each prompt it finds
the last ``Question: ...\\nAnswer:`` block (the GSM8K prompt format; earlier blocks are the
few-shot examples) and answers with the text the script holds for that question, cut at the
request's stop strings as a real server would. A question missing from the script is an HTTP
404, so a script/data mismatch is loud.

Failure modes, for the gate's could-not-run paths: ``garbage`` (200 with a body that is not
JSON), ``http500``, ``sleep`` (answer after ``sleep_s`` seconds: for client timeouts),
``null_text`` (well-formed JSON whose ``choices[].text`` is null), ``no_choices`` (JSON
without ``choices``), ``endless500`` (HTTP 500 whose body never ends: 64 KiB writes until the
client leaves; ``endless_bytes`` counts what was sent).

Responses for scripts (``worked_*`` helpers): the reference solution itself (correct under
both lm-eval filters), the solution with its final answer replaced by a wrong number (wrong
under both), or the solution with the ``#### N`` line rewritten as prose "The answer is N."
(strict-match finds nothing, flexible-extract finds N: correct only under flexible).

Run standalone: ``python -m fp4moe.completions.replay_server --data test.jsonl --correct 0.9``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODES = ("normal", "garbage", "http500", "sleep", "null_text", "no_choices", "endless500")


def final_answer(worked: str) -> str:
    """``'...\\n#### 1,200'`` -> ``'1,200'``."""
    return worked.rsplit("#### ", 1)[1].strip()


def worked_correct(worked: str) -> str:
    return " " + worked


def worked_wrong(worked: str) -> str:
    """The same solution with a final answer that is off by 1 (GSM8K answers are integers)."""
    head = worked.rsplit("#### ", 1)[0]
    wrong = int(final_answer(worked).replace(",", "")) + 1
    return f" {head}#### {wrong}"


def worked_unformatted(worked: str) -> str:
    """Right number, but not in the ``#### N`` form: only flexible-extract accepts it."""
    head = worked.rsplit("#### ", 1)[0]
    return f" {head}The answer is {final_answer(worked).replace(',', '')}."


def question_of(prompt: str) -> str:
    """The question of the last ``Question: ...\\nAnswer:`` block of a GSM8K prompt."""
    _, sep, tail = prompt.rpartition("Question: ")
    if not sep:
        raise KeyError("prompt has no 'Question: ' block")
    question, sep, _ = tail.rpartition("\nAnswer:")
    if not sep:
        raise KeyError("prompt's last question has no '\\nAnswer:'")
    return question


def _cut_at_stop(text: str, stop) -> str:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


class _QuietHTTPServer(ThreadingHTTPServer):
    """Records handler errors instead of printing tracebacks.

    A client that times out or drops a keep-alive connection makes the handler thread raise;
    socketserver would print the traceback from that thread, and CPython 3.11's traceback
    formatting parses source with ``ast`` - racing any ``ast.parse`` on the main thread
    (pytest's assertion rewriting) into "SystemError: AST constructor recursion depth mismatch".
    """

    daemon_threads = True
    block_on_close = False  # a sleeping handler must not hold up stop()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handler_errors: list[str] = []

    def handle_error(self, request, client_address):
        import sys

        e = sys.exc_info()[1]
        self.handler_errors.append(f"{type(e).__name__}: {e}")


class ReplayServer:
    """``with ReplayServer(script) as srv: srv.base_url`` -> ``http://127.0.0.1:PORT``."""

    def __init__(
        self,
        script: Mapping[str, str],
        *,
        mode: str = "normal",
        sleep_s: float = 0.0,
        model_name: str = "replay-gsm8k",
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.script = dict(script)
        self.mode = mode
        self.sleep_s = sleep_s
        self.model_name = model_name
        self.completion_requests = 0
        self.endless_bytes = 0  # the endless500 mode: bytes sent before the client left
        self._lock = threading.Lock()
        self._httpd = _QuietHTTPServer((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "ReplayServer":
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="gsm8k-replay", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ReplayServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _complete(self, body: dict) -> tuple[int, dict]:
        prompts = body.get("prompt")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            return 400, {"error": {"message": "prompt must be a string or a list of strings"}}
        choices = []
        for i, prompt in enumerate(prompts):
            try:
                text = self.script[question_of(prompt)]
            except KeyError as e:
                return 404, {"error": {"message": f"replay script has no answer for this prompt ({e})"}}
            text = None if self.mode == "null_text" else _cut_at_stop(text, body.get("stop"))
            choices.append({"index": i, "text": text, "finish_reason": "stop", "logprobs": None})
        if self.mode == "no_choices":
            return 200, {"id": "replay", "object": "text_completion", "result": [c["text"] for c in choices]}
        return 200, {"id": "replay", "object": "text_completion", "model": self.model_name, "choices": choices}

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, payload: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    data = {"object": "list", "data": [{"id": server.model_name, "object": "model"}]}
                    self._send(200, json.dumps(data).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/completions":
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                with server._lock:
                    server.completion_requests += 1
                if server.mode == "http500":
                    self._send(500, b'{"error": {"message": "replay server: scripted internal error"}}')
                    return
                if server.mode == "endless500":
                    self.send_response(500)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    try:
                        while True:  # until the client leaves
                            self.wfile.write(b"y" * (1 << 16))
                            with server._lock:
                                server.endless_bytes += 1 << 16
                    except OSError:
                        self.close_connection = True
                    return
                if server.mode == "garbage":
                    self._send(200, b"<html>\x00not json at all", ctype="text/html")
                    return
                if server.mode == "sleep":
                    time.sleep(server.sleep_s)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, b'{"error": {"message": "request body is not JSON"}}')
                    return
                status, data = server._complete(body)
                self._send(status, json.dumps(data).encode())

        return Handler


def seeded_script(records: list[dict], kinds: list[str]) -> dict[str, str]:
    """Script from per-question kinds: 'correct', 'wrong' or 'unformatted' (see module doc)."""
    make = {"correct": worked_correct, "wrong": worked_wrong, "unformatted": worked_unformatted}
    if len(kinds) != len(records):
        raise ValueError(f"kinds has {len(kinds)} entries for {len(records)} records")
    return {r["question"]: make[k](r["answer"]) for r, k in zip(records, kinds)}


def load_records(path: str | Path) -> list[dict]:
    from fp4moe.infra.files import read_regular_bytes

    text = read_regular_bytes(path, limit=64 << 20).decode("utf-8")  # never a FIFO, never without end
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def main(argv: list[str] | None = None) -> int:
    """Serve a seeded script over a GSM8K test file until interrupted."""
    import numpy as np

    from fp4moe.infra.oneline_parser import OneLineParser

    p = OneLineParser(prog="replay_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="GSM8K test.jsonl")
    p.add_argument("--correct", type=float, default=0.9, help="fraction answered correctly (default 0.9)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--mode", choices=MODES, default="normal")
    args = p.parse_args(argv)
    if not 0.0 <= args.correct <= 1.0:
        p.error(f"--correct {args.correct}: must be a fraction in [0, 1]")
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port}: must be 0 (any free port) .. 65535")
    try:
        records = load_records(args.data)
        if not records or not all(isinstance(r, dict) and isinstance(r.get("answer"), str) and "#### " in r["answer"]
                                  and isinstance(r.get("question"), str) for r in records):
            raise ValueError("not GSM8K records (each line: {'question': ..., 'answer': '... #### N'})")
    except (OSError, ValueError) as e:
        p.error(f"--data {args.data}: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
    rng = np.random.default_rng(args.seed)
    n_correct = round(args.correct * len(records))
    correct = set(rng.choice(len(records), size=n_correct, replace=False).tolist())
    script = seeded_script(records, ["correct" if i in correct else "wrong" for i in range(len(records))])
    try:
        srv = ReplayServer(script, mode=args.mode, port=args.port)
    except OSError as e:
        p.error(f"--port {args.port}: cannot listen: {e.strerror or e}")
    with srv:
        print(f"{srv.base_url} serving {len(records)} questions, {n_correct} correct "
              f"({n_correct / len(records):.6f})", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
