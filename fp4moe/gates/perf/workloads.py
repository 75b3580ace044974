"""Timed workloads for the perf gate: one fused MXFP4 MoE, one stage of it, the weight path.

Every builder returns ``(fn, inputs_list, meta)``: ``fn(inputs)`` does one unit of work,
``inputs_list`` holds ``n_inputs`` different seeded input sets (``fp4moe.gates.perf.timer`` rotates
through them so a round does not find the previous round's data in cache), and ``meta`` is the
``benchmark.extra_info`` dict: the shape label and the keys ``fp4moe.gates.perf.baseline`` checks
(``shape``, ``backend``, ``hidden_pad``, ``intermediate_pad``; the timer adds ``timer``) plus
``bytes_moved`` (``fp4moe.gates.perf.moe_bytes``) for the roofline.

Shapes are DeepSeek-V4's real ones: the model's hidden size and the real per-rank ``I_p`` from
``fp4moe.model.catalogue``; only the expert count is reduced (``hidden`` may be overridden for CPU
tests). Weights are built directly on the device from seeded generators: random bytes are valid
packed FP4 (every 4-bit code is a number, E2M1 has no NaN), and scales are drawn from e8m0 bytes
118..124 (2^-9 .. 2^-3: the range real expert weights use), never 0xFF (NaN).

The MoE goes through the project's one call site, exactly as SGLang's path does:
``weight_path.process_fp4_moe_weights`` -> ``quant_info.build_quant_info`` ->
``quant_info.call_fused_moe``. Both are looked up on the ``quant_info`` module when the
workload is built / called, so a patched ``build_quant_info`` (the bug zoo's "pad not
propagated" mutant, SGLang PR #27858) changes what this workload times.
``propagate_pad=False`` is that bug on purpose: ``intermediate_pad=0`` reaches the kernel.

``meta['intermediate_pad']`` is the pad the weight path RECORDED (the configuration: part of
the benchmark's identity, so a baseline and a buggy head stay comparable and the bug shows as a
slowdown); ``meta['kernel_intermediate_pad']`` is what reached the kernel.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from fp4moe.gates.perf import moe_bytes
from fp4moe.model import catalogue
from fp4moe.model.checkpoint import RawMoEWeights
from fp4moe.mx import mxfp8
from fp4moe.mx.mxfp4 import BLOCK_SIZE
from fp4moe.reference import grouped_moe, moe, quant_info, weight_path

#: Experts per workload when ``experts=None``. On a CUDA GPU the reference backend runs the
#: GPU-bound ``fp4moe.reference.grouped_moe`` (8 experts: a decode round touches 6, 26 MB at Pro TP8; the
#: scratch write between rounds evicts them from the H200's 50 MB L2); elsewhere the exact,
#: host-bound ``fp4moe.reference.moe`` (~0.5-0.8 ms of host work per touched expert). aiter's kernel
#: reads only weights, so 32 experts (~140 MB at Pro TP8, above the L2) keep it out of cache.
DEFAULT_EXPERTS = {"reference": 8, "aiter": 32}
FALLBACK_EXPERTS = 8
WEIGHT_PATH_EXPERTS = 32
#: e8m0 bytes of the random scales: 2^-9 .. 2^-3, finite, never 0xFF
SCALE_BYTE_RANGE = (118, 124)
ACT_MODES = ("a16w4", "a8w4")
STAGES = ("stage1", "stage2")

Workload = tuple[Callable[[Any], Any], list, dict]


# ------------------------------------------------------------------------- building blocks
def resolve_device(device) -> torch.device:
    """The torch device, or a ValueError naming ``device`` when its GPU is not there."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {str(device)!r} requested but torch.cuda.is_available() is False (use device='cpu')")
    return dev


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def random_raw_layer(*, experts: int, hidden: int, intermediate: int, seed: int, device) -> RawMoEWeights:
    """Seeded raw routed experts, built on ``device``: random FP4 bytes and e8m0 scales in
    ``SCALE_BYTE_RANGE``. Shapes as ``checkpoint.load_moe_layer`` returns them."""
    dev = resolve_device(device)
    for name, v, mult in (("hidden", hidden, 2 * BLOCK_SIZE), ("intermediate", intermediate, BLOCK_SIZE)):
        if v <= 0 or v % mult:
            raise ValueError(f"{name}: must be a positive multiple of {mult}, got {v}")
    if experts < 1:
        raise ValueError(f"experts: must be >= 1, got {experts}")
    g = _generator(dev, seed)
    lo, hi = SCALE_BYTE_RANGE

    def fp4(*shape):
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g, device=dev)

    def scales(*shape):
        return torch.randint(lo, hi + 1, shape, dtype=torch.uint8, generator=g, device=dev)

    e, h, i = experts, hidden, intermediate
    return RawMoEWeights(
        fp4(e, 2 * i, h // 2), scales(e, 2 * i, h // BLOCK_SIZE), fp4(e, h, i // 2), scales(e, h, i // BLOCK_SIZE), tuple(range(e))
    )


def random_tokens(*, tokens: int, hidden: int, experts: int, top_k: int, seed: int, device):
    """(hidden_states bf16 [T, H], topk_weights float32 [T, k], topk_ids int32 [T, k]) built on
    ``device`` from a seeded generator; routing = softmax top-k of random router logits."""
    if tokens < 1:
        raise ValueError(f"tokens: must be >= 1, got {tokens}")
    dev = resolve_device(device)
    g = _generator(dev, seed)
    x = torch.randn((tokens, hidden), generator=g, device=dev).to(torch.bfloat16)
    logits = torch.randn((tokens, experts), generator=g, device=dev)
    w, ids = moe.route(logits, top_k)
    return x, w, ids


def _token_seed(seed: int, i: int) -> int:
    # input sets use their own seeds, independent of align/pad/backend: two workloads built
    # with the same seed see the same token batches (what an A/B pair needs)
    return 1_000_003 * (int(seed) + 1) + i


def _resolve_backend(backend):
    if isinstance(backend, str):
        from fp4moe.targets.backends import get_backend

        return get_backend(backend), backend
    if not callable(getattr(backend, "fused_moe", None)):
        raise ValueError(f"backend: expected a backend name or an object with fused_moe(), got {type(backend).__name__}")
    return backend, str(getattr(backend, "name", type(backend).__name__))


def _reference_path(be, hidden_states, act_mode) -> str | None:
    """Which implementation the reference backend runs here ("fast" on a CUDA GPU with Triton,
    "exact" elsewhere; None for other backends): recorded so timings say what they time."""
    uses_fast = getattr(be, "uses_fast_path", None)
    if uses_fast is None:
        return None
    return "fast" if uses_fast(hidden_states) else "exact"


def _label(model: str, tp: int, ep: int, align: int, *parts: str, hidden_override: int | None = None) -> str:
    label = "-".join([f"{model}-tp{tp}-ep{ep}-align{align}", *parts])
    return f"{label}-H{hidden_override}" if hidden_override is not None else label


def _check_common(n_inputs: int, act_mode: str) -> None:
    if n_inputs < 1:
        raise ValueError(f"n_inputs: must be >= 1, got {n_inputs}")
    if act_mode not in ACT_MODES:
        raise ValueError(f"act_mode: must be one of {ACT_MODES}, got {act_mode!r}")


# ------------------------------------------------------------------------- fused MoE
def make_moe_workload(
    *,
    model: str = "dsv4-pro",
    tp: int = 8,
    ep: int = 1,
    align: int = weight_path.DEFAULT_ALIGN,
    experts: int | None = None,
    tokens: int = 16,
    act_mode: str = "a16w4",
    backend="reference",
    propagate_pad: bool = True,
    device="cuda",
    n_inputs: int = 4,
    seed: int = 0,
    hidden: int | None = None,
) -> Workload:
    """One fused MoE call per ``fn(inputs)``; ``inputs`` = (hidden_states, topk_weights, topk_ids).

    ``backend``: "reference", "aiter", or a backend object (tests pass a spy). ``experts``:
    None picks ``DEFAULT_EXPERTS[backend]``; it must be >= the model's top_k. ``hidden``
    overrides the model's hidden size (CPU tests only; the label then ends in ``-H<hidden>``).
    """
    _check_common(n_inputs, act_mode)
    pc = catalogue.parallel_config(model, tp, ep)
    spec = pc.model
    be, be_name = _resolve_backend(backend)
    e = DEFAULT_EXPERTS.get(be_name, FALLBACK_EXPERTS) if experts is None else int(experts)
    if e < spec.top_k:
        raise ValueError(f"experts: {e} is fewer than {spec.name}'s top_k {spec.top_k}; routing needs at least top_k experts")
    h = spec.hidden if hidden is None else int(hidden)
    dev = resolve_device(device)

    raw = random_raw_layer(experts=e, hidden=h, intermediate=pc.intermediate_per_partition, seed=seed, device=dev)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=True)
    del raw
    info = quant_info.build_quant_info(pw)  # via the module: a patched builder takes effect
    if not propagate_pad:
        info.intermediate_pad = 0  # the PR #27858 bug, on purpose: the kernel computes the pad
    inputs_list = [
        random_tokens(tokens=tokens, hidden=h, experts=e, top_k=spec.top_k, seed=_token_seed(seed, i), device=dev)
        for i in range(n_inputs)
    ]

    def fn(inputs):
        x, w, ids = inputs
        return quant_info.call_fused_moe(be, x, w, ids, info, act_mode=act_mode)

    labelled = dict(model=model, tp=tp, ep=ep, align=align, act_mode=act_mode, propagate_pad=propagate_pad, hidden=hidden)
    return fn, inputs_list, _moe_meta(labelled, spec, be, be_name, pw, info, inputs_list, e, tokens, h)


