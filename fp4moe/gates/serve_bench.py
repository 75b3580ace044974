"""Base and head servers measured side by side: interleaved batches, judged by ``fp4moe.stats.compare``.

Schedule (per concurrency C): ``warmup`` batches on each server, discarded, then ``batches``
measured rounds. A round sends the SAME C prompts once to each server, one server after the
other; a batch is C requests released together (C streams in flight). The servers are never
loaded at the same time, slow drift of the machine hits both alike, and under "no change" the
base/head labels are exchangeable: the null of the Mann-Whitney test in
:mod:`fp4moe.stats.compare` (``fp4moe.gates.perf.abtest`` does the same for kernels).

The order within rounds is balanced in blocks of two: each pair of rounds has one head-first
and one base-first round, in an order drawn from ``numpy.random.default_rng(seed)``. Going
first or second can matter (the second server of a round starts while the first one is still
closing its streams, collecting garbage, clocking down); with independent coin flips a run can
put most of the affected rounds on one side, and an order effect that is not balanced makes
base and head negatively correlated, which the unpaired test reads as a difference. Balanced
blocks cancel it within every two rounds.

Unit of a sample: the batch, not the request. The C sequences of a batch share the server's
decode steps (continuous batching), so their TPOTs are correlated; treating C requests as C
independent samples would understate the noise and raise false alarms. Per batch and server,
one number per metric:

==============  ================================================================  =========
metric          per-batch sample                                                   direction
==============  ================================================================  =========
``ttft``        median time to first token over the batch's requests (prefill)     seconds
``tpot``        median time per output token (decode)                              seconds
``e2e``         median end-to-end latency                                          seconds
``throughput``  batch wall time / output tokens of the batch (1 / output tok/s)    seconds
==============  ================================================================  =========

All four are "seconds, larger is slower", which is what ``compare_samples`` judges (its
ratio is head/base on log scale, Hodges-Lehmann with a Mann-Whitney test). Throughput is
reported in tokens/s but judged as its reciprocal.

Token counts are checked, not assumed: every request must come back with
``usage.completion_tokens == output_len`` (a server that does not honour ``ignore_eos``, or
stops at its context limit, makes E2E and throughput compare unequal work: could not run),
and the same prompt must count the same ``prompt_tokens`` on both servers (a different
tokenizer or chat template is a different workload: could not run).

Client overhead: the thread CPU time of the client's event loop (``time.thread_time``) over
the wall time of the measured batches ("busy"), per request and per chunk, and the lateness of
a 5 ms ticker on the same loop (the delay the client itself adds to a timestamp). A client
busier than ``max_client_busy`` could be the bottleneck and hide a slowdown: could not run,
unless a regression was measured anyway.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fp4moe.infra.errors import GateCannotRun

if TYPE_CHECKING:  # annotations only: numpy and the client load lazily (the command line reads the defaults)
    import numpy as np

    from fp4moe.completions.client import RequestRecord

METRICS = ("ttft", "tpot", "e2e", "throughput")
METRIC_LABELS = {
    "ttft": "TTFT (prefill)",
    "tpot": "TPOT (decode)",
    "e2e": "E2E latency",
    "throughput": "output throughput",
}
#: Regression threshold and rounds per concurrency of the serving gate. docs/serving-perf.md,
#: study run 3: at 40 rounds a 5% decode slowdown was flagged 100/100 and A/A 0/100 (30 rounds:
#: 95/100), at threshold 2% or 3% alike; 2% keeps smaller true slowdowns in reach.
DEFAULT_THRESHOLD = 0.02
DEFAULT_BATCHES = 40
DEFAULT_MAX_CLIENT_BUSY = 0.5
LAG_TICK_S = 0.005


@dataclass
class BenchConfig:
    base_url: str  # completions URL
    model: str
    prompts: list  # prompt stream: str or list[int]; consumed in order, C per round
    concurrencies: tuple[int, ...]
    output_len: int
    head_url: str | None = None
    batches: int = DEFAULT_BATCHES  # measured rounds per concurrency ...
    requests: int | None = None  # ... or this many requests per server and concurrency (rounds = requests // C)
    warmup_batches: int = 1
    seed: int = 0
    connect_timeout_s: float = 10.0
    stall_timeout_s: float = 60.0
    request_timeout_s: float = 1800.0

    def batches_for(self, c: int) -> int:
        return self.requests // c if self.requests else self.batches


@dataclass
class Batch:
    side: str
    concurrency: int
    index: int  # -1.. for warm-up, 0.. measured
    wall_s: float
    cpu_s: float  # client event-loop thread CPU during the batch
    records: list[RequestRecord]

    def metric(self, name: str) -> float:
        if name == "throughput":
            return self.wall_s / sum(r.output_tokens for r in self.records)
        key = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}[name]
        return float(statistics.median(getattr(r, key) for r in self.records))

    def to_dict(self) -> dict:
        return {
            "side": self.side, "concurrency": self.concurrency, "index": self.index, "wall_s": self.wall_s,
            "client_cpu_s": self.cpu_s, **{m: self.metric(m) for m in METRICS},
            "requests": [r.to_dict() for r in self.records],
        }


@dataclass
class ConcurrencyRun:
    concurrency: int
    batches: dict[str, list[Batch]] = field(default_factory=dict)  # measured only
    warmup: dict[str, list[Batch]] = field(default_factory=dict)
    head_first: list[bool] = field(default_factory=list)
    lags_s: list[float] = field(default_factory=list)

    def first(self, n: int) -> "ConcurrencyRun":
        """The same run cut to its first ``n`` measured rounds (the study's "how many rounds")."""
        return ConcurrencyRun(self.concurrency, {s: b[:n] for s, b in self.batches.items()}, self.warmup,
                              self.head_first[:n], self.lags_s)

    def samples(self, side: str, metric: str) -> list[float]:
        return [b.metric(metric) for b in self.batches.get(side, [])]

    def client_overhead(self) -> dict:
        import numpy as np  # lazily: the command line reads this module's defaults

        measured = [b for bs in self.batches.values() for b in bs]
        wall = sum(b.wall_s for b in measured)
        cpu = sum(b.cpu_s for b in measured)
        n_req = sum(len(b.records) for b in measured)
        n_chunks = sum(r.chunks for b in measured for r in b.records)
        lags = np.asarray(self.lags_s or [0.0])
        return {
            "busy": cpu / wall if wall > 0 else 0.0,
            "cpu_per_request_us": 1e6 * cpu / max(1, n_req),
            "cpu_per_chunk_us": 1e6 * cpu / max(1, n_chunks),
            "chunks_per_s": n_chunks / wall if wall > 0 else 0.0,
            "loop_lag_p50_ms": 1e3 * float(np.percentile(lags, 50)),
            "loop_lag_p99_ms": 1e3 * float(np.percentile(lags, 99)),
            "loop_lag_max_ms": 1e3 * float(lags.max()),
        }

    def summary(self, side: str) -> dict:
        import numpy as np  # lazily: the command line reads this module's defaults

        recs = [r for b in self.batches.get(side, []) for r in b.records]
        if not recs:
            return {}
        ttft = np.array([r.ttft_s for r in recs])
        tpot = np.array([r.tpot_s for r in recs])
        e2e = np.array([r.e2e_s for r in recs])
        thr = [1.0 / t for t in self.samples(side, "throughput")]
        return {
            "requests": len(recs),
            "ttft_p50_ms": 1e3 * float(np.median(ttft)), "ttft_p99_ms": 1e3 * float(np.percentile(ttft, 99)),
            "tpot_p50_ms": 1e3 * float(np.median(tpot)), "tpot_p99_ms": 1e3 * float(np.percentile(tpot, 99)),
            "e2e_p50_s": float(np.median(e2e)),
            "output_tok_per_s": float(np.median(thr)),
            "prompt_tokens_mean": float(np.mean([r.prompt_tokens for r in recs])),
        }




def prompts_needed(cfg: BenchConfig) -> int:
    return sum(c * (cfg.batches_for(c) + cfg.warmup_batches) for c in cfg.concurrencies)


async def _lag_ticker(sink: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        sink.append(max(0.0, loop.time() - t - LAG_TICK_S))


async def _run_batch(session, side: str, url: str, cfg: BenchConfig, prompts, c: int, index: int) -> Batch:
    from fp4moe.completions.client import RequestFailed, completion_payload, stream_completion

    cpu0, t0 = time.thread_time(), time.perf_counter()
    tasks = [asyncio.create_task(stream_completion(session, url, completion_payload(cfg.model, p, cfg.output_len))) for p in prompts]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    # read every finished task's exception, not only the first: one left unread is printed by
    # asyncio ("Task exception was never retrieved") after the gate's one line
    errors = {t: t.exception() for t in done if not t.cancelled()}
    failed = next(((i, t) for i, t in enumerate(tasks) if errors.get(t) is not None), None)
    if failed:
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        i, t = failed
        err = errors[t]
        why = str(err) if isinstance(err, RequestFailed) else f"{type(err).__name__}: {err}"
        where = "warm-up batch" if index < 0 else f"batch {index}"
        raise GateCannotRun(f"{side} server {url}: request {i} of {where} at concurrency {c} failed: {why}")
    records = [t.result() for t in tasks]
    for i, r in enumerate(records):
        if r.output_tokens != cfg.output_len:
            raise GateCannotRun(
                f"{side} server {url}: request {i} at concurrency {c} returned {r.output_tokens} output tokens for "
                f"--output-len {cfg.output_len}: it did not honour ignore_eos (or hit its context limit); TPOT, E2E "
                "and throughput are only compared on equal token counts"
            )
        if r.output_tokens < 2:
            raise GateCannotRun(f"--output-len {cfg.output_len}: TPOT needs at least 2 output tokens")
    return Batch(side=side, concurrency=c, index=index, wall_s=wall, cpu_s=cpu, records=records)


def _check_same_prompt_tokens(a: Batch, b: Batch, urls: dict) -> None:
    for i, (ra, rb) in enumerate(zip(a.records, b.records)):
        if ra.prompt_tokens != rb.prompt_tokens:
            raise GateCannotRun(
                f"the same prompt counts {ra.prompt_tokens} tokens on {a.side} ({urls[a.side]}) and {rb.prompt_tokens} "
                f"on {b.side} ({urls[b.side]}) (request {i}, concurrency {a.concurrency}): different tokenizers or "
                "models are different workloads"
            )


def balanced_orders(n: int, rng: np.random.Generator) -> list[bool]:
    """``head_first`` for ``n`` rounds: one True and one False per block of two, random within
    the block (the last, odd round is a coin flip)."""
    out: list[bool] = []
    for _ in range((n + 1) // 2):
        first = bool(rng.random() < 0.5)
        out += [first, not first]
    return out[:n]


async def run_bench(cfg: BenchConfig, *, log=None) -> list[ConcurrencyRun]:
    """Run the whole schedule; any failed request ends it with :class:`GateCannotRun`."""
    import numpy as np  # lazily, as the client (aiohttp): the command line reads this module's defaults

    from fp4moe.completions.client import make_session

    urls = {"base": cfg.base_url, **({"head": cfg.head_url} if cfg.head_url else {})}
    need = prompts_needed(cfg)
    if len(cfg.prompts) < need:
        raise GateCannotRun(f"{len(cfg.prompts)} prompts for {need} requests per server")
    rng = np.random.default_rng(cfg.seed)
    limit = max(cfg.concurrencies)
    sessions = {
        s: make_session(connect_timeout_s=cfg.connect_timeout_s, stall_timeout_s=cfg.stall_timeout_s,
                        request_timeout_s=cfg.request_timeout_s, limit=limit)
        for s in urls
    }
    runs: list[ConcurrencyRun] = []
    cursor = 0
    try:
        for c in cfg.concurrencies:
            run = ConcurrencyRun(concurrency=c, batches={s: [] for s in urls}, warmup={s: [] for s in urls})
            runs.append(run)
            orders = balanced_orders(cfg.batches_for(c), rng)
            for index in range(-cfg.warmup_batches, cfg.batches_for(c)):
                prompts = cfg.prompts[cursor:cursor + c]
                cursor += c
                order = list(urls)
                head_first = len(order) == 2 and index >= 0 and orders[index]
                if head_first:
                    order.reverse()
                stop, lags = asyncio.Event(), []
                ticker = asyncio.create_task(_lag_ticker(lags, stop)) if index >= 0 else None
                try:
                    got = {s: await _run_batch(sessions[s], s, urls[s], cfg, prompts, c, index) for s in order}
                finally:
                    if ticker:
                        stop.set()
                        await ticker
                if len(got) == 2:
                    _check_same_prompt_tokens(got["base"], got["head"], urls)
                if index < 0:
                    for s, b in got.items():
                        run.warmup[s].append(b)
                    continue
                run.lags_s.extend(lags)
                run.head_first.append(head_first)
                for s, b in got.items():
                    run.batches[s].append(b)
            if log:
                log(_progress_line(run))
    finally:
        for s in sessions.values():
            await s.close()
    return runs


def _progress_line(run: ConcurrencyRun) -> str:
    parts = [f"concurrency {run.concurrency}:"]
    for side in run.batches:
        s = run.summary(side)
        parts.append(f"{side} TTFT {s['ttft_p50_ms']:.1f} ms, TPOT {s['tpot_p50_ms']:.2f} ms, {s['output_tok_per_s']:.0f} tok/s;")
    o = run.client_overhead()
    parts.append(f"client busy {o['busy']:.0%}, loop lag p99 {o['loop_lag_p99_ms']:.2f} ms")
    return " ".join(parts)


def judge(runs: list[ConcurrencyRun], *, threshold: float, alpha: float, min_samples: int, metrics=METRICS,
          family_size: int | None = None) -> list:
    """One ``fp4moe.stats.compare.Comparison`` per metric and concurrency (head vs base).

    The gate fails when ANY of them regressed, so ``alpha`` is the family's: each test runs at
    ``alpha / family_size`` (Bonferroni; ``family_size`` defaults to metrics x concurrencies).
    Without it, 12 tests at 1% each would block up to ~11% of unchanged merges through a noisy
    metric (TTFT) alone; the metrics are correlated, so Bonferroni is conservative.
    """
    from fp4moe.stats.compare import compare_samples

    per_test = alpha / (family_size or len(runs) * len(metrics))
    out = []
    for run in runs:
        for m in metrics:
            name = f"{m} {METRIC_LABELS[m]} @ concurrency {run.concurrency}"
            try:
                out.append(compare_samples(run.samples("base", m), run.samples("head", m), name=name,
                                           threshold=threshold, alpha=per_test, min_samples=min_samples))
            except ValueError as e:
                raise GateCannotRun(str(e)) from None
    return out


def client_bound(runs: list[ConcurrencyRun], max_busy: float) -> list[str]:
    """Concurrencies at which the client was busier than ``max_busy`` of the measured time."""
    out = []
    for run in runs:
        o = run.client_overhead()
        if o["busy"] > max_busy:
            out.append(f"concurrency {run.concurrency}: the client was busy {o['busy']:.0%} of the measured time "
                       f"(limit {max_busy:.0%}), it may be the bottleneck")
    return out
