"""What the gate asserts about the SGLang it drove, per catalogue row.

Each check compares what SGLang's own code produced (the child's record and tensors,
``fp4moe.targets.sglang.target``) with this project's reference of the same raw checkpoint:

``drive``            SGLang's code ran the row down to one ``aiter.fused_moe`` call (an exception in
                     ``process_weights_after_loading``, the quant-info builder or the runner fails
                     it; one while setting the layer up -- ``create_weights``, loading, the
                     meta-device footprint build -- means the harness could not drive: exit 2)
``processed_bytes``  the processed w13/w2 and their scales, unshuffled with the inverse of the
                     layout SGLang shuffled with, equal ``fp4moe.reference.weight_path`` at align 128 byte
                     for byte (shapes first: align 256 pads DeepSeek-V4-Pro TP8 384 -> 512)
``scale_pad_bytes``  no 0xFF (e8m0 NaN) byte in the scale tensors ``fused_moe`` receives, and
                     in particular none in the padded channels
``pad_contract``     ``intermediate_pad`` / ``hidden_pad`` that ``fused_moe`` receives equal what
                     the weights it receives are padded by (from their shapes), and the layer's
                     recorded pads (SGLang PR #27858 padded 384 -> 512 and passed 0)
``layer_tensors``    the quant info and ``fused_moe`` get the layer's processed tensors
``gate_mode``        ``fused_moe``'s ``gate_mode`` (aiter's default "separated" when absent) is
                     the layout the weights were shuffled in (``is_guinterleave``)
``quant_info_fields`` every ``AiterMoeQuantInfo`` field reaches its ``fused_moe`` keyword
                     (probed with a distinct value per field, not only the pads; fp8_activations
                     must become ``quant_dtype_a`` = fp8 with bf16 input and interleaved gate/up)
``empty_batch``      the runner at 0 tokens returns an empty [0, H] bf16 output without calling
                     ``fused_moe`` (SGLang's early return; aiter has no M == 0 guard)
``footprint``        routed-expert bytes per layer and rank of SGLang's layer built at full
                     DeepSeek-V4 size (on the meta device) within fp4moe/data/footprint_budget.json
``output``           the runner's output equals the reference MoE of the raw checkpoint,
                     bitwise (see ``OUTPUT_TOLERANCE``)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from fp4moe.model.checkpoint import load_moe_layer
from fp4moe.mx.mxfp4 import BLOCK_SIZE
from fp4moe.reference import layout, quant_info, weight_path
from fp4moe.reference.footprint import load_budget
from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2
from fp4moe.reference.reference_backend import ReferenceBackend
from fp4moe.targets.aiter import tensor_attrs
from fp4moe.targets.sglang.source import missing_module_line

CHECKS = ("drive", "processed_bytes", "scale_pad_bytes", "pad_contract", "layer_tensors", "gate_mode",
          "quant_info_fields", "quant_info_fields_each", "layer_choices", "aiter_inputs", "runner_paths", "empty_batch", "footprint",
          "output") + tuple(f"attr:{t}.{n}" for t, n in tensor_attrs.KNOWN)
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


#: aiter shuffle name -> (is_guinterleave position or True when implied, gate_up position)
_SHUFFLE_ARGS = {
    "shuffle_weight": ("weight", 2, 3), "moe_shuffle_weight": ("weight", 2, 3),
    "shuffle_scale": ("scale", 2, 3), "moe_shuffle_scale": ("scale", 2, 3),
    "shuffle_weight_a16w4": ("weight", True, 2), "shuffle_scale_a16w4": ("scale", True, 2),
}


def _shuffle_flag(calls: list[dict], kind: str, gate_up: bool) -> bool | None:
    """is_guinterleave of SGLang's aiter shuffle call of ``kind`` ("weight"/"scale") for w13
    (gate_up) or w2; None when there was no such call."""
    for c in calls:
        k, itlv_at, gu_at = _SHUFFLE_ARGS.get(c["name"], (None, None, None))
        if k != kind:
            continue
        args, kw = c["args"], c["kwargs"]
        gu = kw.get("gate_up", args[gu_at] if len(args) > gu_at else False)
        itlv = True if itlv_at is True else kw.get("is_guinterleave", args[itlv_at] if len(args) > itlv_at else False)
        if bool(gu) == gate_up:
            return bool(itlv)
    return None


def _first_diff(a: torch.Tensor, b: torch.Tensor) -> str:
    ne = (a != b).nonzero()
    return f"{int((a != b).sum())} of {a.numel()} bytes differ, first at {tuple(ne[0].tolist())}: {int(a[tuple(ne[0])])} vs {int(b[tuple(ne[0])])}"


#: FP4 (e2m1) codes whose value is zero: +0 (0b0000) and -0 (0b1000); a padded weight byte
#: holds two codes, so a pad byte is inert exactly when ``byte & FP4_MAGNITUDE_BITS == 0``
FP4_MAGNITUDE_BITS = 0x77


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


#: where each expected per-layer choice comes from (printed with a mismatch)
CHOICE_SOURCE = {
    "act_mode": "config model_type deepseek_v41 -> a8w4 (SGLang's deepseek_v4.py fp8_activations), else aiter's "
                "token bound rule with the layout's gate mode",
    "swiglu_limit": "config.json swiglu_limit", "doweight_stage1": "DeepSeek-V4 weights the top-k at combine",
    "gate_mode": "the layout SGLang shuffled the bytes in", "activation": "config hidden_act silu",
    "intermediate_pad": f"catalogue I_p padded to {ALIGN}", "hidden_pad": "H is a multiple of the alignment",
}


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


def judge_row(rec: dict, tensors: dict | None, inputs: dict, row, budget, mode: str = "cpu", attrs=None,
              attrs_origin: str = "") -> list[Check]:
    label = rec["label"]
    out: list[Check] = []

    def add(name, ok, compared, detail=""):
        out.append(Check(name, label, bool(ok), compared, detail))

    e, h, ip = row.experts, row.hidden, row.ip
    raw, ref = reference_layer(inputs.get("checkpoint"), inputs.get("tp", 1), inputs.get("tp_rank"), raw=inputs.get("raw"))
    kw = rec["fused_moe_kwargs"]

    # gate mode first: it decides how SGLang's bytes are read back
    itlv13 = _shuffle_flag(rec["shuffle_calls"], "weight", True)
    itlv2 = _shuffle_flag(rec["shuffle_calls"], "weight", False)
    s_itlv13 = _shuffle_flag(rec["shuffle_calls"], "scale", True)
    gm = kw.get("gate_mode", "separated (aiter default: keyword absent)")
    gm_value = gm.split(" ")[0]
    flags = {itlv13, itlv2, s_itlv13}
    if None in flags or not rec.get("is_shuffled"):
        add("gate_mode", False, "fused_moe gate_mode vs is_guinterleave of SGLang's shuffle_weight/shuffle_scale calls",
            f"the weights were not shuffled by aiter's shuffle_weight/shuffle_scale (calls: "
            f"{[c['name'] for c in rec['shuffle_calls']]}, is_shuffled={rec.get('is_shuffled')})")
    else:
        want = "interleave" if itlv13 else "separated"
        add("gate_mode", len(flags) == 1 and gm_value == want,
            "fused_moe gate_mode vs is_guinterleave of SGLang's shuffle_weight/shuffle_scale calls",
            f"gate_mode={gm!s}; weights shuffled with is_guinterleave w13={itlv13} w2={itlv2} w13 scale={s_itlv13}")

    # processed bytes vs the reference weight path at align 128
    if tensors is None:
        add("processed_bytes", False, "SGLang's processed tensors", "the child saved no tensors for this row")
        return out
    sgl, p_sgl = sglang_unshuffled(tensors["processed"], e, h, bool(itlv13), bool(itlv2))
    refs = {"w13": ref.w13, "w13_scale": ref.w13_scale, "w2": ref.w2, "w2_scale": ref.w2_scale}
    bad, inert = [], []
    n_real = 0
    for name, want in refs.items():
        got = sgl[name]
        if tuple(got.shape) != tuple(want.shape):
            bad.append(f"{name} shape {tuple(got.shape)} vs {tuple(want.shape)}")
            continue
        pad = pad_mask(name, got.shape, ip, p_sgl)
        real = ~pad
        n_real += int(real.sum())
        if not torch.equal(got[real], want[real]):  # real bytes: bitwise
            g, w_ = got.clone(), want.clone()
            g[pad] = w_[pad] = 0
            bad.append(f"{name} real bytes: {_first_diff(g, w_)}")
        if torch.equal(got[pad], want[pad]):
            continue
        harmful = pad_bytes_harmful(name, got[pad])
        if harmful:  # a kernel that ignores the pad would read these wrongly
            bad.append(f"{name} pad bytes: {harmful}")
        else:
            vals = sorted({int(v) for v in got[pad][got[pad] != want[pad]].unique()[:4]})
            inert.append(f"{name}: {int((got[pad] != want[pad]).sum())} pad bytes differ from the reference "
                         f"(bytes {', '.join(f'0x{v:02X}' for v in vals)}), numerically inert")
    via = rec.get("loader", {})
    loaded = (f"; TP rank {via['tp_rank']}/{via['tp']} shard taken by SGLang's FusedMoE.weight_loader "
              f"({via.get('weight_loader_calls')} calls)" if "tp_rank" in via else "")
    add("processed_bytes", not bad,
        f"w13/w2 + scales unshuffled vs fp4moe.reference.weight_path align {ALIGN}: I_p {ip} -> SGLang {p_sgl}, "
        f"reference {ref.padded_intermediate}; real bytes bitwise, pad bytes by meaning{loaded}",
        "; ".join(bad + inert) if bad else (f"{n_real} real bytes equal" + (f"; INERT pad difference (not a regression): "
                                                                               f"{'; '.join(inert)}" if inert else "; pads equal")))

    # scale padding bytes
    pad13 = torch.cat([sgl["w13_scale"][:, ip:p_sgl].flatten(), sgl["w13_scale"][:, p_sgl + ip:].flatten()])
    pad2 = sgl["w2_scale"][:, :, ip // BLOCK_SIZE:].flatten()
    n_pad_ff = int((pad13 == NAN_BYTE).sum() + (pad2 == NAN_BYTE).sum())
    n_all_ff = sum(int((tensors["processed"][k] == NAN_BYTE).sum()) for k in ("w13_weight_scale_inv", "w2_weight_scale_inv"))
    add("scale_pad_bytes", n_pad_ff == 0 and n_all_ff == 0,
        f"0xFF bytes in the scales fused_moe receives ({pad13.numel() + pad2.numel()} padded-channel bytes)",
        f"{n_pad_ff} 0xFF bytes in padded channels, {n_all_ff} in the whole shuffled scales" if (n_pad_ff or n_all_ff)
        else "none")

    # pad contract
    want_ipad, want_hpad = p_sgl - ip, 0
    got_ipad, got_hpad = kw.get("intermediate_pad", 0), kw.get("hidden_pad", 0)
    lp = rec["layer_pads"]
    # the layer's own record (absent in releases before the pads were recorded) may not disagree
    ok = got_ipad == want_ipad and got_hpad == want_hpad and lp.get("intermediate_pad") in (want_ipad, None) and \
        lp.get("hidden_pad") in (want_hpad, None)
    add("pad_contract", ok,
        f"fused_moe intermediate_pad/hidden_pad vs the padding of the weights it receives (I_p {ip} -> {p_sgl}, H {h})",
        f"weights padded {ip} -> {p_sgl} (pad {want_ipad}) but fused_moe got intermediate_pad={got_ipad}, "
        f"hidden_pad={got_hpad}; layer recorded {lp}" if not ok else f"intermediate_pad={got_ipad}, hidden_pad={got_hpad}")

    # the tensors fused_moe gets are the layer's
    same = dict(rec["quant_info_is_layer"], **{f"fused_moe.{k}": v for k, v in rec["fused_moe_receives_layer"].items()})
    not_same = [k for k, v in same.items() if not v]
    add("layer_tensors", not not_same, "quant info and fused_moe tensors are the layer's processed ones (same storage)",
        f"not the layer's: {not_same}" if not_same else f"{len(same)} tensors")

    # every quant-info field reaches its keyword
    probe = rec["field_probe"]
    lost = [f"{f} -> {v['kwarg']} (sent {v.get('sent')}, got {v['got']})" for f, v in probe.items() if v["reached"] is False]
    unknown = [f for f, v in probe.items() if v["reached"] is None]
    add("quant_info_fields", not lost and not unknown,
        f"each AiterMoeQuantInfo field set to a distinct value -> its fused_moe keyword ({len(probe)} fields)",
        "; ".join(lost + [f"{f}: no known keyword" for f in unknown]) if (lost or unknown)
        else ", ".join(sorted(probe)))

    each = rec.get("field_probe_each")
    if each is None:
        add("quant_info_fields_each", False, "each AiterMoeQuantInfo field set alone -> its fused_moe keyword",
            "the child recorded no one-at-a-time probe")
    else:
        lost1 = [f"{f} -> {v['kwarg']} (sent {v.get('sent')}, got {v['got']})" for f, v in each.items() if v["reached"] is not True]
        add("quant_info_fields_each", not lost1,
            f"each AiterMoeQuantInfo field set alone (the others as the builder made them) -> its fused_moe keyword ({len(each)} fields)",
            "; ".join(lost1) if lost1 else ", ".join(sorted(each)))

    # per-layer choices that change numerics: expected from the model config / catalogue row
    cfg = inputs.get("config") or {}
    x_tokens = int(inputs["tokens"][0].shape[0])
    layout_gm = ("interleave" if itlv13 else "separated") if itlv13 is not None else None
    want_choice, got_choice = expected_choices(cfg, row, ip, ref.padded_intermediate, layout_gm, x_tokens), {
        "act_mode": rec.get("act_mode"), "swiglu_limit": kw.get("swiglu_limit"),
        "doweight_stage1": kw.get("doweight_stage1", False), "gate_mode": gm_value,
        "activation": (kw.get("activation") or {}).get("name") if isinstance(kw.get("activation"), dict) else kw.get("activation"),
        "intermediate_pad": kw.get("intermediate_pad", 0), "hidden_pad": kw.get("hidden_pad", 0)}
    wrong = [f"{k}: expected {v!r} ({CHOICE_SOURCE[k]}), SGLang passed {got_choice.get(k)!r}"
             for k, v in want_choice.items() if got_choice.get(k) != v]
    add("layer_choices", not wrong,
        f"act mode, swiglu limit, doweight, gate mode, activation, pads fused_moe got vs the model config "
        f"(model_type {cfg.get('model_type')}) and the catalogue row",
        "; ".join(wrong) if wrong else ", ".join(f"{k}={v}" for k, v in want_choice.items()))

    # the attributes aiter reads from w1 / w2 match the layout the bytes are in
    shuffled = {"w1": itlv13 is not None, "w2": itlv2 is not None}
    for a in (attrs if attrs is not None else []):
        got_v = (rec.get("w_attrs") or {}).get(a.tensor, {}).get(a.name, "<not recorded>")
        ok, want_s = attr_ok(a, got_v, shuffled[a.tensor], ip)
        add(f"attr:{a.tensor}.{a.name}", ok, f"fused_moe's {a.tensor}.{a.name} (aiter reads it at {', '.join(a.where[:2])}; "
            f"table: {attrs_origin})", f"{a.tensor}.{a.name}={got_v!r}; expected {want_s}")

    # aiter's input dtypes / shapes, through SGLang's pre-permute helper
    ai = rec.get("aiter_inputs") or {}
    top_k = int(inputs["tokens"][2].shape[1])
    want_in = {"hidden_states": ("bfloat16", [x_tokens, h]), "topk_weight": ("float32", [x_tokens, top_k]),
               "topk_ids": ("int32", [x_tokens, top_k])}
    bad_in = [f"{k}: {ai.get(k, {}).get('dtype')} {ai.get(k, {}).get('shape')} (aiter needs {d} {sh})"
              for k, (d, sh) in want_in.items() if not isinstance(ai.get(k), dict)
              or ai[k].get("dtype") != d or ai[k].get("shape") != sh]
    pre = rec.get("pre_permute_output")
    if pre is None:
        bad_in.append("the runner input was not made by SGLang's pre_permute_standard_to_aiter (not registered?)")
    add("aiter_inputs", not bad_in,
        "fused_moe's hidden_states/topk_weight/topk_ids dtypes and shapes, runner input made by SGLang's "
        "registered standard->aiter pre-permute", "; ".join(bad_in) if bad_in else
        ", ".join(f"{k} {d} {sh}" for k, (d, sh) in want_in.items()))

    paths = rec.get("runner_paths") or {"error": "not recorded"}
    unknown_p = [f"{fmt} ({v['function']})" for fmt, v in paths.items() if isinstance(v, dict) and v.get("how") == "unknown"]
    problems = ([paths["error"]] if "error" in paths else []) + [f"unknown pre-permute path to aiter: {u}" for u in unknown_p]
    if "error" not in paths and "standard" not in paths:
        problems.append("no standard -> aiter pre-permute registered")
    add("runner_paths", not problems, "the pre-permute paths SGLang registers to the aiter runner are all known, "
        "the standard one driven", "; ".join(problems) if problems else
        "; ".join(f"{fmt}: {v['how'].split(':')[0]}" for fmt, v in paths.items()))

    # the runner at 0 tokens: SGLang's early return, no fused_moe call (aiter has no M == 0 guard)
    eb_bad = empty_batch_problems(rec.get("empty_batch"), h)
    add("empty_batch", not eb_bad, "the runner at 0 tokens (input via the same pre-permute): an empty "
        f"[0, {h}] bf16 output, no fused_moe call", "; ".join(eb_bad) if eb_bad else
        f"output bfloat16 [0, {h}], 0 fused_moe calls")

    # footprint at full size
    fp = rec["footprint"]
    entry = next((b for b in budget if b.model == row.model and b.tp == row.tp and b.ep == 1 and b.role == "budget"), None)
    if entry is None:
        add("footprint", False, "routed-expert bytes/layer/rank at full size", f"no budget entry for {row.model} tp{row.tp} ep1")
    else:
        got = fp["bytes_per_layer"]
        shapes = ", ".join(f"{k} {v['shape']}" for k, v in fp["tensors"].items())
        add("footprint", got <= entry.max_bytes_per_layer,
            f"routed-expert bytes/layer/rank of SGLang's layer at full size ({row.pc.local_experts} experts, H {row.pc.model.hidden}) "
            f"vs budget {entry.max_bytes_per_layer}",
            f"{got} bytes ({got / entry.max_bytes_per_layer:.3f} of budget, +{got - entry.max_bytes_per_layer} over)"
            f"; {shapes}" if got > entry.max_bytes_per_layer else f"{got} bytes ({got / entry.max_bytes_per_layer:.3f} of budget)")

    # output vs the reference MoE of the raw checkpoint
    x, w, ids = inputs["tokens"]
    shuffled_w = weight_path.process_fp4_moe_weights(*raw.tensors(), align=ALIGN)
    # act_mode: what aiter ran for the keywords SGLang passed (the child's effective_act_mode)
    # and a row whose layer asks for fp8 activations must have run a8w4 (else the output differs)
    act = want_choice["act_mode"]  # from the model config, never from what SGLang ran
    info = quant_info.build_quant_info(shuffled_w, swiglu_limit=cfg.get("swiglu_limit") or None,
                                       expert_mask=torch.tensor(row.expert_mask, dtype=torch.int32))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child runs single-threaded too: same float32 summation order
    try:
        want = quant_info.call_fused_moe(ReferenceBackend(), x, w, ids, info, act_mode=act)
    finally:
        torch.set_num_threads(threads)
    got = tensors["output"]
    what = (f"runner output [{x.shape[0]} tokens, top-{ids.shape[1]}, {act}" + (f" via {rec['a8w4_via']}" if rec.get("a8w4_via") else "")
            + (f" (fused_moe ran {rec.get('act_mode')})" if rec.get("act_mode") != act else "")
            + (f", EP mask {sum(row.expert_mask)}/{len(row.expert_mask)}" if row.ep > 1 else "")
            + "] vs reference MoE of the raw checkpoint, ")
    if got.shape != want.shape or got.dtype != want.dtype:
        add("output", False, what.rstrip(", "), f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}")
    else:
        diff = (got.float() - want.float()).abs()
        n = int((got != want).sum())
        rel = rel_l2(got, want)
        if mode == "gfx950":  # the real kernel: the project's kernel budget, not bitwise
            cos = cosine_distance(got, want)
            finite = bool(torch.isfinite(got).all())
            add("output", finite and rel <= KERNEL_REL_L2 and cos <= KERNEL_COS_DIST, what + KERNEL_TOLERANCE.split(" (")[0],
                f"rel-L2 {rel:.3g}, cosine distance {cos:.3g}, max |diff| {float(diff.max()):.3g}, "
                f"{n} of {got.numel()} values differ, finite={finite}")
        else:
            add("output", n == 0, what + OUTPUT_TOLERANCE.split(" (")[0],
                f"{n} of {got.numel()} values differ, max |diff| {float(diff.max()):.3g}, rel-L2 {rel:.3g}")
    return out


def judge(drive) -> tuple[list[Check], str | None]:
    """All checks of one child run; second item: why the run could not be judged (exit 2)."""
    rec = drive.record
    version = rec.get("sglang_version", drive.source.version)
    if rec.get("mutant") and not rec["mutant"].get("applied"):
        return [], f"sglang {version}: mutant {drive.mutant!r} was not applied: {rec['mutant'].get('why')}"
    if rec.get("stage") == "no branch":
        return [], rec["error"]
    if rec.get("missing_module"):
        return [], missing_module_line(rec["missing_module"], version)
    if rec.get("error"):
        return [], f"sglang {version}: the child failed at {rec['stage']}: {rec['error']} ({' <- '.join(reversed(rec.get('where', [])))})"
    budget = load_budget()
    attrs, attrs_origin = tensor_attrs.attrs_for(drive.aiter_src)
    checks: list[Check] = []
    done = {r["label"]: r for r in rec.get("rows", [])}
    compared = "SGLang create_weights -> load -> process -> quant info -> AiterRunnerCore.run -> fused_moe"
    for row in drive.rows:
        r = done.get(row.label)
        if r is None:
            checks.append(Check("drive", row.label, False, compared, "not driven (the child stopped before this row)"))
        elif r.get("error") and r.get("setup"):  # the harness could not set the row up: not judged
            where = " <- ".join(reversed(r.get("where", [])))
            return checks, (f"sglang {version}: could not drive {row.label} (step {r['step']}): {r['error']} at {where}")
        elif r.get("error"):
            where = " <- ".join(reversed(r.get("where", [])))
            checks.append(Check("drive", row.label, False, compared, f"{r.get('step')} raised {r['error']} at {where}"))
        else:
            checks.append(Check("drive", row.label, True, compared, "1 fused_moe call"))
            checks.extend(judge_row(r, drive.tensors.get(row.label), drive.inputs[row.label], row, budget,
                                    rec.get("mode", "cpu"), attrs, attrs_origin))
    return checks, None


def failure(drive, results: dict, check: str, row: str) -> str | None:
    """Why ``check`` did not hold for ``row`` in a judged drive (``results``: (name, row) ->
    Check), or None when it held; a check that was never judged is a failure too."""
    c = results.get((check, row))
    version = drive.record.get("sglang_version", drive.source.version)
    if c is None:
        d = results.get(("drive", row))
        return f"{check} was not judged for {row}: " + (d.line(version) if d else "row not driven")
    return None if c.ok else c.line(version)
