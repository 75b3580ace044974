"""``router_numerics`` judged without SGLang: the probes and the judge of
``fp4moe.targets.sglang.router_numerics`` on outputs built here by fp32 stand-ins of the two
formulas SGLang's routers used (before and after SGLang #34459). The real routers run in the
sglang tier (``test_sglang_tier.py::test_router_numerics``)."""

from __future__ import annotations

import torch

from fp4moe.targets.sglang import router_numerics as rn


def _as_written(x: torch.Tensor) -> torch.Tensor:
    """fp32 max(x, 0) + log(1 + exp(-|x|)): 0 for x <= -16.64 (the pre-#34459 formula)."""
    x = x.float()
    return (x.clamp_min(0) + torch.log(1 + torch.exp(-x.abs()))).sqrt()


def _fixed(x: torch.Tensor) -> torch.Tensor:
    """fp32 through log1p, as the fixed routers compute it."""
    x = x.float()
    return (x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))).sqrt()


def _outputs(score, floor: bool) -> dict:
    """What an implementation with scoring ``score`` returns for every probe (keeps all experts
    in order for the raw probe, renormalises the first k for the others)."""
    out = {}
    for name, p in rn.probes().items():
        logits = torch.tensor(p["logits"], dtype=torch.float64)
        k = p["k"]
        s = score(logits[:, :k])
        if p["renorm"]:
            tot = s.sum(-1, keepdim=True)
            s = torch.where(tot > 0, s / torch.where(tot > 0, tot, 1.0), 0.0) if floor else s / tot
        out[name] = {"weights": (s * p["scale"]).double().tolist(), "ids": [list(range(k))] * len(p["logits"])}
    return {"impl": {"where": "a stand-in", "entry": "test.impl", **out}}


def test_the_fixed_formula_holds_on_every_probe():
    checks, why = rn.judge(_outputs(_fixed, floor=True))
    assert why is None and [c["ok"] for c in checks] == [True], checks


def test_the_as_written_formula_fails_at_the_fp32_edge():
    (c,), _ = rn.judge(_outputs(_as_written, floor=True))
    assert not c["ok"] and "reference" in c["detail"] and "(rel 1)" in c["detail"], c


def test_an_unfloored_renormalisation_fails_naming_0_over_0():
    (c,), _ = rn.judge(_outputs(_fixed, floor=False))
    assert not c["ok"] and "unfloored 0/0" in c["detail"], c


def test_an_absent_implementation_is_info_and_no_triton_is_not_judged():
    (c,), why = rn.judge({"impl": {"absent": "not in this release"}})
    assert c["ok"] and c["detail"].startswith("absent (info)") and why is None
    assert rn.judge({"not_judged": "triton is not installed"}) == ([], "router numerics: triton is not installed")
    assert rn.judge(None) == ([], None)  # not asked


def test_a_raising_implementation_fails_naming_it():
    (c,), _ = rn.judge({"impl": {"where": "w", "scores": {"error": "RuntimeError: boom"}}})
    assert not c["ok"] and "boom" in c["detail"]


def test_probes_cover_the_edge_the_underflow_and_the_range():
    xs = [x for row in rn.probes()["scores"]["logits"] for x in row]
    assert min(xs) == -104.0 and max(xs) == 200.0
    assert any(rn.FP32_LOG1P_EDGE - 0.01 < x < rn.FP32_LOG1P_EDGE for x in xs)
    assert any(all(v < -103.3 for v in row[:2]) for row in rn.probes()["renorm"]["logits"])  # fp32 0/0