def _moe_meta(labelled: dict, spec, be, be_name: str, pw, info, inputs_list, e: int, tokens: int, h: int) -> dict:
    """The metadata of one fused-MoE workload: its label, pads, reference path and bytes moved."""
    model, tp, ep, align, act_mode, propagate_pad, hidden = (labelled[k] for k in (
        "model", "tp", "ep", "align", "act_mode", "propagate_pad", "hidden"))
    channels = pw.padded_intermediate - info.intermediate_pad
    touched = [int(torch.unique(ids).numel()) for _, _, ids in inputs_list]
    per_input = [
        moe_bytes.moe_bytes_moved(hidden=h, channels=channels, touched_experts=t, tokens=tokens, top_k=spec.top_k)
        for t in touched
    ]
    parts = [f"E{e}", f"T{tokens}", act_mode] + ([] if propagate_pad else ["padoblivious"])
    path = _reference_path(be, inputs_list[0][0], act_mode)
    return {
        "shape": _label(model, tp, ep, align, *parts, hidden_override=hidden),
        "backend": be_name,
        "model": spec.name,
        "tp": tp,
        "ep": ep,
        "align": align,
        "act_mode": act_mode,
        "hidden": h,
        "intermediate": pw.intermediate,
        "padded_intermediate": pw.padded_intermediate,
        "hidden_pad": pw.hidden_pad,
        "intermediate_pad": pw.intermediate_pad,
        "kernel_intermediate_pad": info.intermediate_pad,
        "kernel_hidden_pad": info.hidden_pad,
        "reference_path": path,
        "cuda_graph": path == "fast" and grouped_moe.uses_cuda_graph(inputs_list[0][0], act_mode, info.expert_mask),
        "propagate_pad": bool(propagate_pad),
        "experts": e,
        "tokens": tokens,
        "top_k": spec.top_k,
        "n_inputs": len(inputs_list),
        "touched_experts": sum(touched) / len(touched),
        "bytes_moved": int(round(sum(per_input) / len(per_input))),
        "bytes_moved_per_input": per_input,
    }


