"""HTTP bodies read with a bound: a server (or a proxy in front of it) that answers with an
endless body -- an HTTP 500 streaming its log, a JSON document that never closes -- must not
grow the gate's memory until the machine kills it. Every body the gates read is either cut to a
prefix (an error's text: :func:`read_prefix`, :data:`ERROR_PREFIX_BYTES`) or refused past a
size (:class:`BodyTooLarge`).

lm-eval reads its responses whole (``await response.text()``, ``response.json()``); the gsm8k
gate hands it a session (:class:`CappedSession`, aiohttp: concurrent requests) or a
``requests`` stand-in (:class:`CappedRequests`: ``--concurrency 1``) whose bodies are bounded
the same way. Time is bounded by the callers' timeouts (aiohttp's ``total``, the gate's
deadline).
"""

from __future__ import annotations

import json

#: bytes of an error response's body kept for the one line (the rest is never read)
ERROR_PREFIX_BYTES = 1024
_CHUNK = 1 << 16


class BodyTooLarge(Exception):
    """A response body longer than the caller's limit (one line, naming the URL)."""


async def read_prefix(content, n: int = ERROR_PREFIX_BYTES) -> bytes:
    """At most ``n`` bytes of an aiohttp body (``response.content``); never more are read."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await content.read(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


async def read_capped(content, limit: int, url) -> bytes:
    """The whole aiohttp body, or :class:`BodyTooLarge` once more than ``limit`` bytes came."""
    buf = bytearray()
    while True:
        chunk = await content.read(_CHUNK)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise BodyTooLarge(f"{url}: a response body larger than {limit} bytes (the server ignores "
                               "max_tokens, or sends without end): not read further")


class CappedResponse:
    """An aiohttp response whose ``read``/``text``/``json`` read at most ``limit`` bytes; the
    text of a response that is not OK is its first :data:`ERROR_PREFIX_BYTES` bytes (the
    caller raises on its status next). Everything else is the response's own."""

    def __init__(self, response, limit: int):
        self._r, self._limit, self._body = response, limit, None

    def __getattr__(self, name):
        return getattr(self._r, name)

    async def read(self) -> bytes:
        if self._body is None:
            self._body = (await read_prefix(self._r.content) if not self._r.ok
                          else await read_capped(self._r.content, self._limit, self._r.url))
        return self._body

    async def text(self, encoding: str | None = None, errors: str = "replace") -> str:
        return (await self.read()).decode(encoding or "utf-8", errors)

    async def json(self, *, loads=json.loads, **_):
        return loads((await self.read()).decode("utf-8"))


class _CappedPost:
    def __init__(self, cm, limit: int):
        self._cm, self._limit = cm, limit

    async def __aenter__(self):
        return CappedResponse(await self._cm.__aenter__(), self._limit)

    async def __aexit__(self, *exc):
        return await self._cm.__aexit__(*exc)


class CappedSession:
    """An ``aiohttp.ClientSession`` whose ``post(...)`` responses are :class:`CappedResponse`."""

    def __init__(self, session, limit: int):
        self._s, self._limit = session, limit

    def __getattr__(self, name):
        return getattr(self._s, name)

    def post(self, *args, **kwargs):
        return _CappedPost(self._s.post(*args, **kwargs), self._limit)


class CappedRequests:
    """The ``requests`` module, but ``post`` streams the body and keeps at most ``limit`` bytes
    (:class:`BodyTooLarge` past it; an error response: its first :data:`ERROR_PREFIX_BYTES`);
    ``.text`` and ``.json()`` then read what was kept."""

    def __init__(self, real, limit: int):
        self._real, self._limit = real, limit

    def __getattr__(self, name):
        return getattr(self._real, name)

    def post(self, url, *args, **kwargs):
        kwargs["stream"] = True
        r = self._real.post(url, *args, **kwargs)
        buf = bytearray()
        try:
            for chunk in r.iter_content(_CHUNK):
                buf += chunk
                if not r.ok and len(buf) >= ERROR_PREFIX_BYTES:
                    del buf[ERROR_PREFIX_BYTES:]
                    break
                if len(buf) > self._limit:
                    raise BodyTooLarge(f"{url}: a response body larger than {self._limit} bytes (the server "
                                       "ignores max_tokens, or sends without end): not read further")
        finally:
            r.close()
        r._content, r._content_consumed = bytes(buf), True  # requests' own cache: .text/.json() read it
        return r
