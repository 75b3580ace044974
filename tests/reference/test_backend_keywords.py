"""aiter's ``fused_moe`` keywords are written once (``reference.backend.FusedMoEKeywords``): both
backends read them from there, the API check's keyword table is derived from them, and a keyword
no backend knows is refused before any work."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fp4moe.reference.backend import KEYWORDS, POSITIONAL, PROJECT_KEYWORDS, FusedMoEKeywords
from fp4moe.reference.reference_backend import ReferenceBackend
from fp4moe.targets.aiter.backend import AITER_CALL_KEYWORDS, ALWAYS, FUSED_MOE_CONDITIONAL, AiterBackend


def test_the_api_check_reads_every_keyword_the_backends_pass_and_no_other():
    assert list(AITER_CALL_KEYWORDS["fused_moe"]) == [*POSITIONAL, *(k for k in KEYWORDS if k not in PROJECT_KEYWORDS)]
    conditional = {k for k, when in AITER_CALL_KEYWORDS["fused_moe"].items() if when != ALWAYS}
    assert conditional == set(FUSED_MOE_CONDITIONAL) == {"gate_mode", "swiglu_limit"}


def test_defaults_are_aiters():
    k = FusedMoEKeywords()
    assert (k.activation, k.quant_type, k.gate_mode, k.act_mode, k.hidden_pad, k.intermediate_pad) == \
        ("silu", "per_1x32", "interleave", "a16w4", 0, 0)
    assert [f.name for f in dataclasses.fields(FusedMoEKeywords)] == list(KEYWORDS)


@pytest.mark.parametrize("call", ["reference fused_moe", "aiter build_kwargs"])
def test_an_unknown_keyword_is_refused_before_any_work(call):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 64, generator=g)
    w = torch.randint(0, 256, (2, 64, 32), dtype=torch.uint8, generator=g)
    ids, tw = torch.tensor([[0], [1]]), torch.ones(2, 1)
    fn = ReferenceBackend().fused_moe if call == "reference fused_moe" else AiterBackend().build_kwargs
    with pytest.raises(TypeError, match="intermediate_pads"):
        fn(x, w, w, tw, ids, intermediate_pads=128)