def moe_study_workload(device="cuda", tokens: int = 16, **kwargs):
    """``lab/studies/perf_study.py --workload moe`` contract: ``(fn, inputs_list)`` only."""
    fn, inputs_list, _ = make_moe_workload(device=device, tokens=tokens, **kwargs)
    return fn, inputs_list


# ------------------------------------------------------------------------- one stage
def _stage_call(stage: str, ew, n_used: int, h: int, tokens: int, act_mode: str, n_inputs: int, seed: int, dev):
    """(fn, inputs) of one reference stage on expert 0: seeded bf16-valued activations (MXFP8
    rounded for a8w4), [T, H] for stage1, [T, n_used] for stage2."""

    def act(cols: int, i: int) -> torch.Tensor:
        g = _generator(dev, _token_seed(seed, i))
        a = torch.randn((tokens, cols), generator=g, device=dev).to(torch.bfloat16).float()
        return mxfp8.fake_quantize(a, "round_up") if act_mode == "a8w4" else a

    if stage == "stage1":
        def fn(x):
            return moe.stage1(x, ew, 0, n_used, h, None, torch.float32, True)

        return fn, [act(h, i) for i in range(n_inputs)]

    def fn2(a):
        return moe.stage2(a, ew, 0, h, n_used, torch.float32, True)

    return fn2, [act(n_used, i) for i in range(n_inputs)]


