"""A row whose ``fused_moe`` call was refused: the call SGLang made, kept for the judge.

A keyword that tree's ``fused_moe`` does not take is refused (``TypeError``) after the call was
recorded: by the tree's own code with ``--aiter-dispatch`` (the executed ``fused_moe``), by the
spy told the tree's signature with ``--aiter-src`` alone. :func:`recorded_fields` gives the failed
row the recorded keywords, inputs and weight attributes, so the row is judged as a refused call
naming both files (and, with a tree executed, SGLang's keywords still run at full size) instead
of being skipped as one that never reached ``fused_moe`` (e.g. DeepSeek-V4.1's ``quant_dtype_a``
into e4048607).
"""

from __future__ import annotations

#: the refusal (Python's for a keyword a function does not take; the spy's says the same)
REFUSAL = "unexpected keyword argument"


def recorded_fields(calls: list[dict], exc: BaseException) -> dict:
    """The kept fields of the row's one recorded call when it was refused; else {}."""
    if len(calls) != 1 or not isinstance(exc, TypeError) or REFUSAL not in str(exc):
        return {}
    c = calls[0]
    return {"fused_moe_kwargs": c["kwargs"], "act_mode": c["act_mode"], "w_attrs": c["w_attrs"],
            "aiter_inputs": c["inputs"], "fused_moe_refused": str(exc)[:500]}
