"""The SGLang mutant catalogue: each known failure of this path as a rewrite of SGLang's own
functions, by name. Data only: the SGLang child applies them (``child/mutants.py``, named in
the drive request); the zoo (``fp4moe.gates.zoo.sglang_mutants``) lists them.
"""

from __future__ import annotations

#: Environment variable the sglang tier reads (tests/targets/sglang/conftest.py): the mutant to apply.
MUTANT_ENV = "FP4MOE_SGLANG_MUTANT"

#: name -> (origin, description)
MUTANTS = {
    "pad_not_propagated": ("SGLang PR #27858", "the recorded intermediate_pad is dropped before the quant info is built"),
    "align_256": ("SGLang PR #31450", "fp4_k_align 256: DeepSeek-V4-Pro TP8 pads 384 -> 512"),
    "gate_up_one_block": ("padding layout", "gate and up padded as one block: up rows land in the gate half"),
    "scale_pad_0xff": ("NaN from padding", "scale padding buffers filled with 0xFF (e8m0 NaN)"),
    "is_shuffled_lost": ("kernel-selection attribute", "the quant-info builder's fp4 views lose is_shuffled"),
    "all_mxfp8_activations": ("activation mode", "every FP4 layer runs with MXFP8 activations (fp8_activations forced)"),
    "swiglu_limit_fp8_only": ("branch-only keyword", "the runner forwards swiglu_limit only in the fp8-activation branch"),
    "topk_renormalised": ("routing weights", "the runner renormalises the top-k weights to sum 1"),
    "topk_bf16_prepermute": ("runner path", "pre_permute_standard_to_aiter casts the top-k weights to bf16"),
    "gate_up_swap_padding": ("padding layout", "gate and up swapped in the w13 padding copy (seen on padded rows)"),
    "torch_empty_pads": ("uninitialised padding", "padding buffers from torch.empty instead of torch.zeros"),
    "padded_ids_sentinel": ("vLLM #57036 / SGLang #39804", "padded token rows reach fused_moe with topk_ids -1 (the HIP "
                            "padded-row fill 0 -> -1 in topk.py's _post_process_topk_ids)"),
    "routed_scale_twice": ("tokenspeed #1231", "routed_scaling_factor applied again after aiter's topk_gating folded it "
                           "(select_experts' fold_scale_after_routing forced on)"),
    "sqrtsoftplus_as_written": ("SGLang #34459", "the Triton router's sqrtsoftplus back to log(1 + exp(-|x|)) as written: "
                                "0 in fp32 for x <= -16.64"),
    "smallm_bypass_le40": ("SGLang #40204 (open)", "a small-M MXFP4 kernel on gfx950 takes every batch of <= 40 tokens "
                           "(the small-M kernel's shape gate relaxed to the token count): aiter.fused_moe is bypassed"),
    "gu_itlv_read_twice": ("vLLM #52442", "the runner reads SGLANG_USE_AITER_MOE_GU_ITLV again with default false while "
                           "fp8.py shuffled with its default true: interleaved weights, separated gate mode"),
    "weight_pad_fp4_nonzero": ("padding value", "weight padding buffers filled with FP4 code 0x2 (+1.0) instead of zeros; "
                               "a kernel that ignores intermediate_pad would read them"),
}

#: Variants that must PASS (numerically inert differences): applied by the same mechanism as a
#: mutant (``sglang-check --mutant NAME``, the child's ``mutants.apply``), never listed by the
#: zoo, which requires every entry of :data:`MUTANTS` killed. name -> (origin, description)
INERT_VARIANTS = {
    "scale_pad_0x7f": ("inert padding", "scale padding buffers filled with 0x7F (e8m0 2^0 = 1.0) over FP4-zero weight "
                       "pads: every padded product is 1.0 x 0 = 0, the output is unchanged"),
}


def is_inert(name: str) -> bool:
    """True for a variant that must pass (:data:`INERT_VARIANTS`), False for a zoo mutant."""
    return name in INERT_VARIANTS