def make_stage_workload(
    stage: str,
    *,
    model: str = "dsv4-pro",
    tp: int = 8,
    ep: int = 1,
    align: int = weight_path.DEFAULT_ALIGN,
    tokens: int = 16,
    act_mode: str = "a16w4",
    propagate_pad: bool = True,
    device="cuda",
    n_inputs: int = 4,
    seed: int = 0,
    hidden: int | None = None,
) -> Workload:
    """The reference's ``fp4moe.reference.moe.stage1`` / ``stage2`` on ONE expert with ``tokens`` rows.

    The expert goes through the weight path and ``quant_info.build_quant_info`` (the pad comes
    from the info, as in the fused call) and is read through the reference backend's shuffled
    accessor, unshuffled once at build time: the stage times dequantization + matmul only.
    stage1 inputs: x [T, H]; stage2 inputs: the gated activation [T, n]; float32 holding
    bf16 values (MXFP8-rounded for a8w4), as ``fused_moe_unshuffled`` feeds them.
    """
    from fp4moe.reference.expert_weights import ShuffledExpertWeights

    if stage not in STAGES:
        raise ValueError(f"stage: must be one of {STAGES}, got {stage!r}")
    _check_common(n_inputs, act_mode)
    pc = catalogue.parallel_config(model, tp, ep)
    h = pc.model.hidden if hidden is None else int(hidden)
    dev = resolve_device(device)
    raw = random_raw_layer(experts=1, hidden=h, intermediate=pc.intermediate_per_partition, seed=seed, device=dev)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=True)
    info = quant_info.build_quant_info(pw)
    kernel_pad = info.intermediate_pad if propagate_pad else 0
    n_used = pw.padded_intermediate - kernel_pad
    ew = ShuffledExpertWeights(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    ew.gate_up(0, n_used, h)  # unshuffle now (cached), outside the timed rounds

    fn, inputs_list = _stage_call(stage, ew, n_used, h, tokens, act_mode, n_inputs, seed, dev)
    meta = {
        "shape": _label(model, tp, ep, align, "E1", f"T{tokens}", act_mode, stage, *([] if propagate_pad else ["padoblivious"]), hidden_override=hidden),
        "backend": "reference",
        "stage": stage,
        "model": pc.model.name,
        "hidden": h,
        "intermediate": pw.intermediate,
        "padded_intermediate": pw.padded_intermediate,
        "hidden_pad": pw.hidden_pad,
        "intermediate_pad": pw.intermediate_pad,
        "kernel_intermediate_pad": kernel_pad,
        "propagate_pad": bool(propagate_pad),
        "experts": 1,
        "tokens": tokens,
        "act_mode": act_mode,
        "n_inputs": n_inputs,
        "bytes_moved": moe_bytes.stage_bytes_moved(stage, hidden=h, channels=n_used, tokens=tokens),
    }
    return fn, inputs_list, meta


# ------------------------------------------------------------------------- weight path
def make_weight_path_workload(
    *,
    model: str = "dsv4-pro",
    tp: int = 8,
    ep: int = 1,
    align: int = weight_path.DEFAULT_ALIGN,
    experts: int = WEIGHT_PATH_EXPERTS,
    gu_interleave: bool = True,
    device="cuda",
    n_inputs: int = 2,
    seed: int = 0,
    hidden: int | None = None,
) -> Workload:
    """``weight_path.process_fp4_moe_weights`` (pad, record pads, gfx950 shuffles) on one
    layer's raw experts per ``fn(raw)``; the inputs are ``n_inputs`` different raw layers."""
    if n_inputs < 1:
        raise ValueError(f"n_inputs: must be >= 1, got {n_inputs}")
    pc = catalogue.parallel_config(model, tp, ep)
    h = pc.model.hidden if hidden is None else int(hidden)
    dev = resolve_device(device)
    i_p = pc.intermediate_per_partition
    inputs_list = [
        random_raw_layer(experts=experts, hidden=h, intermediate=i_p, seed=_token_seed(seed, i), device=dev)
        for i in range(n_inputs)
    ]

    def fn(raw: RawMoEWeights):
        return weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=gu_interleave)

    plan = weight_path.PadPlan(i_p, align)
    meta = {
        "shape": _label(model, tp, ep, align, f"E{experts}", "weightpath" + ("" if gu_interleave else "-gusep"), hidden_override=hidden),
        "backend": "reference",
        "stage": "weight_path",
        "model": pc.model.name,
        "hidden": h,
        "intermediate": i_p,
        "padded_intermediate": plan.padded,
        "hidden_pad": 0,
        "intermediate_pad": plan.intermediate_pad,
        "experts": experts,
        "gu_interleave": gu_interleave,
        "n_inputs": n_inputs,
        "bytes_moved": moe_bytes.weight_path_bytes_moved(
            experts=experts, hidden=h, intermediate=i_p, padded=plan.padded, gu_interleave=gu_interleave
        ),
    }
    return fn, inputs_list, meta


