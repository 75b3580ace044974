"""Harness child for test_compute_dispatch.py: ``python dispatch_numerics_child.py SPEC_JSON``.

It only computes: loads the tree's real ``aiter/fused_moe.py`` (fp4moe.targets.aiter.dispatch.loader,
every compiled op recorded and stood in, the computing stand-ins of
fp4moe.targets.aiter.dispatch.compute), runs ``fused_moe`` on the parent's tensors with every
fresh allocation poisoned, and returns the output and the ops it reached. The parent computes
the reference and judges.

SPEC: {"tree": path, "env": {AITER_*: value}, "gate_mode": str, "intermediate_pad": int,
"swiglu_limit": float | null, "shuffled": bool}. Inputs ("case"): w1, w2, w1_scale, w2_scale
(uint8 bytes), x (bf16), topk_weights (float32), topk_ids (int32).
"""

import json
import os
import sys
from pathlib import Path

import torch

from fp4moe.infra import runner

SCHEMA = runner.RecordSchema("dispatch-numerics", 1, {"ops": list})
#: the op arguments the record keeps (what says which path ran and what each stage was told)
KEPT_ARGS = ("kernelName", "kernel_name", "block_m", "unit_size", "tile_m", "sort_block_m", "inter_dim_pad",
             "model_dim_pad", "n_padded_zeros", "k_padded_zeros", "out_dtype", "gate_mode", "split_k", "splitk",
             "swiglu_limit", "is_shuffled", "mode", "act", "activation")
#: launches of aiter/ops/flydsl/moe_kernels.py that fused_moe reaches, stood in here if the loader does not
EXTRA_LAUNCHES = ("flydsl_silu_and_mul_interleaved",)


def main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    with runner.child_session(SCHEMA) as s:
        s.stage("loading the tree's fused_moe")
        from fp4moe.targets.aiter.dispatch import compute, loader
        from fp4moe.targets.aiter.dispatch.standins import ComputingRecorder

        rec = ComputingRecorder()
        scratch = Path(os.getcwd()) / "dispatch"
        scratch.mkdir(exist_ok=True)
        ld = loader.load_fused_moe(loader.locate(spec["tree"]), scratch, rec, env=spec.get("env") or {})
        kernels = sys.modules["aiter.ops.flydsl.moe_kernels"]
        for name in (n for n in EXTRA_LAUNCHES if n not in getattr(loader, "FLYDSL_LAUNCHES", ())):
            setattr(kernels, name, rec.flydsl_launch(name, getattr(kernels, name)))
        aiter = sys.modules["aiter"]
        t = s.input_tensors("case")
        fp4 = torch.float4_e2m1fn_x2
        w1, w2 = t["w1"].view(fp4), t["w2"].view(fp4)
        w1.is_shuffled = w2.is_shuffled = bool(spec.get("shuffled", True))
        s.stage("running fused_moe")
        with compute.poisoned_allocations():
            out = ld.fused_moe.fused_moe(
                t["x"], w1, w2, t["topk_weights"], t["topk_ids"], activation=aiter.ActivationType.Silu,
                quant_type=aiter.QuantType.per_1x32, w1_scale=t["w1_scale"].view(torch.float8_e8m0fnu),
                w2_scale=t["w2_scale"].view(torch.float8_e8m0fnu), intermediate_pad=int(spec.get("intermediate_pad", 0)),
                swiglu_limit=spec.get("swiglu_limit"), gate_mode=spec.get("gate_mode", "interleave"))
        s.put_tensors("out", {"out": out})
        ops = [{"op": c["op"], "computed": bool(c.get("computed")),
                "args": {k: v for k, v in c.get("args", {}).items() if k in KEPT_ARGS}}
               for c in rec.calls if not c["op"].startswith("_") or "opus" in c["op"]]
        s.finish({"ops": ops})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
