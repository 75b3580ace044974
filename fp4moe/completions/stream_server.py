"""A loopback OpenAI-compatible *streaming* completions server with a scripted speed.

The sibling of :mod:`fp4moe.completions.replay_server` (which scripts answers, not timing): this
one scripts how fast tokens come, so that the serving gate (:mod:`fp4moe.gates.serve_bench`) can be
tested and its error rates studied without a GPU or a model. It serves ``POST /v1/completions``
(``stream`` true or false) and ``GET /v1/models`` on 127.0.0.1 with ``aiohttp.web``, in a
daemon thread with its own event loop (``StreamServer``) or as a process
(``python -m fp4moe.completions.stream_server``).

Timing model, a continuous-batching engine reduced to what a client can observe:

* prefill: a request waits ``prefill_s`` x noise, then emits its first token (requests
  prefill concurrently);
* decode: ONE engine loop per server emits one token to every active sequence per step, so the
  sequences of a batch share their step times (as on a real server). Step time =
  ``per_token_s * (1 + per_seq_frac * (active - 1))`` x noise x drift. Step deadlines are
  absolute, so the event loop's timer granularity (1 ms: epoll) does not accumulate into the
  measured time per output token;
* noise (``Jitter``): lognormal per step (``sigma``); with probability ``stall_p`` a step also
  stalls for U(``stall_lo``, ``stall_hi``) steps (another tenant, a GC pause); ``drift_amp``
  scales everything by ``1 + amp * sin(2 pi t / period)`` of the *wall clock*, which every
  server on the machine shares - the slow drift of a shared runner that interleaving base and
  head must cancel.

Faults (the gate's could-not-run paths): ``cut`` (the connection is closed after
``fault_after`` tokens, mid-stream), ``http500``, ``stall`` (stops sending after
``fault_after`` tokens and holds the connection open), ``short`` (does not honour
``ignore_eos``: stops at a seeded "EOS" before ``max_tokens``), ``no_usage`` (never reports
``usage``), ``endless500`` (HTTP 500 whose body never ends: 64 KiB chunks until the client
leaves), ``endless_line`` (a 200 event stream whose first line never ends), ``raw_text`` (HTTP
500 whose body is a terminal escape and a fake verdict: ``\x1b[2J ... exit 0``). Token counting: a token-id prompt counts its ids, a text prompt one token per
whitespace-separated word.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field

from aiohttp import web

#: the ``raw_text`` fault's body: what must reach the gate's one line escaped, never raw
RAW_TEXT = b"\x1b[2J\rserve-bench: pass, exit 0\n"
FAULTS = ("none", "cut", "http500", "stall", "short", "no_usage", "endless500", "endless_line", "raw_text")


@dataclass(frozen=True)
class Jitter:
    """Multiplicative step noise; all zeros is a quiet machine."""

    sigma: float = 0.0  # lognormal sigma of each step
    stall_p: float = 0.0  # probability that a step stalls
    stall_lo: float = 5.0  # stall length, in steps
    stall_hi: float = 20.0
    drift_amp: float = 0.0  # common slow drift, fraction
    drift_period_s: float = 20.0


#: What the serving study calls a shared runner: 5% per-step noise, one stall of 5-20 steps per
#: 500 steps, +-2% drift with a 60 s period (see docs/serving-perf.md); the loaded host adds its own.
SHARED_RUNNER = Jitter(sigma=0.05, stall_p=0.002, stall_lo=5.0, stall_hi=20.0, drift_amp=0.02, drift_period_s=60.0)


@dataclass(frozen=True)
class Profile:
    prefill_s: float = 0.005
    per_token_s: float = 0.001
    per_seq_frac: float = 0.0  # extra step time per active sequence beyond the first
    jitter: Jitter = field(default_factory=Jitter)
    fault: str = "none"
    fault_after: int = 3  # tokens sent before a cut / stall
    seed: int = 0
    model_name: str = "stream-replay"

    def __post_init__(self):
        if self.fault not in FAULTS:
            raise ValueError(f"fault {self.fault!r} is not one of {FAULTS}")
        if self.per_token_s <= 0 or self.prefill_s < 0:
            raise ValueError(f"per_token_s must be > 0 and prefill_s >= 0 (got {self.per_token_s}, {self.prefill_s})")


class _Seq:
    __slots__ = ("remaining", "queue")

    def __init__(self, n: int):
        self.remaining = n
        self.queue: asyncio.Queue = asyncio.Queue()


class _Engine:
    """The decode loop: one step for all active sequences, absolute deadlines."""

    def __init__(self, profile: Profile):
        self.p = profile
        self.rng = random.Random(profile.seed)
        self.active: list[_Seq] = []
        self.wake = asyncio.Event()
        self.steps = 0

    def noise(self) -> float:
        j = self.p.jitter
        f = math.exp(self.rng.gauss(0.0, j.sigma)) if j.sigma > 0 else 1.0
        if j.stall_p > 0 and self.rng.random() < j.stall_p:
            f += self.rng.uniform(j.stall_lo, j.stall_hi)
        if j.drift_amp:
            f *= 1.0 + j.drift_amp * math.sin(2 * math.pi * time.time() / j.drift_period_s)
        return f

    def step_seconds(self) -> float:
        return self.p.per_token_s * (1.0 + self.p.per_seq_frac * (len(self.active) - 1)) * self.noise()

    def join(self, seq: _Seq) -> None:
        self.active.append(seq)
        self.wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
            deadline += self.step_seconds()
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            self.steps += 1
            for seq in list(self.active):
                seq.remaining -= 1
                seq.queue.put_nowait(seq.remaining)
                if seq.remaining <= 0:
                    self.active.remove(seq)


def _prompt_tokens(prompt) -> int:
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, str):
        return len(prompt.split())
    raise ValueError("prompt must be one string or one list of token ids")


def _eos_position(prompt, max_tokens: int) -> int:
    """Where the scripted 'EOS' falls for a server that ignores ignore_eos: seeded by the prompt."""
    h = zlib.crc32(json.dumps(prompt).encode())
    return 1 + h % max(1, max_tokens - 1)


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class StreamServer:
    """``with StreamServer(Profile(per_token_s=0.002)) as srv: srv.base_url``."""

    def __init__(self, profile: Profile | None = None, *, host: str = "127.0.0.1", port: int = 0):
        self.profile = profile or Profile()
        self.host, self.port = host, port
        self.requests = 0
        self.endless_bytes = 0  # bytes of an endless body sent (the endless faults): the client stopped reading
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._sock: socket.socket | None = None
        self._twins: list[StreamServer] = []
        self._parent: StreamServer | None = None

    def twin(self, profile: Profile) -> "StreamServer":
        """Another endpoint (own port, profile and engine) served by THIS server's thread and
        event loop; call before :meth:`start`. Two twins share everything the host does to them
        (thread scheduling, GIL, core placement), so an A/A pair of twins is exactly A/A; two
        separate servers are not (each thread lands on its own core, a small "slot" bias that a
        2% TTFT threshold sees on loopback). The study uses twins."""
        if self._thread is not None:
            raise RuntimeError("twin() must be called before start()")
        t = StreamServer(profile, host=self.host)
        t._bind()
        t._parent = self
        self._twins.append(t)
        return t

    # ---------------------------------------------------------------- lifecycle
    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def _bind(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, self.port))

    def start(self) -> "StreamServer":
        if self._parent is not None:
            return self  # served by its parent's thread
        self._bind()
        self._thread = threading.Thread(target=self._thread_main, name="stream-server", daemon=True)
        self._thread.start()
        if not self._started.wait(10.0) or self._error:
            raise RuntimeError(f"stream server did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._parent is None and self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(5.0)

    def __enter__(self) -> "StreamServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _thread_main(self) -> None:
        try:
            asyncio.run(self.serve())
        except BaseException as e:  # noqa: BLE001 -- reported through start()
            self._error = e
            self._started.set()

    async def serve(self) -> None:
        """Serve until :meth:`stop` (or forever, in a process)."""
        if self._sock is None:
            self._bind()
        self._stop = asyncio.Event()
        opened = [await ep._open() for ep in (self, *self._twins)]
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            for engine_task, runner in opened:
                engine_task.cancel()
                await runner.cleanup()

    async def _open(self):
        self._loop = asyncio.get_running_loop()
        self._engine = _Engine(self.profile)
        engine_task = asyncio.create_task(self._engine.run())
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        await web.SockSite(runner, self._sock).start()
        return engine_task, runner

    # ---------------------------------------------------------------- handlers
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.profile.model_name, "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        p = self.profile
        self.requests += 1
        if p.fault == "http500":
            return web.json_response({"error": {"message": "stream server: scripted internal error"}}, status=500)
        if p.fault == "raw_text":
            return web.Response(body=RAW_TEXT, status=500)
        if p.fault in ("endless500", "endless_line"):
            resp = web.StreamResponse(status=500 if p.fault == "endless500" else 200,
                                      headers={"Content-Type": "text/event-stream"})
            try:
                await resp.prepare(request)
                head = b"data: " if p.fault == "endless_line" else b""
                await resp.write(head)
                while True:  # until the client leaves
                    await resp.write(b"x" * (1 << 16))
                    self.endless_bytes += 1 << 16
            except (ConnectionError, asyncio.CancelledError):
                pass
            return resp
        try:
            body = await request.json()
            prompt = body["prompt"]
            n_prompt = _prompt_tokens(prompt)
            max_tokens = int(body.get("max_tokens", 16))
            if max_tokens < 1:
                raise ValueError("max_tokens must be >= 1")
        except (ValueError, KeyError, TypeError) as e:
            return web.json_response({"error": {"message": f"bad request: {e}"}}, status=400)
        n_out = max_tokens
        if p.fault == "short" or not body.get("ignore_eos"):
            n_out = min(max_tokens, _eos_position(prompt, max_tokens))
        stream = bool(body.get("stream"))
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
        include_usage = p.fault != "no_usage" and (not stream or bool((body.get("stream_options") or {}).get("include_usage")))

        await asyncio.sleep(p.prefill_s * self._engine.noise())
        if not stream:
            seq = _Seq(n_out - 1)
            if n_out > 1:
                self._engine.join(seq)
                while await seq.queue.get() > 0:
                    pass
            out = {"id": "stream-replay", "object": "text_completion", "model": p.model_name,
                   "choices": [{"index": 0, "text": " tok" * n_out, "finish_reason": "length" if n_out == max_tokens else "stop"}]}
            if include_usage:
                out["usage"] = usage
            return web.json_response(out)

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            await self._stream_tokens(request, resp, n_out, max_tokens, usage if include_usage else None)
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away (it timed out, or the test is over)
        return resp

    async def _stream_tokens(self, request, resp, n_out: int, max_tokens: int, usage) -> None:
        p = self.profile

        def chunk(i: int) -> dict:
            last = i == n_out - 1
            reason = ("length" if n_out == max_tokens else "stop") if last else None
            return {"id": "stream-replay", "object": "text_completion", "model": p.model_name,
                    "choices": [{"index": 0, "text": " tok", "finish_reason": reason}]}

        await resp.write(_sse(chunk(0)))  # the first token comes out of prefill
        seq = _Seq(n_out - 1)
        if n_out > 1:
            self._engine.join(seq)
        for i in range(1, n_out):
            await seq.queue.get()
            if p.fault in ("cut", "stall") and i >= p.fault_after:
                if p.fault == "cut":
                    request.transport.close()  # no terminating chunk: the client sees a cut stream
                    return
                await asyncio.sleep(3600)  # hold the connection, send nothing
            await resp.write(_sse(chunk(i)))
        if usage is not None:
            await resp.write(_sse({"id": "stream-replay", "object": "text_completion", "model": p.model_name,
                                   "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Loopback streaming completions server with scripted timing.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--prefill-ms", type=float, default=5.0)
    ap.add_argument("--per-token-ms", type=float, default=1.0)
    ap.add_argument("--per-seq-frac", type=float, default=0.0)
    ap.add_argument("--jitter", choices=("none", "shared-runner"), default="none")
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--fault-after", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="stream-replay")
    a = ap.parse_args(argv)
    prof = Profile(prefill_s=a.prefill_ms / 1e3, per_token_s=a.per_token_ms / 1e3, per_seq_frac=a.per_seq_frac,
                   jitter=SHARED_RUNNER if a.jitter == "shared-runner" else Jitter(), fault=a.fault,
                   fault_after=a.fault_after, seed=a.seed, model_name=a.model)
    srv = StreamServer(prof, port=a.port)
    srv._bind()
    print(srv.base_url, flush=True)
    try:
        asyncio.run(srv.serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