# ------------------------------------------------------------------------- backend choice
BENCH_BACKEND_ENV = "FP4MOE_BENCH_BACKEND"
BENCH_BACKENDS = ("reference", "aiter")


def bench_backend_from_env(environ=None) -> tuple[str, str | None]:
    """(backend name, reason to skip or None) from ``$FP4MOE_BENCH_BACKEND`` (default
    "reference"). An unknown name is a ValueError naming the variable; "aiter" without an
    importable aiter gives the import's error as the skip reason."""
    import os

    from fp4moe.infra.capabilities import probe_aiter

    env = os.environ if environ is None else environ
    name = (env.get(BENCH_BACKEND_ENV) or "reference").strip()
    if name not in BENCH_BACKENDS:
        raise ValueError(f"{BENCH_BACKEND_ENV}={name!r}: must be one of {BENCH_BACKENDS}")
    if name == "aiter":
        ok, why = probe_aiter()
        if not ok:
            return name, f"{BENCH_BACKEND_ENV}=aiter but {why}"
    return name, None


def backend_software_info(name: str) -> dict:
    """``aiter_version`` for extra_info when timing aiter (the baseline store keys on it)."""
    if name != "aiter":
        return {}
    from importlib import metadata

    for dist in ("amd-aiter", "aiter"):
        try:
            return {"aiter_version": metadata.version(dist)}
        except metadata.PackageNotFoundError:
            continue
    import aiter

    return {"aiter_version": str(getattr(aiter, "__version__", "unknown"))}


