"""What the gate asserts about the SGLang it drove, per catalogue row: ``ROW_CHECKS``, a table.

Each check compares what SGLang's own code produced (the child's record and tensors,
``fp4moe.targets.sglang.target``) with this project's reference of the same raw checkpoint. A
check is one small function ``(RowContext) -> Outcome`` and one entry of ``ROW_CHECKS``, in the
order they are judged and printed (``attr`` is a family: one outcome per attribute aiter reads):

``gate_mode``        ``fused_moe``'s ``gate_mode`` (aiter's default "separated" when absent) is
                     the layout the weights were shuffled in (``is_guinterleave``)
``processed_bytes``  the processed w13/w2 and their scales, unshuffled with the inverse of the
                     layout SGLang shuffled with, equal ``fp4moe.reference.weight_path`` at align 128 byte
                     for byte (shapes first: align 256 pads DeepSeek-V4-Pro TP8 384 -> 512)
``scale_pad_bytes``  no 0xFF (e8m0 NaN) byte in the scale tensors ``fused_moe`` receives, and
                     in particular none in the padded channels
``pad_contract``     ``intermediate_pad`` / ``hidden_pad`` that ``fused_moe`` receives equal what
                     the weights it receives are padded by (from their shapes), and the layer's
                     recorded pads (SGLang PR #27858 padded 384 -> 512 and passed 0)
``layer_tensors``    the quant info and ``fused_moe`` get the layer's processed tensors
``quant_info_fields`` every ``AiterMoeQuantInfo`` field reaches its ``fused_moe`` keyword
                     (probed with a distinct value per field, not only the pads; fp8_activations
                     must become ``quant_dtype_a`` = fp8 with bf16 input and interleaved gate/up)
``quant_info_fields_each`` the same, one field at a time (the others as the builder made them)
``layer_choices``    act mode, swiglu limit, doweight, gate mode, activation and pads ``fused_moe``
                     got equal what the model config and the catalogue row ask for
``attr:T.N``         each attribute aiter reads from w1 / w2 matches the layout the bytes are in
``aiter_inputs``     ``fused_moe``'s hidden_states/topk_weight/topk_ids dtypes and shapes, made by
                     SGLang's registered standard -> aiter pre-permute
``runner_paths``     every pre-permute SGLang registers to the aiter runner is known
``empty_batch``      the runner at 0 tokens returns an empty [0, H] bf16 output without calling
                     ``fused_moe`` (SGLang's early return; aiter has no M == 0 guard)
``expert_ids``       SGLang's router on a padded batch -> fused_moe: every real row's ids in the
                     kernel's id space, padded rows never a sentinel (-1) nor weighted
``routing_once``     the weights reaching fused_moe equal ``fp4moe.reference.routing``'s (float64; bias
                     and routed_scaling_factor applied once), per expert and per row sum
``moe_path``         which implementation the runner calls at the row's token count with SGLang's
                     defaults (aiter's fused_moe, the gfx950 small-M kernel, an unknown one); a
                     path around aiter is judged by its output vs the reference
``layout_env``       the layer rebuilt under every combination of the environment variables read
                     on this path: the weights' layout equals the gate mode fused_moe gets
``footprint``        routed-expert bytes per layer and rank of SGLang's layer built at full
                     DeepSeek-V4 size (on the meta device) within fp4moe/data/footprint_budget.json
``output``           the runner's output equals the reference MoE of the raw checkpoint,
                     bitwise (see ``OUTPUT_TOLERANCE``; the kernel budget in gfx950 mode)

The per-run ``drive`` check (SGLang's code ran the row down to one ``aiter.fused_moe`` call) and
the verdict are ``fp4moe.gates.sglang_check``'s. Adding a check: one function here and one entry
in ``ROW_CHECKS`` (docs/architecture.md shows one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import NamedTuple

import torch

from fp4moe.model.checkpoint import load_moe_layer
from fp4moe.mx.mxfp4 import BLOCK_SIZE
from fp4moe.reference import layout, moe, quant_info, weight_path
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.kernel_budget import (
    KERNEL_COS_DIST,
    KERNEL_REL_L2,
    cosine_distance,
    rel_l2,
)
from fp4moe.reference.reference_backend import ReferenceBackend
from fp4moe.targets.aiter import tensor_attrs
from fp4moe.targets.aiter.dispatch import numerics as dispatch_numerics
from fp4moe.targets.aiter.dispatch import table as dispatch_table
from fp4moe.targets.sglang.modes import Mode

NAN_BYTE = 0xFF
#: Bitwise: the spy runs this project's reference MoE (``fp4moe.reference.moe``) on the bytes and
#: keywords SGLang hands ``fused_moe``; the expectation runs the same code on
#: ``fp4moe.reference.weight_path``'s bytes with the pads it recorded. Equal bytes, pads, mask, limit and
#: gate mode give identical float32 operations (both sides single-threaded, so the summation
#: order is the same too), so any difference at all is a finding.
OUTPUT_TOLERANCE = "bitwise (same reference code on the same bytes and keywords; any difference is a finding)"
#: gfx950 mode (the real ``aiter.fused_moe`` computed the output): the project's kernel budget,
#: ``fp4moe.reference.kernel_budget.KERNEL_REL_L2`` / ``KERNEL_COS_DIST`` (6e-3 / 2e-5, derived there and in
#: docs/reference.md "Kernel budget": a correct kernel differs from the reference by summation
#: order and at most a bf16 accumulation of the top-k partials, 4.4e-3 measured; the same budget
#: tests/targets/aiter/test_gfx950_aiter.py applies to aiter's kernel), plus a finite output.
KERNEL_TOLERANCE = (f"rel-L2 <= {KERNEL_REL_L2:g} and cosine distance <= {KERNEL_COS_DIST:g} "
                    "(fp4moe.reference.kernel_budget, real aiter kernel vs reference)")
ALIGN = weight_path.DEFAULT_ALIGN
#: FP4 (e2m1) codes whose value is zero: +0 (0b0000) and -0 (0b1000); a padded weight byte
#: holds two codes, so a pad byte is inert exactly when ``byte & FP4_MAGNITUDE_BITS == 0``
FP4_MAGNITUDE_BITS = 0x77
#: aiter shuffle name -> (kind, is_guinterleave position or True when implied, gate_up position)
SHUFFLE_ARGS = {
    "shuffle_weight": ("weight", 2, 3), "moe_shuffle_weight": ("weight", 2, 3),
    "shuffle_scale": ("scale", 2, 3), "moe_shuffle_scale": ("scale", 2, 3),
    "shuffle_weight_a16w4": ("weight", True, 2), "shuffle_scale_a16w4": ("scale", True, 2),
}
#: where each expected per-layer choice comes from (printed with a mismatch)
CHOICE_SOURCE = {
    "act_mode": "config model_type deepseek_v41 -> a8w4 (SGLang's deepseek_v4.py fp8_activations), else aiter's "
                "token bound rule with the layout's gate mode",
    "swiglu_limit": "config.json swiglu_limit", "doweight_stage1": "DeepSeek-V4 weights the top-k at combine",
    "gate_mode": "the layout SGLang shuffled the bytes in", "activation": "config hidden_act silu",
    "intermediate_pad": f"catalogue I_p padded to {ALIGN}", "hidden_pad": "H is a multiple of the alignment",
}


@dataclass
class Check:
    name: str
    row: str
    ok: bool
    compared: str  # what was compared, always printed
    detail: str = ""  # the numbers / the failure

    def line(self, version: str) -> str:
        tag = "ok  " if self.ok else "FAIL"
        s = f"{tag} {self.name:<17} {self.row:<16} {self.compared}"
        if self.detail:
            s += f"\n     {'':<17} {'':<16} -> {self.detail}" if self.ok else f"\n     sglang {version}: {self.detail}"
        return s

    def as_dict(self) -> dict:
        return asdict(self)


class Outcome(NamedTuple):
    """What one check found for one row: held or not, what was compared, the numbers."""
    ok: bool
    compared: str
    detail: str = ""


# --------------------------------------------------------------------------- pure rules


def shuffle_flag(calls: list[dict], kind: str, gate_up: bool) -> bool | None:
    """is_guinterleave of SGLang's aiter shuffle call of ``kind`` ("weight"/"scale") for w13
    (gate_up) or w2; None when there was no such call."""
    for c in calls:
        k, itlv_at, gu_at = SHUFFLE_ARGS.get(c["name"], (None, None, None))
        if k != kind:
            continue
        args, kw = c["args"], c["kwargs"]
        gu = kw.get("gate_up", args[gu_at] if len(args) > gu_at else False)
        itlv = True if itlv_at is True else kw.get("is_guinterleave", args[itlv_at] if len(args) > itlv_at else False)
        if bool(gu) == gate_up:
            return bool(itlv)
    return None


def first_diff(a: torch.Tensor, b: torch.Tensor) -> str:
    ne = (a != b).nonzero()
    return f"{int((a != b).sum())} of {a.numel()} bytes differ, first at {tuple(ne[0].tolist())}: {int(a[tuple(ne[0])])} vs {int(b[tuple(ne[0])])}"


def pad_mask(name: str, shape, ip: int, p: int) -> torch.Tensor:
    """True on the padded channels of an unshuffled tensor ([E, 2P, .] gate|up rows for w13 and
    its scales, [E, H, P/2] bytes or [E, H, P/32] scales for w2)."""
    m = torch.zeros(tuple(shape), dtype=torch.bool)
    if name.startswith("w13"):
        m[:, ip:p] = True
        m[:, p + ip:] = True
    else:
        real_cols = ip // 2 if name == "w2" else ip // BLOCK_SIZE
        m[:, :, real_cols:] = True
    return m


def pad_bytes_harmful(name: str, pad: torch.Tensor) -> str:
    """Why pad bytes would change what a kernel that ignores the pad computes ("" when inert):
    a weight pad byte with a non-zero FP4 code, or a scale pad byte that is e8m0 NaN (0xFF).
    Any finite scale over zero codes multiplies zero: inert."""
    if name.endswith("_scale"):
        n = int((pad == NAN_BYTE).sum())
        return f"{n} scale pad bytes 0xFF (e8m0 NaN)" if n else ""
    n = int(((pad & FP4_MAGNITUDE_BITS) != 0).sum())
    if not n:
        return ""
    first = int(pad[(pad & FP4_MAGNITUDE_BITS) != 0][0])
    return f"{n} weight pad bytes hold non-zero FP4 codes (first 0x{first:02X})"


def reference_layer(checkpoint: str | None, tp: int = 1, tp_rank: int | None = None, raw=None):
    """This project's reading of the checkpoint: the rank-0 partition file as is, or rank
    ``tp_rank``'s TP shard of the whole layer (``fp4moe.model.checkpoint``, independent of SGLang's
    loader); ``raw``: that reading already made (the drive reads it before its work directory goes)."""
    if raw is None:
        raw = load_moe_layer(checkpoint, 0) if tp_rank is None else load_moe_layer(checkpoint, 0, tp_size=tp, tp_rank=tp_rank)
    return raw, weight_path.process_fp4_moe_weights(*raw.tensors(), align=ALIGN, shuffle=False)


def sglang_unshuffled(processed: dict, e: int, h: int, itlv13: bool, itlv2: bool):
    """SGLang's processed tensors back in row-major [E, rows, cols] order; padded intermediate P."""
    w13, w2 = processed["w13_weight"], processed["w2_weight"]
    p = w13.shape[1] // 2
    u13 = layout.unshuffle_weight(w13, is_guinterleave=itlv13, gate_up=True)
    u2 = layout.unshuffle_weight(w2, is_guinterleave=itlv2, gate_up=False)
    s13 = layout.unshuffle_scale(processed["w13_weight_scale_inv"], e * 2 * p, h // BLOCK_SIZE, e, itlv13, gate_up=True)
    s2 = layout.unshuffle_scale(processed["w2_weight_scale_inv"], e * h, w2.shape[2] * 2 // BLOCK_SIZE, e, itlv2, gate_up=False)
    return {"w13": u13, "w13_scale": s13.reshape(e, 2 * p, -1), "w2": u2, "w2_scale": s2.reshape(e, h, -1)}, p


def expected_choices(cfg: dict, row, ip: int, padded: int, layout_gm: str | None, tokens: int) -> dict:
    """What fused_moe must get for this layer, from the model config and the catalogue row."""
    from fp4moe.targets.sglang import modes

    if cfg.get("model_type") == "deepseek_v41":
        act = "a8w4"
    else:
        act = modes.effective_act_mode({"gate_mode": layout_gm or "separated"}, tokens)
    return {"act_mode": act, "swiglu_limit": cfg.get("swiglu_limit"), "doweight_stage1": False,
            "gate_mode": layout_gm, "activation": "Silu" if cfg.get("hidden_act", "silu") == "silu" else cfg.get("hidden_act"),
            "intermediate_pad": padded - ip, "hidden_pad": 0}


def empty_batch_problems(eb: dict | None, hidden: int) -> list[str]:
    """What is wrong with the child's empty-batch record ([] when it holds): an exception, an
    output other than bf16 [0, hidden], or any fused_moe call at 0 tokens."""
    if eb is None:
        return ["the child recorded no empty-batch run"]
    if "error" in eb:
        bad = [f"raised {eb['error']}"]
    else:
        got = eb.get("output") if isinstance(eb.get("output"), dict) else {}
        want = {"shape": [0, hidden], "dtype": "bfloat16"}
        bad = [] if {k: got.get(k) for k in want} == want else \
            [f"output {got.get('dtype')} {got.get('shape')} (expected bfloat16 {want['shape']})"]
    if eb.get("fused_moe_calls"):
        bad.append(f"fused_moe called {eb['fused_moe_calls']} time(s) with 0 tokens (aiter's fused_moe has no "
                   "M == 0 guard; SGLang's runner returns early)")
    return bad


def attr_ok(a, got, bytes_shuffled: bool, ip: int) -> tuple[bool, str]:
    """Does the value aiter reads match the layout the bytes are in? (ok, what was expected)."""
    if a.meaning == "layout_shuffled":
        return got is bytes_shuffled, (f"{bytes_shuffled} (the bytes are in aiter's pre-shuffled layout)" if bytes_shuffled
                                       else "False (the bytes are not shuffled)")
    if a.meaning == "real_intermediate":
        return got in ("<absent>", None, ip), f"absent or {ip} (the unpadded I_p)"
    if a.meaning == "fp4x2":
        return got == "torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2 (aiter dtypes.fp4x2)"
    return False, f"unknown to this gate: aiter reads it ({', '.join(a.where)}) and the table has no meaning for it"


# --------------------------------------------------------------------------- one row's context


@dataclass
class RowContext:
    """Everything the checks of one driven row read; derived values computed once, when first asked."""

    rec: dict  # the row's record (fp4moe.targets.sglang.record.DRIVEN_ROW)
    tensors: dict | None  # {"processed": {...}, "output": T} the child returned, or None
    inputs: dict  # what the parent wrote for the row (fp4moe.targets.sglang.target.Drive.inputs)
    row: object  # fp4moe.targets.sglang.target.Row
    budget: list
    mode: str = "cpu"
    attrs: tuple = ()
    attrs_origin: str = ""

    @property
    def label(self) -> str:
        return self.rec["label"]

    @property
    def kw(self) -> dict:
        return self.rec["fused_moe_kwargs"]

    @cached_property
    def reference(self):
        return reference_layer(self.inputs.get("checkpoint"), self.inputs.get("tp", 1), self.inputs.get("tp_rank"),
                               raw=self.inputs.get("raw"))

    @cached_property
    def itlv(self) -> tuple:
        """is_guinterleave of SGLang's shuffles: (w13 weight, w2 weight, w13 scale)."""
        calls = self.rec["shuffle_calls"]
        return shuffle_flag(calls, "weight", True), shuffle_flag(calls, "weight", False), shuffle_flag(calls, "scale", True)

    @property
    def gate_mode(self) -> str:
        return self.kw.get("gate_mode", "separated (aiter default: keyword absent)")

    @property
    def gate_mode_value(self) -> str:
        return self.gate_mode.split(" ")[0]

    @cached_property
    def unshuffled(self):
        itlv13, itlv2, _ = self.itlv
        return sglang_unshuffled(self.tensors["processed"], self.row.experts, self.row.hidden, bool(itlv13), bool(itlv2))

    @property
    def config(self) -> dict:
        return self.inputs.get("config") or {}

    @property
    def x_tokens(self) -> int:
        return int(self.inputs["tokens"][0].shape[0])

    @cached_property
    def want_choice(self) -> dict:
        itlv13 = self.itlv[0]
        layout_gm = ("interleave" if itlv13 else "separated") if itlv13 is not None else None
        return expected_choices(self.config, self.row, self.row.ip, self.reference[1].padded_intermediate, layout_gm,
                                self.x_tokens)


# --------------------------------------------------------------------------- the checks


def check_gate_mode(c: RowContext) -> Outcome:
    itlv13, itlv2, s_itlv13 = c.itlv
    flags = {itlv13, itlv2, s_itlv13}
    what = "fused_moe gate_mode vs is_guinterleave of SGLang's shuffle_weight/shuffle_scale calls"
    if None in flags or not c.rec.get("is_shuffled"):
        return Outcome(False, what, f"the weights were not shuffled by aiter's shuffle_weight/shuffle_scale (calls: "
                       f"{[k['name'] for k in c.rec['shuffle_calls']]}, is_shuffled={c.rec.get('is_shuffled')})")
    want = "interleave" if itlv13 else "separated"
    return Outcome(len(flags) == 1 and c.gate_mode_value == want, what,
                   f"gate_mode={c.gate_mode!s}; weights shuffled with is_guinterleave w13={itlv13} w2={itlv2} w13 scale={s_itlv13}")


def _byte_findings(c: RowContext) -> tuple[list[str], list[str], int]:
    """(harmful differences, inert pad differences, real bytes compared) of SGLang's bytes vs the reference."""
    ref = c.reference[1]
    sgl, p_sgl = c.unshuffled
    bad, inert, n_real = [], [], 0
    for name, want in {"w13": ref.w13, "w13_scale": ref.w13_scale, "w2": ref.w2, "w2_scale": ref.w2_scale}.items():
        got = sgl[name]
        if tuple(got.shape) != tuple(want.shape):
            bad.append(f"{name} shape {tuple(got.shape)} vs {tuple(want.shape)}")
            continue
        pad = pad_mask(name, got.shape, c.row.ip, p_sgl)
        real = ~pad
        n_real += int(real.sum())
        if not torch.equal(got[real], want[real]):  # real bytes: bitwise
            g, w_ = got.clone(), want.clone()
            g[pad] = w_[pad] = 0
            bad.append(f"{name} real bytes: {first_diff(g, w_)}")
        if torch.equal(got[pad], want[pad]):
            continue
        harmful = pad_bytes_harmful(name, got[pad])
        if harmful:  # a kernel that ignores the pad would read these wrongly
            bad.append(f"{name} pad bytes: {harmful}")
        else:
            vals = sorted({int(v) for v in got[pad][got[pad] != want[pad]].unique()[:4]})
            inert.append(f"{name}: {int((got[pad] != want[pad]).sum())} pad bytes differ from the reference "
                         f"(bytes {', '.join(f'0x{v:02X}' for v in vals)}), numerically inert")
    return bad, inert, n_real


def check_processed_bytes(c: RowContext) -> Outcome:
    bad, inert, n_real = _byte_findings(c)
    via = c.rec.get("loader", {})
    loaded = (f"; TP rank {via['tp_rank']}/{via['tp']} shard taken by SGLang's FusedMoE.weight_loader "
              f"({via.get('weight_loader_calls')} calls)" if "tp_rank" in via else "")
    what = (f"w13/w2 + scales unshuffled vs fp4moe.reference.weight_path align {ALIGN}: I_p {c.row.ip} -> SGLang "
            f"{c.unshuffled[1]}, reference {c.reference[1].padded_intermediate}; real bytes bitwise, pad bytes by meaning{loaded}")
    if bad:
        return Outcome(False, what, "; ".join(bad + inert))
    return Outcome(True, what, f"{n_real} real bytes equal" + (
        f"; INERT pad difference (not a regression): {'; '.join(inert)}" if inert else "; pads equal"))


def check_scale_pad_bytes(c: RowContext) -> Outcome:
    sgl, p_sgl = c.unshuffled
    ip = c.row.ip
    pad13 = torch.cat([sgl["w13_scale"][:, ip:p_sgl].flatten(), sgl["w13_scale"][:, p_sgl + ip:].flatten()])
    pad2 = sgl["w2_scale"][:, :, ip // BLOCK_SIZE:].flatten()
    n_pad_ff = int((pad13 == NAN_BYTE).sum() + (pad2 == NAN_BYTE).sum())
    n_all_ff = sum(int((c.tensors["processed"][k] == NAN_BYTE).sum()) for k in ("w13_weight_scale_inv", "w2_weight_scale_inv"))
    return Outcome(n_pad_ff == 0 and n_all_ff == 0,
                   f"0xFF bytes in the scales fused_moe receives ({pad13.numel() + pad2.numel()} padded-channel bytes)",
                   f"{n_pad_ff} 0xFF bytes in padded channels, {n_all_ff} in the whole shuffled scales"
                   if (n_pad_ff or n_all_ff) else "none")


def check_pad_contract(c: RowContext) -> Outcome:
    ip, p_sgl = c.row.ip, c.unshuffled[1]
    want_ipad, want_hpad = p_sgl - ip, 0
    got_ipad, got_hpad = c.kw.get("intermediate_pad", 0), c.kw.get("hidden_pad", 0)
    lp = c.rec["layer_pads"]
    # the layer's own record (absent in releases before the pads were recorded) may not disagree
    ok = got_ipad == want_ipad and got_hpad == want_hpad and lp.get("intermediate_pad") in (want_ipad, None) and \
        lp.get("hidden_pad") in (want_hpad, None)
    return Outcome(ok, f"fused_moe intermediate_pad/hidden_pad vs the padding of the weights it receives "
                       f"(I_p {ip} -> {p_sgl}, H {c.row.hidden})",
                   f"weights padded {ip} -> {p_sgl} (pad {want_ipad}) but fused_moe got intermediate_pad={got_ipad}, "
                   f"hidden_pad={got_hpad}; layer recorded {lp}" if not ok else
                   f"intermediate_pad={got_ipad}, hidden_pad={got_hpad}")


def check_layer_tensors(c: RowContext) -> Outcome:
    same = dict(c.rec["quant_info_is_layer"], **{f"fused_moe.{k}": v for k, v in c.rec["fused_moe_receives_layer"].items()})
    not_same = [k for k, v in same.items() if not v]
    return Outcome(not not_same, "quant info and fused_moe tensors are the layer's processed ones (same storage)",
                   f"not the layer's: {not_same}" if not_same else f"{len(same)} tensors")


def _lost_fields(probe: dict, held) -> list[str]:
    return [f"{f} -> {v['kwarg']} (sent {v.get('sent')}, got {v['got']})" for f, v in probe.items() if not held(v["reached"])]


def check_quant_info_fields(c: RowContext) -> Outcome:
    probe = c.rec["field_probe"]
    lost = _lost_fields(probe, lambda r: r is not False)
    unknown = [f for f, v in probe.items() if v["reached"] is None]
    return Outcome(not lost and not unknown,
                   f"each AiterMoeQuantInfo field set to a distinct value -> its fused_moe keyword ({len(probe)} fields)",
                   "; ".join(lost + [f"{f}: no known keyword" for f in unknown]) if (lost or unknown)
                   else ", ".join(sorted(probe)))


def check_quant_info_fields_each(c: RowContext) -> Outcome:
    each = c.rec.get("field_probe_each")
    if each is None:
        return Outcome(False, "each AiterMoeQuantInfo field set alone -> its fused_moe keyword",
                       "the child recorded no one-at-a-time probe")
    lost = _lost_fields(each, lambda r: r is True)
    return Outcome(not lost, f"each AiterMoeQuantInfo field set alone (the others as the builder made them) -> "
                             f"its fused_moe keyword ({len(each)} fields)", "; ".join(lost) if lost else ", ".join(sorted(each)))


def check_layer_choices(c: RowContext) -> Outcome:
    kw = c.kw
    act = kw.get("activation")
    got = {"act_mode": c.rec.get("act_mode"), "swiglu_limit": kw.get("swiglu_limit"),
           "doweight_stage1": kw.get("doweight_stage1", False), "gate_mode": c.gate_mode_value,
           "activation": (act or {}).get("name") if isinstance(act, dict) else act,
           "intermediate_pad": kw.get("intermediate_pad", 0), "hidden_pad": kw.get("hidden_pad", 0)}
    want = c.want_choice
    wrong = [f"{k}: expected {v!r} ({CHOICE_SOURCE[k]}), SGLang passed {got.get(k)!r}" for k, v in want.items() if got.get(k) != v]
    return Outcome(not wrong, f"act mode, swiglu limit, doweight, gate mode, activation, pads fused_moe got vs the model "
                              f"config (model_type {c.config.get('model_type')}) and the catalogue row",
                   "; ".join(wrong) if wrong else ", ".join(f"{k}={v}" for k, v in want.items()))


def check_attrs(c: RowContext) -> dict[str, Outcome]:
    """One outcome per attribute of the aiter target's table (``fp4moe.targets.aiter.tensor_attrs``)."""
    shuffled = {"w1": c.itlv[0] is not None, "w2": c.itlv[1] is not None}
    out = {}
    for a in c.attrs:
        got = (c.rec.get("w_attrs") or {}).get(a.tensor, {}).get(a.name, "<not recorded>")
        ok, want = attr_ok(a, got, shuffled[a.tensor], c.row.ip)
        out[f"attr:{a.tensor}.{a.name}"] = Outcome(ok, f"fused_moe's {a.tensor}.{a.name} (aiter reads it at "
                                                       f"{', '.join(a.where[:2])}; table: {c.attrs_origin})",
                                                   f"{a.tensor}.{a.name}={got!r}; expected {want}")
    return out


def check_aiter_inputs(c: RowContext) -> Outcome:
    ai = c.rec.get("aiter_inputs") or {}
    n, top_k, h = c.x_tokens, int(c.inputs["tokens"][2].shape[1]), c.row.hidden
    want = {"hidden_states": ("bfloat16", [n, h]), "topk_weight": ("float32", [n, top_k]), "topk_ids": ("int32", [n, top_k])}
    bad = [f"{k}: {ai.get(k, {}).get('dtype')} {ai.get(k, {}).get('shape')} (aiter needs {d} {sh})"
           for k, (d, sh) in want.items() if not isinstance(ai.get(k), dict)
           or ai[k].get("dtype") != d or ai[k].get("shape") != sh]
    if c.rec.get("pre_permute_output") is None:
        bad.append("the runner input was not made by SGLang's pre_permute_standard_to_aiter (not registered?)")
    return Outcome(not bad, "fused_moe's hidden_states/topk_weight/topk_ids dtypes and shapes, runner input made by "
                            "SGLang's registered standard->aiter pre-permute",
                   "; ".join(bad) if bad else ", ".join(f"{k} {d} {sh}" for k, (d, sh) in want.items()))


def check_runner_paths(c: RowContext) -> Outcome:
    paths = c.rec.get("runner_paths") or {"error": "not recorded"}
    unknown = [f"{fmt} ({v['function']})" for fmt, v in paths.items() if isinstance(v, dict) and v.get("how") == "unknown"]
    problems = ([paths["error"]] if "error" in paths else []) + [f"unknown pre-permute path to aiter: {u}" for u in unknown]
    if "error" not in paths and "standard" not in paths:
        problems.append("no standard -> aiter pre-permute registered")
    return Outcome(not problems, "the pre-permute paths SGLang registers to the aiter runner are all known, the standard "
                                 "one driven", "; ".join(problems) if problems else
                   "; ".join(f"{fmt}: {v['how'].split(':')[0]}" for fmt, v in paths.items()))


def check_empty_batch(c: RowContext) -> Outcome:
    h = c.row.hidden
    bad = empty_batch_problems(c.rec.get("empty_batch"), h)
    return Outcome(not bad, f"the runner at 0 tokens (input via the same pre-permute): an empty [0, {h}] bf16 output, "
                            "no fused_moe call", "; ".join(bad) if bad else f"output bfloat16 [0, {h}], 0 fused_moe calls")


def check_footprint(c: RowContext) -> Outcome:
    row, fp = c.row, c.rec["footprint"]
    entry = next((b for b in c.budget if b.model == row.model and b.tp == row.tp and b.ep == 1 and b.role == "budget"), None)
    if entry is None:
        return Outcome(False, "routed-expert bytes/layer/rank at full size", f"no budget entry for {row.model} tp{row.tp} ep1")
    got, cap = fp["bytes_per_layer"], entry.max_bytes_per_layer
    shapes = ", ".join(f"{k} {v['shape']}" for k, v in fp["tensors"].items())
    return Outcome(got <= cap, f"routed-expert bytes/layer/rank of SGLang's layer at full size ({row.pc.local_experts} "
                               f"experts, H {row.pc.model.hidden}) vs budget {cap}",
                   f"{got} bytes ({got / cap:.3f} of budget, +{got - cap} over); {shapes}" if got > cap
                   else f"{got} bytes ({got / cap:.3f} of budget)")


def _routed(c: RowContext) -> tuple[dict, str | None]:
    """The routed batch's record and why it cannot be judged (None when it can)."""
    r = c.rec.get("routed") or {}
    if "error" in r:
        return r, f"not judged: the routed batch raised {r['error']} at {' <- '.join(reversed(r.get('where', [])))}"
    if "topk_ids" not in r:
        return r, f"not judged: fused_moe was called {r.get('fused_moe_calls', 0)} times for the routed batch"
    return r, None


def expert_id_problems(ids: list, weights: list, n_real: int, n_ids: int) -> list[str]:
    """Why the ``topk_ids`` / ``topk_weight`` that reached the kernel break the id contract ([]
    when they hold): a real row's id outside [0, n_ids); a padded row (index >= ``n_real``)
    with an id outside it (a sentinel such as -1 that the kernel would index with) or any
    non-zero weight (routed as a real token)."""
    bad = []
    for t, (row, w) in enumerate(zip(ids, weights)):
        out = [e for e in row if not 0 <= e < n_ids]
        kind = "real" if t < n_real else "padded"
        if out:
            bad.append(f"{kind} row {t}: ids {out} outside [0, {n_ids})")
        if t >= n_real and any(v != 0 for v in w):
            bad.append(f"padded row {t}: weights {w} (routed as a real token; must be 0)")
    return bad


def check_expert_ids(c: RowContext) -> Outcome:
    r, why = _routed(c)
    n_ids = len(c.row.expert_mask)
    what = (f"topk_ids/topk_weight reaching fused_moe from SGLang's select_experts on a padded batch "
            f"({r.get('non_padded')} real of {r.get('rows')} rows): real ids in [0, {n_ids}), padded rows in range with weight 0")
    if why:
        return Outcome(False, what, why)
    bad = expert_id_problems(r["topk_ids"], r["topk_weight"], r["non_padded"], n_ids)
    if len(r["topk_ids"]) != r["rows"]:
        bad.insert(0, f"fused_moe got {len(r['topk_ids'])} rows of {r['rows']}")
    return Outcome(not bad, what, "; ".join(bad[:4]) + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else "") if bad
                   else f"{r['rows'] - r['non_padded']} padded rows: ids in range, weights 0; router {', '.join(r['router'])}")


def routing_problems(ids: list, weights: list, want_w, want_ids, rtol: float) -> list[str]:
    """Real rows: the experts and weights that reached the kernel vs the reference routing
    (matched by expert id), each weight and each row's sum within ``rtol``."""
    bad = []
    for t, (row, w) in enumerate(zip(ids, weights)):
        ref = dict(zip(want_ids[t].tolist(), want_w[t].tolist()))
        if sorted(row) != sorted(ref):
            bad.append(f"row {t}: experts {sorted(row)}, reference {sorted(ref)}")
            continue
        off = [(e, v, ref[e]) for e, v in zip(row, w) if abs(v - ref[e]) > rtol * abs(ref[e])]
        if off:
            e, v, want = off[0]
            bad.append(f"row {t}: expert {e} weight {v:.9g}, reference {want:.9g} (x{v / want:.6g})" if want else
                       f"row {t}: expert {e} weight {v:.9g}, reference 0")
        s, ws = sum(w), sum(ref.values())
        if abs(s - ws) > rtol * abs(ws):
            bad.append(f"row {t}: weights sum {s:.9g}, reference {ws:.9g}")
    return bad


def check_routing_once(c: RowContext) -> Outcome:
    from fp4moe.model.catalogue import ScoreMode
    from fp4moe.reference import routing
    from fp4moe.targets.sglang.router_numerics import SCORE_RTOL

    r, why = _routed(c)
    scale = float(c.inputs.get("routed_scaling_factor") or 1.0)
    what = (f"per-token weights and experts reaching fused_moe vs the float64 reference routing (sqrtsoftplus, bias "
            f"steers the choice, renormalised, routed_scaling_factor {scale:g} once), sums included, rtol {SCORE_RTOL:g}")
    if why:
        return Outcome(False, what, why)
    # the scale is applied once: in the top-k (then SGLang's epilogue skips it) or in the epilogue
    folded = r["fused_in_topk"] is not False
    n = r["non_padded"]
    rt = c.inputs["routing"]
    want_w, want_ids = routing.reference_topk(rt["router_logits"][:n], len(r["topk_ids"][0]), ScoreMode.SQRTSOFTPLUS,
                                              renormalize=True, scaling=scale if folded else 1.0, bias=rt["correction_bias"])
    bad = routing_problems(r["topk_ids"][:n], r["topk_weight"][:n], want_w, want_ids, SCORE_RTOL)
    where = f"scale folded into the top-k: {r['fused_in_topk']} (SGLang's is_routed_scaling_factor_fused_in_topk)"
    return Outcome(not bad, what, "; ".join(bad[:3]) + f" ({len(bad)} rows; {where})" if bad else
                   f"{n} real rows, sums {scale if folded else 1.0:g}; {where}; router {', '.join(r['router'])}")


def reference_output(c: RowContext, act: str, path_options: dict | None = None) -> torch.Tensor:
    """The reference MoE of the raw checkpoint for the row's tokens, single-threaded like the child.
    ``path_options``: the rounding points of the path an executed dispatch took
    (:data:`DISPATCH_REFERENCE`), through ``fp4moe.reference.moe`` itself."""
    x, w, ids = c.inputs["tokens"]
    shuffled_w = weight_path.process_fp4_moe_weights(*c.reference[0].tensors(), align=ALIGN)
    info = quant_info.build_quant_info(shuffled_w, swiglu_limit=c.config.get("swiglu_limit") or None,
                                       expert_mask=torch.tensor(c.row.expert_mask, dtype=torch.int32))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs single-threaded too: same float32 summation order
    try:
        if path_options is None:
            return quant_info.call_fused_moe(ReferenceBackend(), x, w, ids, info, act_mode=act)
        kw = quant_info.fused_moe_kwargs(info, act)
        ew = ShuffledExpertWeights(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, kw["gate_mode"])
        opts = {"swiglu_limit": kw["swiglu_limit"], **path_options}
        if isinstance(opts.get("gate_up_dtype"), str):  # numerics' options name the dtype
            opts["gate_up_dtype"] = getattr(torch, opts["gate_up_dtype"])
        return moe.fused_moe_reference(x, ew, w, ids, hidden_pad=kw["hidden_pad"], intermediate_pad=kw["intermediate_pad"],
                                       act_mode=act, doweight_stage1=kw["doweight_stage1"], expert_mask=kw["expert_mask"],
                                       **opts)
    finally:
        torch.set_num_threads(threads)


#: ``--aiter-dispatch``: the reference's rounding options for the path the executed ``fused_moe``
#: took, by its stage-1 path (the pairing of ``fp4moe.targets.aiter.dispatch.numerics.CASES``: the
#: CK 2-stage path MXFP4-quantizes the stage-1 output, CK-tile split-k stores gate/up in bf16)
DISPATCH_REFERENCE = {"CK 2-stage": dispatch_numerics.MX4, "CK-tile": dispatch_numerics.BF16_GU, "FlyDSL": {}, "Opus": {}}


def dispatch_path(entry: dict) -> str | None:
    """The stage-1 path of an executed call's op records (``dispatch_table.STAGE_OPS``), or None."""
    ops = [dispatch_table.STAGE_OPS[c["op"]] for c in entry.get("calls", []) if c.get("op") in dispatch_table.STAGE_OPS]
    return next((op.path for op in ops if op.stage == 1), None)


def _output_what(c: RowContext, act: str, against: str) -> str:
    x, _, ids = c.inputs["tokens"]
    row, rec = c.row, c.rec
    return (f"runner output [{x.shape[0]} tokens, top-{ids.shape[1]}, {act}" + (f" via {rec['a8w4_via']}" if rec.get("a8w4_via") else "")
            + (f" (fused_moe ran {rec.get('act_mode')})" if rec.get("act_mode") != act else "")
            + (f", EP mask {sum(row.expert_mask)}/{len(row.expert_mask)}" if row.ep > 1 else "")
            + f"] vs {against}, ")


def _dispatch_output(c: RowContext, act: str) -> Outcome:
    """The output of the executed dispatch vs the reference with the rounding points of its path,
    bitwise (every computing stand-in rounds where that path rounds)."""
    entry = c.rec["dispatch"]
    path = dispatch_path(entry)
    what = _output_what(c, act, f"reference MoE of the raw checkpoint with the {path} path's rounding points")
    if entry.get("not_computed"):
        return Outcome(False, what.rstrip(", "), f"n/a: not judged, the stand-ins did not compute it ({entry['not_computed']})")
    if path not in DISPATCH_REFERENCE:
        return Outcome(False, what.rstrip(", "), f"n/a: not judged, no reference options for the path {path!r}")
    opts = DISPATCH_REFERENCE[path]
    want, got = reference_output(c, act, dict(opts)), c.tensors["output"]
    if got.shape != want.shape or got.dtype != want.dtype:
        return Outcome(False, what.rstrip(", "), f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}")
    n, rel = int((got != want).sum()), rel_l2(got, want)
    detail = f"{n} of {got.numel()} values differ, rel-L2 {rel:.3g} (options {opts or 'none'})"
    if n and c.config.get("swiglu_limit"):  # is the difference the clamp the path lost?
        unclamped = reference_output(c, act, dict(opts, swiglu_limit=None))
        detail += f"; equals the unclamped reference: {bool(torch.equal(got, unclamped))}"
    return Outcome(n == 0, what + "bitwise", detail)


def check_output(c: RowContext) -> Outcome:
    x, _, ids = c.inputs["tokens"]
    act = c.want_choice["act_mode"]  # from the model config, never from what SGLang ran
    if c.rec.get("dispatch"):  # SGLang's call ran into an aiter tree's executed fused_moe
        return _dispatch_output(c, act)
    what = _output_what(c, act, "reference MoE of the raw checkpoint")
    want, got = reference_output(c, act), c.tensors["output"]
    if got.shape != want.shape or got.dtype != want.dtype:
        return Outcome(False, what.rstrip(", "), f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}")
    diff = (got.float() - want.float()).abs()
    n, rel = int((got != want).sum()), rel_l2(got, want)
    if c.mode == Mode.GFX950:  # the real kernel: the project's kernel budget, not bitwise
        cos, finite = cosine_distance(got, want), bool(torch.isfinite(got).all())
        return Outcome(finite and rel <= KERNEL_REL_L2 and cos <= KERNEL_COS_DIST, what + KERNEL_TOLERANCE.split(" (")[0],
                       f"rel-L2 {rel:.3g}, cosine distance {cos:.3g}, max |diff| {float(diff.max()):.3g}, "
                       f"{n} of {got.numel()} values differ, finite={finite}")
    return Outcome(n == 0, what + OUTPUT_TOLERANCE.split(" (")[0],
                   f"{n} of {got.numel()} values differ, max |diff| {float(diff.max()):.3g}, rel-L2 {rel:.3g}")


def layout_env_problems(combos: list[dict]) -> list[str]:
    """Per environment combination: the gate mode ``fused_moe`` got (aiter's default separated
    when absent) equals the gate/up layout SGLang shuffled w13 in (an unshuffled w13 is the
    checkpoint's gate|up halves: separated), and ``is_shuffled`` says whether it shuffled."""
    bad = []
    for cb in combos:
        env = ", ".join(f"{k}={'<unset>' if v is None else v}" for k, v in cb["env"].items()) or "(no variables)"
        if "error" in cb:
            bad.append(f"[{env}] raised {cb['error']}")
            continue
        itlv = shuffle_flag(cb["shuffle_calls"], "weight", True)
        layout = "interleave" if itlv else "separated"
        gm = cb.get("gate_mode")
        gm = gm or "separated"
        gm = gm.get("name", "").lower() if isinstance(gm, dict) else str(gm)
        if gm != layout:
            bad.append(f"[{env}] weights {layout} (shuffle is_guinterleave={itlv}) but fused_moe gate_mode={gm}")
        if bool(cb.get("is_shuffled") is True) != (itlv is not None):
            bad.append(f"[{env}] is_shuffled={cb.get('is_shuffled')!r} but the weights were "
                       f"{'shuffled' if itlv is not None else 'not shuffled'}")
    return bad


def check_layout_env(c: RowContext) -> Outcome:
    le = c.rec.get("layout_env") or {}
    combos = le.get("combinations") or []
    what = (f"weights' layout (is_shuffled, gate/up interleave) vs fused_moe's gate_mode under each of {len(combos)} "
            f"combinations of {', '.join(le.get('names') or []) or 'no'} environment variable(s) read on this path")
    if not combos:
        return Outcome(False, what, "not judged: the child recorded no combination")
    bad = layout_env_problems(combos)
    return Outcome(not bad, what, "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "") if bad
                   else "layout and gate mode agree in every combination")


FUSED_MOE_PATH = "aiter.fused_moe"


def moe_path_verdict(path: str, got, want, gfx950: bool) -> tuple[bool, str]:
    """A path other than aiter's ``fused_moe`` is judged by its output against the reference
    (bitwise in cpu mode, the kernel budget in gfx950 mode); one that returned no output, or an
    unknown one, fails naming it."""
    if path == FUSED_MOE_PATH:
        return True, "aiter.fused_moe (its output is the output check's)"
    if got is None:
        return False, f"{path}: bypasses aiter.fused_moe and returned no output to judge"
    if got.shape != want.shape:
        return False, f"{path}: bypasses aiter.fused_moe; output shape {tuple(got.shape)} vs {tuple(want.shape)}"
    n, rel = int((got != want).sum()), rel_l2(got, want)
    ok = (rel <= KERNEL_REL_L2 and cosine_distance(got, want) <= KERNEL_COS_DIST and bool(torch.isfinite(got).all())) \
        if gfx950 else n == 0
    return ok, (f"{path}: bypasses aiter.fused_moe; its output vs the reference MoE: {n} of {got.numel()} values differ, "
                f"rel-L2 {rel:.3g}")


def check_moe_path(c: RowContext) -> Outcome:
    mp = c.rec.get("moe_path") or {}
    what = f"which MoE implementation SGLang's runner calls at {mp.get('tokens')} tokens ({mp.get('switch')})"
    if "path" not in mp:
        return Outcome(False, what, "not recorded")
    if mp["path"] == FUSED_MOE_PATH:
        return Outcome(True, what, moe_path_verdict(FUSED_MOE_PATH, None, None, False)[1])
    want = reference_output(c, c.want_choice["act_mode"])
    ok, detail = moe_path_verdict(mp["path"], c.tensors.get("moe_path_output"), want, c.mode == Mode.GFX950)
    return Outcome(ok, what, detail)


class RowCheck(NamedTuple):
    name: str
    judge: Callable  # (RowContext) -> Outcome, or {name: Outcome} for a family
    needs_tensors: bool = True  # judged from the tensors the child returned for the row


#: The checks of one driven row, in the order they are judged and printed.
ROW_CHECKS = (
    RowCheck("gate_mode", check_gate_mode, needs_tensors=False),  # first: it decides how the bytes are read back
    RowCheck("processed_bytes", check_processed_bytes),
    RowCheck("scale_pad_bytes", check_scale_pad_bytes),
    RowCheck("pad_contract", check_pad_contract),
    RowCheck("layer_tensors", check_layer_tensors),
    RowCheck("quant_info_fields", check_quant_info_fields),
    RowCheck("quant_info_fields_each", check_quant_info_fields_each),
    RowCheck("layer_choices", check_layer_choices),
    RowCheck("attr", check_attrs),
    RowCheck("aiter_inputs", check_aiter_inputs),
    RowCheck("runner_paths", check_runner_paths),
    RowCheck("empty_batch", check_empty_batch),
    RowCheck("expert_ids", check_expert_ids, needs_tensors=False),
    RowCheck("routing_once", check_routing_once, needs_tensors=False),
    RowCheck("moe_path", check_moe_path),
    RowCheck("layout_env", check_layout_env, needs_tensors=False),
    RowCheck("footprint", check_footprint),
    RowCheck("output", check_output),
)
#: The one check judged per row before the table: SGLang's code ran it to one fused_moe call.
DRIVE_CHECK = "drive"
#: Every check name a row can have (the tier parametrises over it).
CHECKS = (DRIVE_CHECK, *(c.name for c in ROW_CHECKS if c.name != "attr"),
          *(f"attr:{t}.{n}" for t, n in tensor_attrs.KNOWN))


def judge_row(ctx: RowContext) -> list[Check]:
    """Every ``ROW_CHECKS`` entry for one driven row; without the row's tensors only those that
    need none, and ``processed_bytes`` failing to say so."""
    out: list[Check] = []
    for entry in ROW_CHECKS:
        if entry.needs_tensors and ctx.tensors is None:
            out.append(Check("processed_bytes", ctx.label, False, "SGLang's processed tensors",
                             "the child saved no tensors for this row"))
            break
        found = entry.judge(ctx)
        for name, o in (found.items() if isinstance(found, dict) else [(entry.name, found)]):
            out.append(Check(name, ctx.label, bool(o.ok), o.compared, o.detail))
    return out
