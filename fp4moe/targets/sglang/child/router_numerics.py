"""SGLang's own ``sqrtsoftplus`` routers run on the probe logits of ``fp4moe.targets.sglang.router_numerics``.
CHILD PROCESS ONLY.

:func:`run` imports each router implementation the release has (``IMPLEMENTATIONS``: SGLang's
Triton kernels, run by Triton's interpreter on a CPU -- ``TRITON_INTERPRET=1`` is set by the
cpu drive before SGLang is imported -- or on the GPU in gfx950 mode) and calls it through its
public entry on three probes (``fp4moe.targets.sglang.router_numerics`` lists them, builds the probes and judges):

- ``scores``: every x of ``PROBE_X`` as a logit, all experts kept, no renormalisation, scale 1
  (the raw sqrtsoftplus) -- where the entry can do that;
- ``renorm``: rows whose chosen experts all sit past the fp32 log1p edge (-20, -50) or past any
  fp32 softplus (-200: the 0/0 of the renormalisation), renormalised and scaled;
- ``pairs``: x beside a logit 0, renormalised (for the hash router, which always renormalises).

Nothing is judged here; the record carries the outputs as float lists.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from fp4moe.targets.sglang.router_numerics import IMPLEMENTATIONS

#: the smallest Triton whose interpreter runs SGLang's kernels on a CPU (the project's floor)
TRITON_MIN = (3, 8)


def triton_problem() -> str | None:
    """Why SGLang's Triton routers cannot run in this child, or None."""
    from fp4moe.targets.sglang.child import stubs

    if "triton" in {m.split(".")[0] for m in stubs.STUBBED}:
        return "triton is not installed (a stub in the SGLang child): pip install 'triton>=3.8' (ci/install.sh does)"
    import triton

    version = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())
    if version < TRITON_MIN:
        return f"triton {triton.__version__} < {'.'.join(map(str, TRITON_MIN))}: its interpreter cannot run SGLang's kernels"
    return None


def _call(name: str, fn, logits, k: int, renorm: bool, scale: float, device: str):
    """One call of implementation ``name``: (weights, ids) as float64 / int64 lists."""
    import torch

    x = torch.as_tensor(logits, dtype=torch.float32, device=device)
    if name == "moe_fused_gate":
        params = inspect.signature(fn).parameters
        kw = dict(topk=k, scoring_func="sqrtsoftplus", renormalize=renorm, routed_scaling_factor=scale,
                  apply_routed_scaling_factor_on_output=True)
        w, ids = fn(x, torch.zeros(x.shape[1], dtype=torch.float32, device=device), **{a: v for a, v in kw.items() if a in params})
    elif name == "rocm_router_gate":  # 384 experts: the probe's first, the rest filler the bias never picks
        from fp4moe.targets.sglang.router_numerics import CHOSEN_BIAS, FILLER_LOGIT, ROCM_GATE_EXPERTS

        n, w = x.shape
        full = torch.full((n, ROCM_GATE_EXPERTS), FILLER_LOGIT, dtype=torch.float32, device=device)
        full[:, :w] = x
        bias = torch.zeros(ROCM_GATE_EXPERTS, dtype=torch.float32, device=device)
        bias[:w] = CHOSEN_BIAS
        w_, ids = fn(full, bias, k, renorm, scale)
        return w_.detach().cpu().double().tolist(), ids.detach().cpu().long().tolist()
    else:  # hash_topk_triton: token t -> experts tid2eid[t] = 0..k-1; it always renormalises
        n = x.shape[0]
        tid2eid = torch.arange(k, dtype=torch.int32, device=device).repeat(n, 1)
        w, ids = fn(x, torch.arange(n, dtype=torch.int64, device=device), tid2eid, 0, scale, "sqrtsoftplus")
    return w.detach().cpu().double().tolist(), ids.detach().cpu().long().tolist()


def run(probes: dict, device: str = "cpu") -> dict:
    """{implementation: {"where", probe: {"weights", "ids"} | {"error"}} | {"absent"}}, or
    {"not_judged": why} when the Triton routers cannot run here."""
    why = triton_problem()
    if why:
        return {"not_judged": why}
    if device == "cpu":  # the interpreter without its redundant steps: nothing it computes changes
        from fp4moe.targets.aiter.kernels import interp_fastpath

        interp_fastpath.install()
    out: dict = {}
    for name, (module, entry, where) in IMPLEMENTATIONS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and (module == e.name or module.startswith(e.name + ".")):
                out[name] = {"absent": f"{module} is not in this release"}
                continue
            out[name] = {"error": f"importing {module}: {type(e).__name__}: {e}"[:300]}
            continue
        except Exception as e:  # the release's own import-time code
            out[name] = {"error": f"importing {module}: {type(e).__name__}: {e}"[:300]}
            continue
        src = inspect.getsource(sys.modules[module])
        if "sqrtsoftplus" not in src or not hasattr(mod, entry):
            out[name] = {"absent": f"{module} has no sqrtsoftplus {entry}"}
            continue
        res = {"where": where, "entry": f"{module}.{entry}"}
        for probe, p in probes.items():
            if (name == "hash_topk_triton") != (probe == "pairs") and probe != "renorm":
                continue  # the hash router always renormalises: its scores show through "pairs" (x beside 0), the others' raw
            try:
                w, ids = _call(name, getattr(mod, entry), p["logits"], p["k"], p["renorm"], p["scale"], device)
                res[probe] = {"weights": w, "ids": ids}
            except Exception as e:  # judged (FAIL naming it), never a drive failure
                res[probe] = {"error": f"{type(e).__name__}: {e}"[:300]}
        out[name] = res
    return out
