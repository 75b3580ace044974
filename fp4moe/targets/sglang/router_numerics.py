"""DeepSeek-V4's router numerics, per release: SGLang's ``sqrtsoftplus`` routers against the
float64 reference (``fp4moe.reference.routing``) over [-104, 200].

Index: ``PROBE_X`` (the logits tried: [-104, 200], dense around the fp32 underflow edge
``FP32_LOG1P_EDGE``), ``SCORE_RTOL``, :func:`probes` (what the child runs each implementation on),
:func:`weight_problems` (one probe's outputs vs the reference: ``fp4moe.reference.routing``,
float64), :func:`judge` (one ``router_numerics:<implementation>``
check per implementation of ``IMPLEMENTATIONS``, run by ``child/router_numerics``; a release without it is
``absent``, info, never FAIL).

What holds (SGLang PR #34459 "Fix DeepSeek-V4 routing: sqrtsoftplus underflow and unfloored
renorm", merged 2026-08-11; in 0.5.21, not in 0.5.19):

- a score whose fp32 softplus is a normal number is within ``SCORE_RTOL`` of the reference: the
  as-written ``log(1 + exp(x))`` is 0 for x <= -16.64 and fails here;
- below (the fp32 softplus subnormal, x < -87.3), a score may lose precision, never sign or
  finiteness: within sqrt(2^-126) per term;
- a renormalised row is the reference's, weight by weight; a row whose every score underflows
  fp32 (the 0/0 of the renormalisation) is finite, >= 0, sums to at most the scale (the floor
  gives 0): NaN fails.
"""

from __future__ import annotations

import math

import torch

from fp4moe.model.catalogue import ScoreMode
from fp4moe.reference import routing

#: log(1 + e^x) computed as written in fp32 is exactly 0 from here down: 1 + e^x rounds to 1
#: once e^x < 2^-24 (half an ulp of 1.0), i.e. x < -24 ln 2 = -16.636 (SGLang #34459's "-16.64")
FP32_LOG1P_EDGE = -24 * math.log(2)
#: fp32 sqrtsoftplus vs float64 where the fp32 softplus is a normal number: 1e-6 relative (~8 ulp
#: of fp32: exp, log1p, sqrt and a renormalising divide each round once, <= 0.5 ulp, plus their
#: propagation; SGLang #34459 measured 3.5e-7 worst over [-104, 200] after its fix)
SCORE_RTOL = 1e-6
#: [-104, 200]: 49 even points plus both sides of every point where fp32 code changes regime (the
#: log1p edge, softplus's threshold 20, expf overflow 88.72, a subnormal fp32 softplus from
#: -87.34, total underflow at -103.28)
PROBE_X = tuple(sorted({*(float(v) for v in torch.linspace(-104.0, 200.0, 49, dtype=torch.float64)),
                        FP32_LOG1P_EDGE - 1e-3, FP32_LOG1P_EDGE + 1e-3, -16.64, -16.0, -17.0, -20.0, -30.0, -50.0,
                        -87.0, -87.5, -100.0, -103.0, -103.5, -104.0, -1e-3, 0.0, 1e-3, 1.0, 19.99, 20.0, 20.01,
                        88.7, 88.8, 100.0, 200.0}))

#: the routed scaling factor the renormalising probes apply (a stand-in != 1, as target.ROUTED_SCALING)
SCALE = 1.5
#: sqrt of the smallest normal fp32: a score whose fp32 softplus is subnormal may be off by this
SUBNORMAL_SCORE = math.sqrt(2.0 ** -126)
CHECK = "router_numerics"
#: implementation -> (module, entry, where SGLang uses it)
IMPLEMENTATIONS = {
    "moe_fused_gate": ("sglang.kernels.ops.moe.moe_fused_gate", "moe_fused_gate",
                       "the Triton router (ungrouped DeepSeek-V4 top-k without aiter; SGLang #34459's item 1)"),
    "hash_topk_triton": ("sglang.kernels.ops.moe.triton_hash_topk", "hash_topk_triton",
                         "DeepSeek-V4's hash layers (0-2) on ROCm: dsv4.hash_topk dispatches here on HIP"),
    "rocm_router_gate": ("sglang.kernels.ops.moe.rocm_router_gate", "rocm_router_gate",
                         "the ROCm decode router on aiter (split-K gemv partials + gate; 'bitwise aiter's "
                         "topk_gating_kernel_opt'), 384 experts"),
}
#: rocm_router_gate takes exactly this many experts: a probe row is padded with FILLER_LOGIT
#: experts and the correction bias (which steers the choice only) keeps the probe's experts chosen
ROCM_GATE_EXPERTS, FILLER_LOGIT, CHOSEN_BIAS = 384, -1.0e4, 1.0e3


