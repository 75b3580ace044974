"""Run GSM8K with lm-eval against a live OpenAI-compatible server and decide pass/fail.

The standard way: ``lm_eval.simple_evaluate`` with the ``local-completions`` model
(``tokenizer_backend=None``, ``tokenized_requests=False``: the server tokenizes), the offline
task of :mod:`fp4moe.completions.data`, ``exact_match`` read under both lm-eval filters with
their standard errors, and :func:`fp4moe.gates.accuracy.verdict.decide` for the verdict.

Could-not-run (exit 2), never a pass: lm-eval missing, no data, the server unreachable, any
request failing after its retries (HTTP error, a body that is not JSON, no ``choices``, a
timeout), or a server that answered with null text. A server that answers fluently but wrongly
is a measured score, and fails the threshold (exit 1): the layout bug of SGLang PR #33090 read
fluently while scoring 0.54.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fp4moe.completions.data import TASK_NAME, GsmData, load_data_dir, write_task_yaml
from fp4moe.completions.endpoint import PREFLIGHT_TIMEOUT_S, completions_url, preflight, preflight_completion
from fp4moe.gates.accuracy.thresholds import FILTERS
from fp4moe.gates.accuracy.verdict import FilterScore
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.runner import MAX_TIMEOUT_S

# Environment that keeps lm-eval, datasets and huggingface_hub off the network. Set before
# lm_eval is imported: datasets reads these when it is first imported.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}


#: Seconds per request (lm-eval ``timeout``). 512 tokens of a large MoE at concurrency 64
#: take well under a minute; 120 s with 3 attempts fails a server that stalls mid-run in
#: about 6 minutes, where the old 600 s default held the gate 30.
DEFAULT_REQUEST_TIMEOUT_S = 120
#: Seconds for the whole lm-eval run (all 1319 questions 8-shot on a real server: 10-20 min).
DEFAULT_DEADLINE_S = 7200
#: Completion cap, characters per requested token (a token decodes to a few characters; 32
#: is far above any real tokenizer). Text beyond ``max(4096, 32 * max_gen_toks)`` characters
#: is cut before lm-eval's answer regexes see it (they are quadratic on multi-megabyte text),
#: and such a run is could-not-run: the server ignored ``max_tokens``.
CHARS_PER_TOKEN_CAP = 32
MIN_COMPLETION_CHARS = 4096
#: The most bytes of one response body read (``fp4moe.completions.bounded``): room for a
#: completion of the cap above, JSON-escaped, plus the envelope; an endless body (an HTTP 500
#: streaming without end) is refused there, never read whole. At ``--concurrency`` 64 and the
#: default 512 tokens: 64 x 1.25 MiB at most.
BODY_BYTES_PER_CHAR = 16
BODY_BYTES_MIN = 1 << 20


def max_body_bytes(max_completion_chars: int) -> int:
    return BODY_BYTES_MIN + BODY_BYTES_PER_CHAR * max_completion_chars


@dataclass
class RunConfig:
    base_url: str
    model: str
    data_dir: str | None = None
    num_fewshot: int = 8
    limit: int | None = None
    concurrency: int = 64
    max_retries: int = 3
    timeout_s: int = DEFAULT_REQUEST_TIMEOUT_S
    max_gen_toks: int = 512
    seed: int = 1234
    deadline_s: float = DEFAULT_DEADLINE_S
    quiet: bool = True  # lm-eval's (and its subprocesses') stderr silenced: the gate's one line stands alone

    @property
    def max_completion_chars(self) -> int:
        return max(MIN_COMPLETION_CHARS, CHARS_PER_TOKEN_CAP * self.max_gen_toks)


def check_config(cfg: RunConfig) -> None:
    """Every numeric option in range; raised before data, lm-eval or the server are touched."""
    if cfg.limit is not None and cfg.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {cfg.limit}")
    if cfg.num_fewshot < 0:
        raise ValueError(f"--num-fewshot must be >= 0, got {cfg.num_fewshot}")
    for option, value, most in (("--concurrency", cfg.concurrency, 4096), ("--max-retries", cfg.max_retries, 100),
                                ("--timeout", cfg.timeout_s, MAX_TIMEOUT_S), ("--max-gen-toks", cfg.max_gen_toks, 65536)):
        if not 1 <= value <= most:
            raise ValueError(f"{option} must be >= 1 and <= {most:g}, got {value}")
    if not 0 < cfg.deadline_s <= MAX_TIMEOUT_S:  # False for nan too
        raise ValueError(f"--deadline must be a positive number of seconds, at most {MAX_TIMEOUT_S:g}, got {cfg.deadline_s}")
    completions_url(cfg.base_url)


def require_lm_eval() -> None:
    """lm-eval is installed (found, not imported: the import costs ~1 s, paid by :func:`run_lm_eval`
    only once the server has answered); missing is GateCannotRun naming the extra."""
    import importlib.util

    try:
        found = importlib.util.find_spec("lm_eval") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise GateCannotRun("lm-eval is not installed (no module named 'lm_eval'); install the optional extra: "
                            "pip install -e '.[eval]' (or pip install 'lm-eval[api]')")


def import_lm_eval():
    """Import lm-eval offline; a missing install is GateCannotRun with the fix."""
    os.environ.update(OFFLINE_ENV)
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise GateCannotRun(
            f"lm-eval is not installed ({e}); install the optional extra: pip install -e '.[eval]' "
            "(or pip install 'lm-eval[api]')"
        ) from None
    try:  # if datasets was imported before the environment was set, switch it offline too
        import datasets.config as dcfg

        dcfg.HF_HUB_OFFLINE = True
        dcfg.HF_DATASETS_OFFLINE = True
    except (ImportError, AttributeError):
        pass
    return lm_eval, TaskManager


@contextlib.contextmanager
def _without_environment_report():
    """lm-eval's ``simple_evaluate`` ends by describing the machine for its own results file:
    torch's ``collect_env`` (``pip list``, ``nvidia-smi``... as subprocesses: ~1 s here, longer
    on a runner, and unbounded) and ``git describe`` in the current directory (which prints
    ``fatal: not a git repository`` after the gate's progress). The gate's record states its
    own versions (:func:`versions`), so both are replaced, for this call only, by values that
    say they were not collected. The names are looked up in ``lm_eval.evaluator``'s globals,
    where ``simple_evaluate`` reads them; an lm-eval without them is left as it is."""
    import lm_eval.evaluator as ev

    def env_info(storage):
        storage["pretty_env_info"] = "not collected by fp4moe-gate (its record has the versions)"

    saved = {k: ev.__dict__[k] for k in ("add_env_info", "get_git_commit_hash") if k in ev.__dict__}
    if "add_env_info" in saved:
        ev.add_env_info = env_info
    if "get_git_commit_hash" in saved:
        ev.get_git_commit_hash = lambda: None
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ev, k, v)


class _DeadlineExceeded(BaseException):
    """Raised by the SIGALRM handler; a BaseException so no retry loop inside lm-eval eats it."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Interrupt the block after ``seconds`` (main thread: SIGALRM; elsewhere: no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise _DeadlineExceeded(f"the lm-eval run exceeded --deadline {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def capped_completions_model(max_completion_chars: int, **model_args):
    """lm-eval's ``local-completions`` model with every completion cut to
    ``max_completion_chars`` as it is parsed, before any filter runs; ``.over_cap`` counts
    the completions that were longer. Every response body is read bounded: at most
    :func:`max_body_bytes` (an error's text: its first KiB), ``fp4moe.completions.bounded``."""
    from lm_eval.models import api_models
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from fp4moe.completions.bounded import CappedRequests, CappedSession

    body_limit = max_body_bytes(max_completion_chars)

    class CappedLocalCompletions(LocalCompletionsAPI):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.over_cap = 0
            self.longest = 0

        async def amodel_call(self, session, *args, **kwargs):  # --concurrency > 1: aiohttp
            return await super().amodel_call(CappedSession(session, body_limit), *args, **kwargs)

        def model_call(self, *args, **kwargs):  # --concurrency 1: requests, one call at a time
            real = api_models.requests
            api_models.requests = CappedRequests(real, body_limit)
            try:
                return super().model_call(*args, **kwargs)
            finally:
                api_models.requests = real

        def parse_generations(self, outputs, **kwargs):
            texts = LocalCompletionsAPI.parse_generations(outputs=outputs, **kwargs)
            capped = []
            for t in texts:
                if isinstance(t, str) and len(t) > max_completion_chars:
                    self.over_cap += 1
                    self.longest = max(self.longest, len(t))
                    t = t[:max_completion_chars]
                capped.append(t)
            return capped

    return CappedLocalCompletions(**model_args)


def _describe(e: BaseException) -> str:
    """The exception in words; its text (which may carry a server's bytes) quoted and escaped."""
    from fp4moe.infra.files import quoted

    text = str(e) or ""
    kind = type(e).__name__
    if isinstance(e, TimeoutError) or "Timeout" in kind:
        return f"{kind}: a request took longer than --timeout"
    return f"{kind}: {quoted('message', ' '.join(text.split()), 300)}" if text else kind


def _release_failed_tasks() -> None:
    """Collect lm-eval's failed asyncio tasks now, with asyncio's logger muted.

    When a request fails, the other tasks of lm-eval's ``gather`` die with unretrieved
    exceptions. Left to the cyclic GC, their ``__del__`` logs a traceback at an arbitrary
    moment; on CPython 3.11 formatting that traceback calls ``ast.parse``, and doing so inside
    another ``compile()`` (e.g. pytest rewriting a module) corrupts the parser's state
    ("SystemError: AST constructor recursion depth mismatch"). Collecting here avoids that, and
    the failure itself is reported once, by the gate.
    """
    import gc

    log = logging.getLogger("asyncio")
    was_disabled, log.disabled = log.disabled, True
    try:
        gc.collect()
    finally:
        log.disabled = was_disabled


@contextlib.contextmanager
def _stderr_fd_silenced(on: bool):
    """While lm-eval runs: file descriptor 2 on /dev/null (``--verbose`` keeps it). lm-eval runs
    ``git describe`` in the current folder, and outside a checkout git writes "fatal: not a
    git repository" straight to the inherited descriptor; progress bars drawn outside
    ``TQDM_DISABLE`` go the same way (that text once came before the gate's one line)."""
    if not on:
        yield
        return
    import sys

    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def run_lm_eval(cfg: RunConfig, data: GsmData, workdir: Path) -> dict:
    """One ``simple_evaluate`` call; any failure inside lm-eval is GateCannotRun."""
    lm_eval, TaskManager = import_lm_eval()
    _, url = completions_url(cfg.base_url)
    write_task_yaml(data, workdir)
    # include_defaults=False: index only our task, not lm-eval's thousands of YAML files.
    task_manager = TaskManager(include_path=str(workdir), include_defaults=False)
    model_args = {
        "model": cfg.model,
        "base_url": url,
        "tokenizer_backend": None,
        "tokenized_requests": False,
        "num_concurrent": cfg.concurrency,
        "max_retries": cfg.max_retries,
        "timeout": cfg.timeout_s,
        "max_gen_toks": cfg.max_gen_toks,
    }
    try:
        lm = capped_completions_model(cfg.max_completion_chars, **model_args)
        with deadline(cfg.deadline_s), _stderr_fd_silenced(cfg.quiet), _without_environment_report():
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=[TASK_NAME],
                num_fewshot=cfg.num_fewshot,
                limit=cfg.limit,
                task_manager=task_manager,
                log_samples=True,
                random_seed=cfg.seed,
                numpy_random_seed=cfg.seed,
                torch_random_seed=None,  # an API model draws nothing from torch: seeding it only imports torch (~1.2 s)
                fewshot_random_seed=cfg.seed,
            )
    except (KeyboardInterrupt, GateCannotRun):
        raise
    except _DeadlineExceeded as e:
        failure = f"{e} (against {url})"
    except BaseException as e:  # aiohttp/requests/tenacity/asyncio errors all mean: no score
        failure = f"lm-eval could not complete the run against {url}: {_describe(e)}"
    else:
        failure = None
    if failure:
        # Not chained (`from e`): the exception's frames hold lm-eval's failed asyncio tasks.
        _release_failed_tasks()
        raise GateCannotRun(failure)
    if not results or TASK_NAME not in results.get("results", {}):
        raise GateCannotRun("lm-eval returned no results for the GSM8K task")
    if lm.over_cap:
        raise GateCannotRun(
            f"{lm.over_cap} completion(s) longer than {cfg.max_completion_chars} characters (longest "
            f"{lm.longest}) although --max-gen-toks is {cfg.max_gen_toks}: the server ignores max_tokens; "
            "they were cut before scoring and the run is not judged"
        )
    return results


def extract_scores(results: dict) -> dict[str, FilterScore]:
    """exact_match and its stderr under both filters, from ``results['results'][task]``."""
    r = results["results"][TASK_NAME]
    n = int(results.get("n-samples", {}).get(TASK_NAME, {}).get("effective", 0))
    out = {}
    for f in FILTERS:
        key, skey = f"exact_match,{f}", f"exact_match_stderr,{f}"
        if key not in r or skey not in r:
            raise GateCannotRun(f"lm-eval results lack {key!r} / {skey!r}; got {sorted(r)}")
        score, stderr = r[key], r[skey]
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise GateCannotRun(f"lm-eval gave {key} = {score!r}, not a number")
        if isinstance(stderr, bool) or not isinstance(stderr, (int, float)) or not math.isfinite(stderr):
            # lm-eval writes "N/A" when it cannot compute one
            raise GateCannotRun(f"lm-eval gave no standard error for {key} ({stderr!r})")
        out[f] = FilterScore(name=f, score=float(score), stderr=float(stderr), n=n)
    return out


_DIGIT = re.compile(r"[0-9]")


def numberless_answers(results: dict) -> tuple[int, int, str | None]:
    """(questions whose answer contains no digit at all, questions, first such answer).

    When no answer holds a number, neither filter can find one and the score is 0 with
    stderr 0: the run measured the endpoint (empty text, an error page, a chat template on a
    completions route), not the model's arithmetic. Could-not-run, never a score."""
    docs: dict = {}
    for s in results.get("samples", {}).get(TASK_NAME, []):
        resp = (s.get("resps") or [[None]])[0]
        text = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
        docs.setdefault(s.get("doc_id"), text)
    bad = [t for t in docs.values() if not (isinstance(t, str) and _DIGIT.search(t))]
    return len(bad), len(docs), (bad[0] if bad else None)


def null_responses(results: dict) -> int:
    """How many questions the server answered with null text (lm-eval's placeholder).

    lm-eval logs one sample per (question, filter), so questions are counted by ``doc_id``.
    """
    try:
        from lm_eval.models.api_models import LMEVAL_MODEL_NONE_ANSWER_PLACEHOLDER as placeholder
    except ImportError:
        placeholder = None
    null_docs = set()
    for s in results.get("samples", {}).get(TASK_NAME, []):
        for resp in s.get("resps", []):
            text = resp[0] if isinstance(resp, (list, tuple)) and resp else resp
            if text is None or (placeholder is not None and text == placeholder):
                null_docs.add(s.get("doc_id"))
    return len(null_docs)


def sample_records(results: dict) -> list[dict]:
    """One record per question: what was asked and answered, and each filter's extraction and score.

    lm-eval logs one sample per (question, filter); they are merged on ``doc_id``.
    """
    by_doc: dict = {}
    for s in results.get("samples", {}).get(TASK_NAME, []):
        resp = (s.get("resps") or [[None]])[0]
        rec = by_doc.setdefault(
            s.get("doc_id"),
            {
                "doc_id": s.get("doc_id"),
                "question": (s.get("doc") or {}).get("question"),
                "target": s.get("target"),
                "response": resp[0] if isinstance(resp, (list, tuple)) else resp,
            },
        )
        if "filter" in s:
            rec[s["filter"]] = {"extracted": s.get("filtered_resps"), "exact_match": s.get("exact_match")}
    return [by_doc[k] for k in sorted(by_doc, key=lambda d: (d is None, d))]


def versions() -> dict:
    v = {"python": platform.python_version()}
    for mod in ("lm_eval", "datasets"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # version is informational only
            v[mod] = None
    return v


def evaluate(cfg: RunConfig) -> tuple[dict[str, FilterScore], dict, GsmData, float]:
    """Validate inputs, check the server, run lm-eval. Returns (scores, raw results, data, seconds)."""
    check_config(cfg)
    root, _ = completions_url(cfg.base_url)
    data = load_data_dir(cfg.data_dir, num_fewshot=cfg.num_fewshot)
    require_lm_eval()  # fail fast (exit 2) before touching the server
    preflight(root, cfg.model, timeout_s=min(cfg.timeout_s, PREFLIGHT_TIMEOUT_S))
    preflight_completion(root, cfg.model, timeout_s=min(cfg.timeout_s, PREFLIGHT_TIMEOUT_S))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fp4moe_gsm8k_") as tmp:
        results = run_lm_eval(cfg, data, Path(tmp))
    seconds = time.perf_counter() - t0
    nulls = null_responses(results)
    if nulls:
        raise GateCannotRun(
            f"the server returned null text for {nulls} question(s): the run measured the API, not "
            "the model (check the completions endpoint and its generation limits)"
        )
    bad, total, first = numberless_answers(results)
    if total and bad == total:
        raise GateCannotRun(
            f"none of the {total} answers contains a number (first: {str(first)[:80]!r}): the run measured the "
            "endpoint (empty text, an error page, a chat template on /v1/completions), not the model"
        )
    return extract_scores(results), results, data, seconds
