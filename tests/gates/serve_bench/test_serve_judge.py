"""The serving gate's judgement on recorded-shape synthetic rounds, without a server: which
metric at which concurrency regressed, the family-wise alpha split per test, too few rounds as
cannot-run, and the client-bound rule at its limit."""

import math

import numpy as np
import pytest

from fp4moe.completions.client import RequestRecord
from fp4moe.gates.serve_bench import METRICS, Batch, ConcurrencyRun, client_bound, judge
from fp4moe.infra.errors import GateCannotRun


def _batch(side, c, i, ttft, e2e, tokens=65, wall=None, cpu=0.0):
    recs = [RequestRecord(ttft_s=ttft, e2e_s=e2e, output_tokens=tokens, prompt_tokens=100, chunks=tokens)
            for _ in range(c)]
    return Batch(side, c, i, wall if wall is not None else e2e, cpu, recs)


def _run(c, rounds, *, head_decode=1.0, seed=0):
    rng = np.random.default_rng(seed)
    run = ConcurrencyRun(c, {"base": [], "head": []})
    for i in range(rounds):
        for side, slow in (("base", 1.0), ("head", head_decode)):
            ttft = 0.05 * rng.lognormal(0, 0.01)
            decode = 64 * 0.01 * slow * rng.lognormal(0, 0.01)
            run.batches[side].append(_batch(side, c, i, ttft, ttft + decode))
    return run


def test_a_slower_decode_regresses_tpot_e2e_and_throughput_not_ttft():
    runs = [_run(1, 20), _run(16, 20, head_decode=1.10, seed=1)]
    comps = judge(runs, threshold=0.02, alpha=0.01, min_samples=10)
    assert [c.name for c in comps] == [f"{m} {lab} @ concurrency {c}" for c in (1, 16) for m, lab in
                                       zip(METRICS, ("TTFT (prefill)", "TPOT (decode)", "E2E latency", "output throughput"))]
    regressed = {c.name.split()[0] + f"@{c.name.rsplit(' ', 1)[1]}" for c in comps if c.regressed}
    assert regressed == {"tpot@16", "e2e@16", "throughput@16"}
    assert all(c.alpha == pytest.approx(0.01 / 8) and c.threshold == 0.02 for c in comps)  # Bonferroni over 2 x 4
    tpot16 = next(c for c in comps if c.name.startswith("tpot") and c.name.endswith("16"))
    assert tpot16.ratio == pytest.approx(1.10, rel=0.01)


def test_family_size_sets_the_per_test_alpha_and_metrics_can_be_chosen():
    comps = judge([_run(4, 12)], threshold=0.05, alpha=0.04, min_samples=10, metrics=("tpot",), family_size=4)
    assert len(comps) == 1 and comps[0].alpha == pytest.approx(0.01) and comps[0].threshold == 0.05
    assert not comps[0].regressed


def test_min_samples_is_the_callers():
    with pytest.raises(GateCannotRun, match=r"the base sample has 11 rounds; at least 12 are needed"):
        judge([_run(2, 11)], threshold=0.02, alpha=0.01, min_samples=12)


def test_too_few_rounds_cannot_run_naming_the_metric():
    with pytest.raises(GateCannotRun, match=r"^ttft TTFT \(prefill\) @ concurrency 2: the base sample has 9 rounds; "
                                            r"at least 10 are needed"):
        judge([_run(2, 9)], threshold=0.02, alpha=0.01, min_samples=10)


def _busy_run(busy):
    run = ConcurrencyRun(8, {"base": [_batch("base", 8, 0, 0.05, 1.0, wall=1.0, cpu=busy)],
                             "head": [_batch("head", 8, 0, 0.05, 1.0, wall=1.0, cpu=busy)]})
    return run


def test_client_bound_at_its_limit():
    assert client_bound([_busy_run(0.5)], 0.5) == []
    assert client_bound([_busy_run(math.nextafter(0.5, 0))], 0.5) == []
    (line,) = client_bound([_busy_run(math.nextafter(0.5, 1))], 0.5)
    assert line == ("concurrency 8: the client was busy 50% of the measured time (limit 50%), "
                    "it may be the bottleneck")
    assert len(client_bound([_busy_run(0.9), _busy_run(0.1), _busy_run(0.7)], 0.5)) == 2
    assert _busy_run(0.25).client_overhead()["busy"] == pytest.approx(0.25)