def probes() -> dict:
    """name -> {"logits" [R, N] float64 lists, "k", "renorm", "scale"} (see the child's docstring)."""
    xs = list(PROBE_X)
    width = 16  # experts per row (rocm_router_gate takes top-k <= 16); few rows: Triton's interpreter runs one program a row
    rows = [xs[i:i + width] + [0.0] * (width - len(xs[i:i + width])) for i in range(0, len(xs), width)]
    renorm = [[-20.0, -21.0, -30.0, -22.0], [-50.0, -60.0, -55.0, -70.0], [-200.0, -210.0, -205.0, -220.0],
              [-16.7, -30.0, -104.0, 5.0], [-104.0, -103.0, -100.0, -110.0]]
    return {"scores": {"logits": rows, "k": width, "renorm": False, "scale": 1.0},
            "renorm": {"logits": renorm, "k": 2, "renorm": True, "scale": SCALE},
            "pairs": {"logits": [[x, 0.0] for x in xs], "k": 2, "renorm": True, "scale": SCALE}}


def _want(logits: torch.Tensor, ids: list, renorm: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(reference weights, reference scores) of the experts the implementation chose."""
    idx = torch.tensor(ids, dtype=torch.int64)
    s = routing.scores(logits, ScoreMode.SQRTSOFTPLUS).gather(1, idx)
    return routing.topk_weights(logits, idx, ScoreMode.SQRTSOFTPLUS, renormalize=renorm, scaling=scale), s


def weight_problems(p: dict, got: dict) -> list[str]:
    """Probe ``p``'s outputs ``got`` ({"weights", "ids"}) vs the reference (module docstring)."""
    logits = torch.tensor(p["logits"], dtype=torch.float64)
    w = torch.tensor(got["weights"], dtype=torch.float64)
    ids = got["ids"]
    if list(w.shape) != [len(p["logits"]), p["k"]]:
        return [f"weights shape {list(w.shape)}, expected {[len(p['logits']), p['k']]}"]
    if any(not 0 <= e < logits.shape[1] for r in ids for e in r):
        return [f"expert ids outside [0, {logits.shape[1]})"]
    want, s = _want(logits, ids, p["renorm"], p["scale"])
    bad = []
    for r in range(w.shape[0]):
        row, x = w[r], [p["logits"][r][e] for e in ids[r]]
        if not torch.isfinite(row).all():
            bad.append(f"logits {x}: weights {row.tolist()} (not finite: an unfloored 0/0)")
            continue
        if (row < 0).any():
            bad.append(f"logits {x}: negative weight {row.tolist()}")
            continue
        if p["renorm"] and bool((s[r] ** 2 < 2.0 ** -126).all()):  # every score underflows fp32: the floor
            if float(row.sum()) > p["scale"] * (1 + SCORE_RTOL):
                bad.append(f"logits {x}: weights sum {float(row.sum()):.9g} > {p['scale']:g}")
            continue
        total = float(s[r].sum()) if p["renorm"] else 1.0
        atol = p["scale"] * SUBNORMAL_SCORE * p["k"] / total
        err = (row - want[r]).abs()
        over = err > SCORE_RTOL * want[r].abs() + atol
        if over.any():
            i = int(over.nonzero()[0])
            bad.append(f"x={x[i]:.6g}: {float(row[i]):.9g}, reference {float(want[r][i]):.9g}"
                       + (f" (rel {float(err[i] / want[r][i]):.3g})" if want[r][i] else ""))
    return bad


def judge(rec: dict | None) -> tuple[list[dict], str | None]:
    """One check per implementation ({"name", "row", "ok", "compared", "detail"}), and why the
    numerics could not be judged (exit 2) or None; ``rec`` None: not asked, nothing to judge
    (``target.drive`` always asks)."""
    if rec is None:  # not asked (the request carried no probes)
        return [], None
    if "not_judged" in rec:
        return [], f"router numerics: {rec['not_judged']}"
    out = []
    ps = probes()
    for name, r in rec.items():
        what = f"SGLang {r.get('entry', name)} sqrtsoftplus vs float64 over [-104, 200], renorm 0/0 floor"
        if "absent" in r:
            out.append({"name": f"{CHECK}:{name}", "row": "release", "ok": True, "compared": what,
                        "detail": f"absent (info): {r['absent']}"})
            continue
        if "error" in r:
            out.append({"name": f"{CHECK}:{name}", "row": "release", "ok": False, "compared": what, "detail": r["error"]})
            continue
        bad, n = [], 0
        for probe, got in r.items():
            if probe in ("where", "entry"):
                continue
            n += 1
            if "error" in got:
                bad.append(f"{probe}: raised {got['error']}")
                continue
            bad += [f"{probe}: {b}" for b in weight_problems(ps[probe], got)]
        out.append({"name": f"{CHECK}:{name}", "row": "release", "ok": not bad and n > 0, "compared": f"{what} ({r['where']})",
                    "detail": ("; ".join(bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "")) if bad else
                    f"{n} probes within rtol {SCORE_RTOL:g}; every 0/0 row finite"})
    return out, None