# ------------------------------------------------------------------------- relational decisions
def pad_speedup_verdict(base, head, *, required_speedup: float, alpha: float | None = None, name: str = "pad propagation"):
    """Is ``head`` faster than ``base`` by at least ``required_speedup`` (a fraction), with
    confidence? Decided on the Hodges-Lehmann head/base ratio's interval
    (``fp4moe.stats.compare``, confidence 1 - 2*alpha): passes iff its upper bound is below
    ``1 - required_speedup``. Returns (ok, comparison, message with the measured numbers)."""
    from fp4moe.stats.compare import DEFAULT_ALPHA, compare_samples

    if not 0 < required_speedup < 1:
        raise ValueError(f"required_speedup: must be a fraction in (0, 1), got {required_speedup!r}")
    c = compare_samples(base, head, name=name, alpha=DEFAULT_ALPHA if alpha is None else alpha)
    limit = 1.0 - required_speedup
    ok = c.ci_high < limit
    msg = (
        f"{name}: head/base = {c.ratio:.3f} (Hodges-Lehmann), {c.confidence:.0%} CI [{c.ci_low:.3f}, {c.ci_high:.3f}], "
        f"medians base {c.base_median * 1e3:.3f} ms / head {c.head_median * 1e3:.3f} ms, {c.n_base}+{c.n_head} rounds; "
        f"required: CI upper bound < {limit:.3f} (head at least {required_speedup:.1%} faster) -> {'ok' if ok else 'FAILED'}"
    )
    return ok, c, msg


def equal_time_verdict(base, head, *, tolerance: float, alpha: float | None = None, name: str = "equal time"):
    """Do ``base`` and ``head`` take the same time within +-``tolerance``, with confidence?
    Passes iff the head/base ratio's interval lies inside [1 - tolerance, 1 + tolerance]."""
    from fp4moe.stats.compare import DEFAULT_ALPHA, compare_samples

    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance: must be a fraction in (0, 1), got {tolerance!r}")
    c = compare_samples(base, head, name=name, alpha=DEFAULT_ALPHA if alpha is None else alpha)
    lo, hi = 1.0 - tolerance, 1.0 + tolerance
    ok = c.ci_low >= lo and c.ci_high <= hi
    msg = (
        f"{name}: head/base = {c.ratio:.3f} (Hodges-Lehmann), {c.confidence:.0%} CI [{c.ci_low:.3f}, {c.ci_high:.3f}], "
        f"medians base {c.base_median * 1e3:.3f} ms / head {c.head_median * 1e3:.3f} ms, {c.n_base}+{c.n_head} rounds; "
        f"required: CI inside [{lo:.3f}, {hi:.3f}] -> {'ok' if ok else 'FAILED'}"
    )
    return ok, c, msg


def roofline_info(meta: dict, seconds: float, bandwidth: dict) -> dict:
    """extra_info keys for the roofline: the fraction of the measured copy bandwidth a round
    achieved (median seconds), the floor time, and the bandwidth used."""
    from fp4moe.gates.perf.roofline import achieved_fraction, roofline_seconds

    bw = float(bandwidth["bytes_per_s"])
    b = float(meta["bytes_moved"])
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds: must be a positive time, got {seconds!r}")
    return {
        "roofline_fraction": achieved_fraction(b, seconds, bw),
        "roofline_seconds": roofline_seconds(b, bw),
        "bandwidth_bytes_per_s": bw,
        "bandwidth_timer": bandwidth.get("timer"),
    }


# ------------------------------------------------------------------------- aiter's Triton kernels
#: where the aiter tree (the directory holding aiter's __init__.py, or its parent) comes from
AITER_SRC_ENV = "FP4MOE_AITER_SRC"
#: the snapshot beside every checkout (relative to the repository root)
SHARED_AITER_TREE = "../shared/aiter/e4048607/aiter"
AITER_TRITON_STAGES = (None, "stage1", "stage2")
_AITER_LAYER: dict = {}


def aiter_tree_from_env(environ=None, root=None) -> tuple[str | None, str]:
    """(aiter package directory or None, where it came from / why there is none):
    ``$FP4MOE_AITER_SRC`` first, else ``SHARED_AITER_TREE`` beside ``root``."""
    import os
    from pathlib import Path

    env = os.environ if environ is None else environ
    given = env.get(AITER_SRC_ENV)
    cands = [(Path(given), f"${AITER_SRC_ENV}")] if given else []
    if root is not None:
        cands.append((Path(root) / SHARED_AITER_TREE, SHARED_AITER_TREE))
    for p, origin in cands:
        for d in (p, p / "aiter"):
            if (d / "ops" / "triton" / "moe").is_dir():
                return str(d.resolve()), origin
        if origin.startswith("$"):
            return None, f"{AITER_SRC_ENV}={given}: no ops/triton/moe/ under it (pass the aiter package directory)"
    return None, f"no aiter tree: set {AITER_SRC_ENV} (or put the snapshot at {SHARED_AITER_TREE})"


