"""A row whose ``fused_moe`` call the spy refused: the call SGLang made, kept for the replay.

With ``--aiter-src`` the spy refuses a keyword that tree's ``fused_moe`` does not take, as the
real function would (``TypeError``), after recording the call. :func:`recorded_fields` gives the
failed row the recorded keywords, inputs and weight attributes, so ``sglang-check
--aiter-dispatch`` replays SGLang's own call into the executed dispatch (where the keyword is
refused again, by the tree's code, and named with both files) instead of skipping the row as one
that never reached ``fused_moe`` (e.g. DeepSeek-V4.1's ``quant_dtype_a`` into e4048607).
"""

from __future__ import annotations

#: the spy's refusal (drive.spy_fused_moe)
REFUSAL = "unexpected keyword argument"


def recorded_fields(calls: list[dict], exc: BaseException) -> dict:
    """The replay fields of the row's one recorded call when the spy refused it; else {}."""
    if len(calls) != 1 or not isinstance(exc, TypeError) or REFUSAL not in str(exc):
        return {}
    c = calls[0]
    return {"fused_moe_kwargs": c["kwargs"], "act_mode": c["act_mode"], "w_attrs": c["w_attrs"],
            "aiter_inputs": c["inputs"], "fused_moe_refused": str(exc)[:500]}
