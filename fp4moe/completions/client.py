"""One streamed completion, timed the way serving benchmarks time it (aiohttp, asyncio).

Per request, on the client's monotonic clock (``time.perf_counter``):

* **TTFT** (time to first token): from just before the request is sent to the first SSE chunk
  whose ``choices[].text`` is not empty; it is prefill plus queueing.
* **E2E**: from the same start to the ``data: [DONE]`` line.
* **TPOT** (time per output token, decode): ``(E2E - TTFT) / (output_tokens - 1)``, with
  ``output_tokens`` the server's own count, ``usage.completion_tokens`` (requested through
  ``stream_options.include_usage``). Chunks are not tokens: SGLang's ``--stream-interval`` and
  the detokenizer send several tokens per chunk, so counting chunks would misstate TPOT.

The request asks for exactly ``max_tokens`` tokens with ``ignore_eos`` (an SGLang and vLLM
extension of the OpenAI API) and greedy decoding. Anything that is not a complete, well-formed
stream is :class:`RequestFailed` with one line: an HTTP status other than 200, a stream cut
before ``[DONE]`` (``aiohttp.ClientPayloadError``), no chunk for ``stall_timeout_s`` (a stalled
server), an ``error`` object in the stream, a chunk that is not JSON, a line longer than
aiohttp's line limit (128 KiB: a stream that never sends a newline), no text at all, or no
``usage`` (the output could not be counted). Bodies are read bounded: an error's text is its
first KiB (an HTTP 500 with an endless body is never read whole), a stream line by line, the
whole request within ``request_timeout_s``. Text of the server's in the one line is quoted, its
control characters escaped (``fp4moe.infra.files.quoted``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp is the `serve` extra: imported where a request is made, so the records and
    import aiohttp  # the judge work without it (fp4moe.commands.serve_bench says when it is missing)

from fp4moe.completions.bounded import read_prefix
from fp4moe.infra.files import quoted


class RequestFailed(Exception):
    """A request that produced no usable timing; the message is one line."""


@dataclass
class RequestRecord:
    ttft_s: float
    e2e_s: float
    output_tokens: int
    prompt_tokens: int
    chunks: int

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_dict(self) -> dict:
        return {**asdict(self), "tpot_s": self.tpot_s if self.output_tokens > 1 else None}


def completion_payload(model: str, prompt, output_len: int) -> dict:
    """The request body: greedy, exactly ``output_len`` tokens, usage in the stream."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def make_session(*, connect_timeout_s: float, stall_timeout_s: float, request_timeout_s: float, limit: int) -> aiohttp.ClientSession:
    """One session per server: a connection pool as large as the concurrency, and timeouts
    that bound every request (``sock_read`` is the stall detector)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=connect_timeout_s, sock_read=stall_timeout_s)
    return aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=max(1, limit), force_close=False))


def _parse_chunk(line: bytes):
    """``data: {...}`` -> dict; ``data: [DONE]`` -> None; other SSE lines -> ... (ignored)."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return ...
    data = line[5:].strip()
    if data == b"[DONE]":
        return None
    try:
        return json.loads(data)
    except ValueError:
        raise RequestFailed(f"a stream chunk is not JSON: {quoted('chunk', data, 120)}") from None


async def stream_completion(session: aiohttp.ClientSession, url: str, payload: dict) -> RequestRecord:
    """POST ``payload`` to ``url`` and time the stream. Raises :class:`RequestFailed`."""
    import aiohttp

    ttft = None
    usage = None
    chunks = 0
    done = False
    t0 = time.perf_counter()
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                text = (await read_prefix(resp.content)).decode("utf-8", "replace")
                raise RequestFailed(f"HTTP {resp.status}: {quoted('body', ' '.join(text.split()), 200)}")
            async for line in resp.content:
                obj = _parse_chunk(line)
                if obj is ...:
                    continue
                if obj is None:
                    done = True
                    break
                if not isinstance(obj, dict):
                    raise RequestFailed(f"a stream chunk is not a JSON object: {quoted('chunk', str(obj), 120)}")
                if "error" in obj:
                    raise RequestFailed(f"the server reported an error mid-stream: {quoted('error', str(obj['error']), 200)}")
                chunks += 1
                if ttft is None and any((c or {}).get("text") for c in obj.get("choices") or []):
                    ttft = time.perf_counter() - t0
                if obj.get("usage"):
                    usage = obj["usage"]
            e2e = time.perf_counter() - t0
    except RequestFailed:
        raise
    except aiohttp.ClientPayloadError as e:
        raise RequestFailed(f"stream cut mid-response after {chunks} chunk(s) ({type(e).__name__})") from None
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise RequestFailed(f"no data for the stall timeout after {chunks} chunk(s) (server stalled), "
                            f"or the request outlived the request timeout") from None
    except aiohttp.ClientError as e:
        raise RequestFailed(f"{type(e).__name__}: {quoted('message', ' '.join(str(e).split()), 200)}") from None
    except OSError as e:
        raise RequestFailed(f"{type(e).__name__}: {quoted('message', str(e), 200)}") from None
    except (ValueError, aiohttp.http_exceptions.HttpProcessingError) as e:  # a line past aiohttp's limit (LineTooLong)
        raise RequestFailed(f"a stream line longer than aiohttp reads ({' '.join(str(e).split())[:80]}) after "
                            f"{chunks} chunk(s): not a server-sent event stream") from None
    if not done:
        raise RequestFailed(f"the stream ended after {chunks} chunk(s) without 'data: [DONE]'")
    if ttft is None:
        raise RequestFailed("the stream carried no text")
    if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
        raise RequestFailed("the stream carried no usage.completion_tokens (the server ignored "
                            "stream_options.include_usage), so output tokens cannot be counted")
    return RequestRecord(ttft_s=ttft, e2e_s=e2e, output_tokens=int(usage["completion_tokens"]),
                         prompt_tokens=int(usage.get("prompt_tokens") or 0), chunks=chunks)