def make_aiter_triton_workload(
    *,
    aiter_src: str,
    model: str = "dsv4-pro",
    tp: int = 8,
    align: int = 256,
    experts: int | None = None,
    tokens: int = 64,
    act_mode: str = "a16w4",
    stage: str | None = None,
    propagate_pad: bool = True,
    device="cuda",
    n_inputs: int = 2,
    seed: int = 0,
    arch: str = "gfx950",
    cuda_graph: bool = True,
) -> Workload:
    """One MoE (or one ``stage``) through aiter's Triton MXFP4 kernels, loaded from ``aiter_src``
    (``fp4moe.targets.aiter.kernels.loader``: fills ``sys.modules['aiter']`` of THIS process).

    The layer goes through the project's weight path and call site contract: ``process_fp4_moe_
    weights`` (shuffled, as SGLang stores it) -> ``quant_info.build_quant_info`` (looked up on the
    module: the zoo's ``pad_not_propagated`` mutant takes effect) -> the pad the kernels are told
    is ``info.intermediate_pad`` (``unpadded_N = 2 I``, ``unpadded_K = I``; 0 = not told). The
    Triton layout is derived from the shuffled tensors (``weight_path.unshuffled_views``).
    ``propagate_pad=False`` is the PR #27858 bug on purpose. Routing: the gate's own
    (``drive.gate_routing``, built once per input set, outside the timed call). ``experts``: None
    = all of the rank's routed experts (384 at Pro TP8: ~2 GB of weights, 40x the H200's L2, so
    no round finds the previous round's weights in cache). ``cuda_graph``: each input set's call
    is captured once and replayed (launch overhead of the Python wrappers excluded); a capture
    that fails falls back to eager and ``meta['cuda_graph']`` says so. GPU only.
    """
    from fp4moe.targets.aiter.kernels import drive, loader

    dev = _aiter_triton_device(n_inputs, act_mode, stage, device)
    am = loader.load_aiter_moe(aiter_src, arch=arch, device="cuda")
    pc = catalogue.parallel_config(model, tp, 1)
    spec = pc.model
    e = spec.routed_experts if experts is None else int(experts)
    pw, W = _aiter_layer(pc, model, tp, align, e, seed, dev)
    info = quant_info.build_quant_info(pw)  # via the module, every build: a patched builder takes effect
    kernel_pad = info.intermediate_pad if propagate_pad else 0
    run = _aiter_triton_run(am, W, stage, act_mode, kernel_pad)
    sets = []
    for i in range(n_inputs):
        x, w, ids = random_tokens(tokens=tokens, hidden=spec.hidden, experts=e, top_k=spec.top_k, seed=_token_seed(seed, i), device=dev)
        rd = drive.gate_routing(am, ids, w, e, device=dev)
        sets.append((drive.stage1(am, x, W, rd, act_mode, pad=kernel_pad) if stage == "stage2" else x, rd, ids))
    graphs, graph_error = _capture_graphs(run, sets, dev) if cuda_graph else ([], None)
    inputs_list = list(range(n_inputs))

    def fn(i):  # a graph per input set when every capture held, else eager
        graphs[i].replay() if graphs else run(sets[i][0], sets[i][1])

    labelled = dict(model=model, tp=tp, align=align, act_mode=act_mode, stage=stage, propagate_pad=propagate_pad, arch=arch)
    meta = _aiter_triton_meta(labelled, spec, am, pw, kernel_pad, e, tokens, sets, graphs)
    if graph_error is not None:
        meta["cuda_graph_error"] = graph_error
    return fn, inputs_list, meta


