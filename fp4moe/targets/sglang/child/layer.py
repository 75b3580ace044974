"""SGLang's FP4 MoE layer built the way its model loader builds it, and loaded.

Index: :func:`make_layer` (``Fp8Config(is_fp4_experts=True)`` -> ``Fp8MoEMethod.create_weights``),
:func:`sglang_loader` / :func:`load_with_sglang` (SGLang's own ``FusedMoE.weight_loader`` takes a TP
rank's shard of the whole checkpoint), :func:`load_shard` (rank 0's partition copied in),
:func:`full_size_footprint` (the same layer at full DeepSeek-V4 size on ``meta``). CHILD PROCESS ONLY.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path


class Dispatcher:
    def __init__(self, expert_mask):
        self.expert_mask_gpu = expert_mask


def runner_config(runner_mod, fp8, e, h, ip, top_k, swiglu_limit, layer):
    base = sys.modules[runner_mod.__name__.rsplit(".", 1)[0] + ".base"]
    import torch

    fields = {f.name for f in dataclasses.fields(base.MoeRunnerConfig)}
    kw = dict(num_experts=e, num_local_experts=e, hidden_size=h, intermediate_size_per_partition=ip, layer_id=0,
              top_k=top_k, params_dtype=torch.bfloat16, activation="silu", is_gated=True, swiglu_limit=swiglu_limit,
              inplace=False, layer=layer)
    return base.MoeRunnerConfig(**{k: v for k, v in kw.items() if k in fields})


def make_layer(fp8, runner_mod, *, e, h, ip, tp, top_k, swiglu_limit, fp8_activations=False, tp_rank=None):
    import torch

    from fp4moe.targets.sglang.child import patches

    patches.set_flags(fp8, patches.tp_functions(tp))
    params = __import__("inspect").signature(fp8.Fp8Config.__init__).parameters
    kw = dict(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic", weight_block_size=[128, 128])
    if "is_fp4_experts" in params:
        kw["is_fp4_experts"] = True
    cfg = fp8.Fp8Config(**kw)
    cfg.is_fp4_experts = True  # what SGLang's model loader injects for DeepSeek-V4 FP4 checkpoints
    layer = torch.nn.Module()
    layer.moe_tp_size = tp
    layer.moe_ep_size = 1
    layer.num_experts = layer.num_local_experts = e
    layer.deepgemm_mxfp8_input = None
    if fp8_activations:  # what sglang/srt/models/deepseek_v4.py sets on the experts for deepseek_v41
        layer.fp8_activations = True
    rc = runner_config(runner_mod, fp8, e, h, ip, top_k, swiglu_limit, layer)
    layer.moe_runner_config = rc
    method = fp8.Fp8MoEMethod(cfg)
    method.moe_runner_config = rc

    loader = None
    if tp_rank is not None:  # the full checkpoint, sharded by SGLang's own FusedMoE.weight_loader
        loader = sglang_loader(fp8, rc, cfg, method, e=e, tp=tp, rank=tp_rank)
    method.create_weights(layer, num_experts=e, hidden_size=h, intermediate_size_per_partition=ip,
                          params_dtype=torch.bfloat16, weight_loader=loader[0].weight_loader if loader else None)
    layer.fp4moe_loader = loader
    return layer, method


PARAMS = ("w13_weight", "w13_weight_scale_inv", "w2_weight", "w2_weight_scale_inv")
FUSED_MOE_MODULE = "sglang.srt.layers.moe.fused_moe_triton.layer"
#: DeepSeek-V4 checkpoint names -> the names SGLang's expert mapping expects
#: (``FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj")`` as
#: deepseek_v4.py calls it; its ``_prepare_deepseek_v4_weights`` renames w1/w2/w3 and ``scale``)
DSV4_PROJ = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
DSV4_KIND = {"weight": "weight", "scale": "weight_scale_inv"}


def sglang_loader(fp8, rc, cfg, method, *, e: int, tp: int, rank: int):
    """SGLang's own ``FusedMoE`` for its ``weight_loader`` only: built without ``__init__``
    (which needs a process group, a dispatcher and a runner backend), with the attributes its
    loading path reads (0.5.23: ``weight_loader`` -> ``_weight_loader_impl`` -> ``_load_w13`` /
    ``_load_w2``; TP rank/size, no EP, no expert-location metadata, no presharded weights)."""
    import importlib

    import torch

    fm_cls = importlib.import_module(FUSED_MOE_MODULE).FusedMoE
    fm = fm_cls.__new__(fm_cls)
    torch.nn.Module.__init__(fm)
    attrs = dict(moe_tp_size=tp, moe_tp_rank=rank, moe_ep_size=1, moe_ep_rank=0, tp_size=tp, tp_rank=rank,
                 num_experts=e, num_local_experts=e, num_fused_shared_experts=0, layer_id=0, quant_config=cfg,
                 quant_method=method, scheme=None, moe_runner_config=rc, use_presharded_weights=False,
                 use_padded_loading=False, use_triton_kernels=False, use_flashinfer_trtllm_moe=False,
                 uses_expert_location=False, _expert_storage_rank=0, _num_local_routed=e, _num_global_routed=e,
                 _has_fused_shared=False)
    for k, v in attrs.items():
        object.__setattr__(fm, k, v)
    return fm, fm_cls


def load_with_sglang(layer, fm, fm_cls, checkpoint: str, e: int) -> dict:
    """Every expert tensor of the full checkpoint through ``param.weight_loader`` (SGLang's
    ``FusedMoE.weight_loader``) as deepseek_v4.py's ``load_weights`` routes it: SGLang, not this
    project, takes this rank's TP shard."""
    from safetensors import safe_open

    from fp4moe.model.checkpoint import KEY_RE

    mapping = fm_cls.make_expert_params_mapping(ckpt_gate_proj_name="gate_proj", ckpt_down_proj_name="down_proj",
                                                ckpt_up_proj_name="up_proj", num_experts=e)
    calls = 0
    for f in sorted(Path(checkpoint).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for key in h.keys():
                m = KEY_RE.match(key)
                if not m or int(m.group(1)) != 0:
                    continue
                name = f"experts.{m.group(2)}.{DSV4_PROJ[m.group(3)]}.{DSV4_KIND[m.group(4)]}"
                for param_name, weight_name, expert_id, shard_id in mapping:
                    if weight_name in name:
                        resolved = name.replace(weight_name, param_name)
                        param = getattr(layer, resolved.split(".", 1)[1])
                        param.weight_loader(param, h.get_tensor(key), resolved, shard_id=shard_id, expert_id=expert_id)
                        calls += 1
                        break
                else:
                    raise KeyError(f"{key} ({name}): no entry of FusedMoE.make_expert_params_mapping matches")
    return {"weight_loader_calls": calls}


def load_shard(layer, raw) -> dict:
    """Copy rank 0's checkpoint bytes into the parameters SGLang created (shape-checked)."""
    import torch

    created = {}
    for pname, t in zip(PARAMS, (raw.w13, raw.w13_scale, raw.w2, raw.w2_scale)):
        p = getattr(layer, pname)
        created[pname] = {"shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")}
        if tuple(p.shape) != tuple(t.shape) or p.element_size() != 1:
            raise ValueError(f"create_weights made {pname} {tuple(p.shape)} {p.dtype}; the checkpoint shard is "
                             f"{tuple(t.shape)} bytes")
        p.data.view(torch.uint8).copy_(t.view(torch.uint8))
    return created


def u8(t):
    import torch

    return t.detach().view(torch.uint8).contiguous().clone() if t.element_size() == 1 else t.detach().clone()


def full_size_footprint(fp8, runner_mod, row: dict, limit) -> dict:
    """SGLang's own create_weights + process_weights_after_loading at full size on ``meta``."""
    import torch

    full = row["full"]
    with torch.device("meta"):
        layer, method = make_layer(fp8, runner_mod, e=full["experts"], h=full["hidden"],
                                   ip=full["intermediate_per_partition"], tp=row["tp"], top_k=row["top_k"], swiglu_limit=limit)
        method.process_weights_after_loading(layer)
    tensors = {p: {"shape": list(getattr(layer, p).shape), "dtype": str(getattr(layer, p).dtype).replace("torch.", ""),
                   "nbytes": getattr(layer, p).numel() * getattr(layer, p).element_size()} for p in PARAMS}
    return {"tensors": tensors, "bytes_per_layer": sum(t["nbytes"] for t in tensors.values()),
            "intermediate_pad": getattr(layer, "intermediate_pad", None)}
