"""The upgrade diff (``--base-src OLD``): the same kernel inputs through two trees, per output.

- :func:`compare_trees` -- per saved output: ``bitwise`` / ``within`` the kernel budget /
  ``DIFFER``; routing on its own (``fixed`` where only the head matches the tie-proof top-k);
  an output only one tree produced is ``not judged`` or ``info``;
- :func:`keyed` -- routing rows under their saved key.
"""

from __future__ import annotations

import torch

from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2
from fp4moe.targets.aiter.results import CheckResult, Result

#: routing weights of the same expert sets in both trees: equal to fp32 precision
ROUTING_WEIGHT_BOUND = 1e-6
#: the suffix of a routing row's label after its saved key
ROUTING_ROW_SUFFIX = ": vs the reference top-k"


def _one_side(name: str, key: str, head: dict, head_unjudged: dict | None, base_unjudged: dict | None) -> CheckResult:
    side, other = ("head", "base") if key in head else ("base", "head")
    unj = (base_unjudged if key in head else head_unjudged) or {}
    comp = next((c for c in unj if key.startswith(c)), None)
    if comp:
        return CheckResult(name, Result.NOT_JUDGED, f"only the {side} tree ran it: the {other} tree's {comp} was not judged ({unj[comp]})")
    # e.g. CDNA4_SCALE where the base has no utils/shuffle.py: each tree's own rows judge it
    return CheckResult(name, Result.INFO, f"not compared: only the {side} tree's run has it (the {other} tree "
                       "cannot take this case; see its info rows)")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a, b) or (a.dtype.is_floating_point and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(), b.nan_to_num()))


def _routing(name: str, key: str, a: torch.Tensor, b: torch.Tensor, hres: dict, bres: dict) -> CheckResult:
    bad = (a[0].sort(-1).values != b[0].sort(-1).values).any(-1)
    if bool(bad.any()):
        det = f"{int(bad.sum())}/{bad.numel()} tokens routed to different experts (first: token {int(bad.nonzero()[0])})"
        h, bs = hres.get(key), bres.get(key)
        if h == Result.PASS and bs == Result.FAIL:
            return CheckResult(name, Result.FIXED, f"DIFFER: {det}; head matches the tie-proof top-k, base does not: the upgrade fixes it")
        return CheckResult(name, Result.DIFFER, f"{det}; vs the tie-proof top-k: head {h or '?'}, base {bs or '?'}")
    err = float((a[1] - b[1]).abs().max())
    return CheckResult(name, Result.WITHIN if err <= ROUTING_WEIGHT_BOUND else Result.DIFFER,
                       f"same expert sets, max weight difference {err:.1e} (bound {ROUTING_WEIGHT_BOUND:.0e})")


def _output(name: str, a: torch.Tensor, b: torch.Tensor) -> CheckResult:
    nan_a, nan_b = int(a.float().isnan().sum()), int(b.float().isnan().sum())
    if nan_a or nan_b:
        return CheckResult(name, Result.DIFFER, f"NaN: {nan_a} (head) vs {nan_b} (base) of {a.numel()}")
    r, c = rel_l2(a, b), cosine_distance(a, b)
    ok = r <= KERNEL_REL_L2 and c <= KERNEL_COS_DIST
    return CheckResult(name, Result.WITHIN if ok else Result.DIFFER,
                       f"rel L2 {r:.2e}, cos dist {c:.1e} (kernel budget {KERNEL_REL_L2:g} / {KERNEL_COS_DIST:g})")


def compare_trees(head: dict, base: dict, head_rows: list[dict] | None = None, base_rows: list[dict] | None = None,
                  head_unjudged: dict | None = None, base_unjudged: dict | None = None) -> list[CheckResult]:
    """Per saved output: bitwise / within the kernel budget / DIFFER; routing on its own.

    The GEMM outputs were computed on the gate's own routing in both trees (the same ids and
    weights), so a routing change cannot move them; routing is compared apart, and where the two
    trees route differently the row says which tree matches the tie-proof top-k (``fixed``: the
    head does and the base does not -- the upgrade fixes it; ``DIFFER`` otherwise). An output only
    one tree produced is ``not judged`` when the other tree's component could not be judged, and
    ``info`` (not compared) when the other tree has no such case (e.g. no CDNA4_SCALE layout)."""
    hres = {r["check"]: r["result"] for r in head_rows or []}
    bres = {r["check"]: r["result"] for r in base_rows or []}
    out = []
    for key in sorted(set(head) | set(base)):
        name = f"upgrade: {key}"
        if key not in head or key not in base:
            out.append(_one_side(name, key, head, head_unjudged, base_unjudged))
            continue
        a, b = head[key], base[key]
        if a.shape != b.shape:
            out.append(CheckResult(name, Result.DIFFER, f"shape {tuple(a.shape)} (head) != {tuple(b.shape)} (base)"))
        elif _same_bits(a, b):
            out.append(CheckResult(name, Result.BITWISE, f"{a.numel()} values bitwise equal"))
        elif key.startswith("routing"):
            out.append(_routing(name, key, a, b, hres, bres))
        else:
            out.append(_output(name, a, b))
    return out


def keyed(rows: list[dict]) -> list[dict]:
    """Routing rows under their saved key (the row label before ': vs the reference top-k')."""
    return [dict(r, check=r["check"].rsplit(ROUTING_ROW_SUFFIX, 1)[0]) for r in rows]