def _aiter_triton_meta(labelled: dict, spec, am, pw, kernel_pad: int, e: int, tokens: int, sets, graphs) -> dict:
    """The metadata of one aiter-Triton workload: its label, tree, pads and touched experts."""
    model, tp, align, act_mode, stage, propagate_pad, arch = (labelled[k] for k in (
        "model", "tp", "align", "act_mode", "stage", "propagate_pad", "arch"))
    hidden, n_inputs, used_graph = spec.hidden, len(sets), bool(graphs)
    parts = [f"E{e}", f"T{tokens}", act_mode] + ([stage] if stage else []) + ([] if propagate_pad else ["padoblivious"])
    return {
        "shape": _label(model, tp, 1, align, *parts),
        "backend": "aiter-triton",
        "aiter_tree": str(am.tree),
        "arch": arch,
        "model": spec.name, "tp": tp, "ep": 1, "align": align, "act_mode": act_mode, "stage": stage or "moe",
        "hidden": hidden, "intermediate": pw.intermediate, "padded_intermediate": pw.padded_intermediate,
        "hidden_pad": pw.hidden_pad, "intermediate_pad": pw.intermediate_pad, "kernel_intermediate_pad": kernel_pad,
        "propagate_pad": bool(propagate_pad), "experts": e, "tokens": tokens, "top_k": spec.top_k, "n_inputs": n_inputs,
        "cuda_graph": used_graph, "touched_experts": sum(int(torch.unique(s[2]).numel()) for s in sets) / n_inputs,
    }


def _aiter_triton_device(n_inputs: int, act_mode: str, stage: str | None, device):
    """The GPU an aiter-Triton workload runs on, its options checked (ValueError naming one)."""
    _check_common(n_inputs, act_mode)
    if stage not in AITER_TRITON_STAGES:
        raise ValueError(f"stage: must be one of {AITER_TRITON_STAGES}, got {stage!r}")
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise ValueError(f"device: aiter's Triton kernels are timed on a GPU only, got {str(device)!r}")
    return dev


def _aiter_triton_run(am, W, stage: str | None, act_mode: str, kernel_pad: int):
    """``run(x, routing)``: stage 1, stage 2 or both through aiter's kernels, told ``kernel_pad``
    (stage 2 alone reads a stage-1 buffer computed at build time)."""
    from fp4moe.targets.aiter.kernels import drive

    def run(x, rd):
        if stage == "stage2":
            return drive.stage2(am, x, W, rd, act_mode, pad=kernel_pad)
        h = drive.stage1(am, x, W, rd, act_mode, pad=kernel_pad)
        return h if stage == "stage1" else drive.stage2(am, h, W, rd, act_mode, pad=kernel_pad)

    return run


def _aiter_layer(pc, model: str, tp: int, align: int, e: int, seed: int, dev):
    """(processed weights, Triton layout) of the seeded layer; ONE layer kept: told and untold
    workloads share it."""
    from fp4moe.targets.aiter.kernels import layout

    key = (model, tp, align, e, seed, str(dev))
    if _AITER_LAYER.get("key") != key:
        _AITER_LAYER.clear()
        raw = random_raw_layer(experts=e, hidden=pc.model.hidden, intermediate=pc.intermediate_per_partition, seed=seed, device=dev)
        pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=True)
        del raw
        w13, s13, w2, s2 = weight_path.unshuffled_views(pw)
        _AITER_LAYER.update(key=key, pw=pw, W=layout.to_triton_layout(w13, s13, w2, s2, pw.padded_intermediate, None))
        del w13, s13, w2, s2
    return _AITER_LAYER["pw"], _AITER_LAYER["W"]


def _capture_graphs(run, sets, dev) -> tuple[list, str | None]:
    """(one CUDA graph per input set, None), each call run once eagerly first (compile, autotune
    outside the capture); ([], the error) when a capture fails: the workload then runs eager."""
    graphs: list = []
    try:
        for x, rd, _ in sets:
            run(x, rd)
        torch.cuda.synchronize(dev)
        pool = torch.cuda.graph_pool_handle()
        for x, rd, _ in sets:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                run(x, rd)
            graphs.append(g)
        return graphs, None
    except Exception as ex:  # noqa: BLE001 -- eager instead, said in meta
        torch.cuda.synchronize(dev)
        return [], f"{type(ex).__name__}: {ex}"[:200]
