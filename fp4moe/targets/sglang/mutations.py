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
}
