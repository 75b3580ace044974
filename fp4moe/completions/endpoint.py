"""An OpenAI-compatible server's endpoints: the completions URL, and the pre-flight probes
(``/v1/models`` lists the model; one 1-token completion answers) run before any long work."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request

from fp4moe.infra.errors import GateCannotRun

#: Seconds allowed for the preflight calls (``GET /v1/models``, one 1-token completion), so a
#: server that accepts connections and never answers fails in about a minute.
PREFLIGHT_TIMEOUT_S = 30
#: Largest ``/v1/models`` body read (a model list is a few hundred bytes; a server streaming
#: an endless or huge body must not grow the gate's memory).
MAX_MODELS_BYTES = 4 << 20


def read_bounded(r, *, limit: int, deadline: float, what: str) -> bytes:
    """The whole body of response ``r``: at most ``limit`` bytes, by ``deadline`` (monotonic),
    so neither a huge body nor one trickled a byte at a time can hold the gate."""
    import time

    buf = bytearray()
    while True:
        if time.monotonic() > deadline:
            raise GateCannotRun(f"{what}: the body did not arrive within the time limit (trickling?)")
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise GateCannotRun(f"{what}: the body is larger than {limit} bytes")


def completions_url(base_url: str) -> tuple[str, str]:
    """``http://h:p``, ``.../v1`` or ``.../v1/completions`` -> (server root, completions URL)."""
    url = base_url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--base-url {base_url!r} must start with http:// or https://")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port out of range or not a number
    except ValueError as e:
        raise ValueError(f"--base-url {base_url!r}: {e}") from None
    if not parts.hostname or any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError(f"--base-url {base_url!r}: no host, or whitespace/control characters in it")
    for suffix in ("/v1/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    return url, url + "/v1/completions"


def preflight(root: str, model: str, timeout_s: float, *, warn: bool = True) -> list[str]:
    """``GET /v1/models``: the server must be up before lm-eval starts its long run. The served
    model ids come back; ``warn`` False leaves a ``model`` missing from them to the caller (a
    gate that may still end in exit 2 keeps stderr to its one line)."""
    import time

    url = root + "/v1/models"
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body = read_bounded(r, limit=MAX_MODELS_BYTES, deadline=deadline, what=f"server {root}: GET /v1/models")
    except urllib.error.HTTPError as e:
        if e.code == 404:  # some servers lack /v1/models; the completions calls decide then
            logging.getLogger(__name__).warning("%s: 404; skipping the model-name check", url)
            return []
        raise GateCannotRun(f"server {root}: GET /v1/models returned HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise GateCannotRun(f"server {root} is not reachable (GET /v1/models: {reason})") from None
    try:
        served = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        raise GateCannotRun(f"server {root}: GET /v1/models did not return an OpenAI model list") from None
    if warn and served and model not in served:
        logging.getLogger(__name__).warning("--model %r is not among the served models %s", model, served)
    return served


def preflight_completion(root: str, model: str, timeout_s: float) -> None:
    """One 1-token ``POST /v1/completions``: any HTTP answer within ``timeout_s`` shows the
    endpoint is alive (lm-eval judges the answers); silence fails the gate now, not after
    every request of the run has timed out and been retried."""
    body = json.dumps({"model": model, "prompt": "Question: 1 + 1?\nAnswer:", "max_tokens": 1, "temperature": 0})
    req = urllib.request.Request(root + "/v1/completions", data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read1(1)  # any byte of an answer is an answer: the rest is not read
    except urllib.error.HTTPError:
        return  # it answered
    except (TimeoutError, urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(e, TimeoutError) or isinstance(reason, TimeoutError):
            raise GateCannotRun(f"server {root}: a 1-token completion took longer than --timeout/preflight "
                                f"limit ({timeout_s:g} s): the server accepts connections but does not answer") from None
        raise GateCannotRun(f"server {root}: POST /v1/completions failed: {reason}") from None
