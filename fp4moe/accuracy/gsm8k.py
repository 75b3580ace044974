"""Run GSM8K with lm-eval against a live OpenAI-compatible server and decide pass/fail.

The standard way (issue 7): ``lm_eval.simple_evaluate`` with the ``local-completions`` model
(``tokenizer_backend=None``, ``tokenized_requests=False``: the server tokenizes), the offline
task of :mod:`fp4moe.accuracy.data`, ``exact_match`` read under both lm-eval filters with
their standard errors, and :func:`fp4moe.accuracy.verdict.decide` for the verdict.

Could-not-run (exit 2), never a pass: lm-eval missing, no data, the server unreachable, any
request failing after its retries (HTTP error, a body that is not JSON, no ``choices``, a
timeout), or a server that answered with null text. A server that answers fluently but wrongly
is a measured score, and fails the threshold (exit 1): the layout bug of SGLang PR #33090 read
fluently while scoring 0.54.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from fp4moe.accuracy.data import TASK_NAME, GsmData, load_data_dir, write_task_yaml
from fp4moe.accuracy.thresholds import FILTERS
from fp4moe.accuracy.verdict import FilterScore
from fp4moe.errors import GateCannotRun

# Environment that keeps lm-eval, datasets and huggingface_hub off the network. Set before
# lm_eval is imported: datasets reads these when it is first imported.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}


@dataclass
class RunConfig:
    base_url: str
    model: str
    data_dir: str | None = None
    num_fewshot: int = 8
    limit: int | None = None
    concurrency: int = 64
    max_retries: int = 3
    timeout_s: int = 600
    max_gen_toks: int = 512
    seed: int = 1234


def completions_url(base_url: str) -> tuple[str, str]:
    """``http://h:p``, ``.../v1`` or ``.../v1/completions`` -> (server root, completions URL)."""
    url = base_url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--base-url {base_url!r} must start with http:// or https://")
    for suffix in ("/v1/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    return url, url + "/v1/completions"


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


def preflight(root: str, model: str, timeout_s: float) -> list[str]:
    """``GET /v1/models``: the server must be up before lm-eval starts its long run."""
    url = root + "/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            body = r.read()
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
    if served and model not in served:
        logging.getLogger(__name__).warning("--model %r is not among the served models %s", model, served)
    return served


def _describe(e: BaseException) -> str:
    text = str(e) or ""
    kind = type(e).__name__
    if isinstance(e, TimeoutError) or "Timeout" in kind:
        return f"{kind}: a request took longer than --timeout"
    return f"{kind}: {text}" if text else kind


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
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args=model_args,
            tasks=[TASK_NAME],
            num_fewshot=cfg.num_fewshot,
            limit=cfg.limit,
            task_manager=task_manager,
            log_samples=True,
            random_seed=cfg.seed,
            numpy_random_seed=cfg.seed,
            torch_random_seed=cfg.seed,
            fewshot_random_seed=cfg.seed,
        )
    except (KeyboardInterrupt, GateCannotRun):
        raise
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
        stderr = r[skey]
        if not isinstance(stderr, (int, float)):  # lm-eval writes "N/A" when it cannot compute one
            raise GateCannotRun(f"lm-eval gave no standard error for {key} ({stderr!r})")
        out[f] = FilterScore(name=f, score=float(r[key]), stderr=float(stderr), n=n)
    return out


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
    if cfg.limit is not None and cfg.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {cfg.limit}")
    if cfg.num_fewshot < 0:
        raise ValueError(f"--num-fewshot must be >= 0, got {cfg.num_fewshot}")
    if cfg.concurrency < 1 or cfg.max_retries < 1 or cfg.timeout_s < 1:
        raise ValueError("--concurrency, --max-retries and --timeout must each be >= 1")
    root, _ = completions_url(cfg.base_url)
    data = load_data_dir(cfg.data_dir, num_fewshot=cfg.num_fewshot)
    import_lm_eval()  # fail fast (exit 2) before touching the server
    preflight(root, cfg.model, timeout_s=min(cfg.timeout_s, 30))
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
    return extract_scores(results), results, data, seconds
