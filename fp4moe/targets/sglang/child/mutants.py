"""Applying the SGLang mutants (catalogue: ``fp4moe.targets.sglang.mutations``) in SGLang's OWN functions.

CHILD PROCESS ONLY (``fp4moe.targets.sglang.child.drive`` applies one, named by the request, after SGLang is
imported and before the rows are driven). A mutant rewrites the syntax tree of SGLang's
``Fp8MoEMethod.process_weights_after_loading_block_quant`` (or wraps its quant-info builder)
in the release under test and recompiles it in the module's own globals; it reports how many
places it changed. Zero places = not applied: the gate then exits 2 ("not judged"), never 0.

``fp4moe-gate zoo --target sglang`` runs the sglang tier once per mutant; every one must fail it.
The catalogue's inert variants (``INERT_VARIANTS``: a numerically harmless pad difference) go
through the same ``apply`` and must pass; the zoo never lists them.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import torch

from fp4moe.targets.sglang.mutations import INERT_VARIANTS, MUTANTS

CLASS = "Fp8MoEMethod"
PROCESS = "process_weights_after_loading_block_quant"
BUILDER = "maybe_get_hip_aiter_quant_info"

#: mutants whose effect happens at run time: how often it did (0 after the drive = no effect)
_RUNTIME_HITS: dict[str, int] = {}
RUNTIME_MUTANTS = ("pad_not_propagated", "smallm_bypass_le40", "scale_pad_0xff", "all_mxfp8_activations", "topk_renormalised",
                   "weight_pad_fp4_nonzero", "scale_pad_0x7f")


def runtime_hits(name: str) -> int | None:
    """How many times a run-time mutant acted so far; None for source rewrites (static)."""
    return _RUNTIME_HITS.get(name, 0) if name in RUNTIME_MUTANTS else None


def _recompile(fp8, func_name: str, transformer: ast.NodeTransformer, extra_globals: dict | None = None,
               cls_name: str | None = CLASS) -> int:
    """Rewrite ``cls_name.func_name`` of module ``fp8`` (a module-level function when cls_name
    is None) with ``transformer`` and rebind it there; the number of places changed."""
    cls = getattr(fp8, cls_name) if cls_name else None
    fn = getattr(cls, func_name) if cls is not None else getattr(fp8, func_name)
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    tree = transformer.visit(tree)
    if not transformer.changed:
        return 0
    if cls is None:  # a registering decorator must not run again: the pool entry is rebound below
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                node.decorator_list = []
    ast.fix_missing_locations(tree)
    code = compile(tree, f"<fp4moe mutant of {fp8.__name__}.{cls_name}.{func_name}>", "exec")
    ns: dict = {}
    g = fp8.__dict__ if not extra_globals else dict(fp8.__dict__, **extra_globals)
    exec(code, g, ns)
    new = ns[func_name]
    if extra_globals:
        new = types.FunctionType(new.__code__, g, new.__name__, new.__defaults__, new.__closure__)
    if cls is not None:
        setattr(cls, func_name, new)
    else:
        setattr(fp8, func_name, new)
        _rebind_registered(fn, new)
    return transformer.changed


def _rebind_registered(old, new) -> None:
    """A module-level function SGLang registered (the pre-permute pool) points at the old one."""
    import sys

    for name, mod in list(sys.modules.items()):
        pool = getattr(getattr(mod, "PermuteMethodPool", None), "_pre_permute_methods", None) if name.startswith("sglang") else None
        if isinstance(pool, dict):
            for k, v in list(pool.items()):
                if v is old:
                    pool[k] = new


class _Align256(ast.NodeTransformer):
    """``fp4_k_align = 128`` (or any ``*align* = 128``) -> 256."""

    changed = 0

    def visit_Assign(self, node):
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if any("align" in n for n in names) and isinstance(node.value, ast.Constant) and node.value.value == 128:
            node.value = ast.Constant(256)
            self.changed += 1
        return node


class _GateUpOneBlock(ast.NodeTransformer):
    """The up-half write ``new[:, P : P + I, :] = old[:, I:, :]`` -> ``new[:, I : 2 * I, :] = ...``:
    gate and up land back to back, as if the [2*I] block had been padded as one."""

    changed = 0

    def visit_Slice(self, node):
        lo, up = node.lower, node.upper
        if (isinstance(lo, ast.Name) and isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add)
                and isinstance(up.left, ast.Name) and up.left.id == lo.id and isinstance(up.right, ast.Name)):
            inter = up.right.id
            self.changed += 1
            return ast.Slice(lower=ast.Name(inter, ast.Load()),
                             upper=ast.BinOp(ast.Constant(2), ast.Mult(), ast.Name(inter, ast.Load())), step=None)
        return self.generic_visit(node)


class _Unchanged(ast.NodeTransformer):
    changed = 1


class _TorchFilledPads:
    """``torch`` as seen by the mutated function: the new buffers it makes (the padding) are
    filled with a byte instead of zeros -- e8m0 ones (scales) with ``scale_byte``, 1-byte
    integer ones (packed FP4 weights) with ``weight_byte``; None leaves that kind alone.
    SGLang then copies the real bytes in, so only the pad keeps the byte."""

    def __init__(self, hit: str, scale_byte: int | None = None, weight_byte: int | None = None):
        self._hit, self._scale, self._weight = hit, scale_byte, weight_byte

    def __getattr__(self, item):
        return getattr(torch, item)

    def _fill(self, t):
        byte = (self._scale if t.dtype == torch.float8_e8m0fnu else
                self._weight if t.dtype in (torch.int8, torch.uint8) else None)
        if byte is not None:
            t.view(torch.uint8).fill_(byte)
            _RUNTIME_HITS[self._hit] = _RUNTIME_HITS.get(self._hit, 0) + 1
        return t

    def zeros(self, *a, **k):
        return self._fill(torch.zeros(*a, **k))

    def empty(self, *a, **k):
        return self._fill(torch.empty(*a, **k))

    def full(self, *a, **k):
        return self._fill(torch.full(*a, **k))


#: e8m0 NaN; e8m0 2^0 = 1.0; two FP4 (e2m1) codes 0x2 = +1.0 in one byte
E8M0_NAN, E8M0_ONE, FP4_PAIR_ONE = 0xFF, 0x7F, 0x22


class _DropIsShuffled(ast.NodeTransformer):
    """``w13_weight.is_shuffled = True`` (and w2's) removed: the views lose the attribute."""

    changed = 0

    def visit_Assign(self, node):
        if any(isinstance(t, ast.Attribute) and t.attr == "is_shuffled" for t in node.targets):
            self.changed += 1
            return ast.Pass()
        return node


class _SwigluOnlyFp8(ast.NodeTransformer):
    """``extra["swiglu_limit"] = ...`` kept only ``if quant_info.fp8_activations:``."""

    changed = 0

    def visit_Assign(self, node):
        t = node.targets[0]
        if (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "swiglu_limit"):
            self.changed += 1
            cond = ast.Attribute(ast.Name("quant_info", ast.Load()), "fp8_activations", ast.Load())
            return ast.If(test=cond, body=[node], orelse=[])
        return node


class _ToBf16(ast.NodeTransformer):
    """``topk_weights.to(torch.float32)`` -> ``.to(torch.bfloat16)``."""

    changed = 0

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "to" and isinstance(f.value, ast.Name) and f.value.id == "topk_weights"
                and node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "float32"):
            node.args[0] = ast.Attribute(ast.Name("torch", ast.Load()), "bfloat16", ast.Load())
            self.changed += 1
        return node


class _SwapGateUpCopy(ast.NodeTransformer):
    """In the w13 padding copy, the gate rows get the up half and the up rows the gate half:
    the values of the two ``new_w13[...] = old_w13[...]`` assignments are swapped."""

    changed = 0

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        return node

    def generic_visit(self, node):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                hits = [s for s in stmts if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript)
                        and isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id == "new_w13"]
                if len(hits) == 2:
                    hits[0].value, hits[1].value = hits[1].value, hits[0].value
                    self.changed += 1
        return super().generic_visit(node)


class _ZerosToEmpty(ast.NodeTransformer):
    """``torch.zeros(`` -> ``torch.empty(``: the padding buffers are left uninitialised."""

    changed = 0

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "zeros" and isinstance(f.value, ast.Name) and f.value.id == "torch":
            f.attr = "empty"
            self.changed += 1
        return node


class _FillValue(ast.NodeTransformer):
    """``fill_value=0`` keyword -> ``fill_value=-1``: the HIP padded-row mask writes a sentinel."""

    changed = 0

    def visit_keyword(self, node):
        if node.arg == "fill_value" and isinstance(node.value, ast.Constant) and node.value.value == 0:
            node.value = ast.Constant(-1)
            self.changed += 1
        return node


class _FoldScaleAlways(ast.NodeTransformer):
    """``fold_scale_after_routing = <a condition>`` -> ``= True``: the routed scale is multiplied in
    after the router (aiter's topk_gating) already folded it."""

    changed = 0

    def visit_Assign(self, node):
        if (any(isinstance(t, ast.Name) and t.id == "fold_scale_after_routing" for t in node.targets)
                and not isinstance(node.value, ast.Constant)):
            node.value = ast.Constant(True)
            self.changed += 1
        return node


class _SoftplusAsWritten(ast.NodeTransformer):
    """``sp = tl.maximum(scores, 0.0) + log1p_z`` (the #34459 open-coded log1p) ->
    ``sp = tl.maximum(scores, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(scores)))``: as written, 0 in fp32
    for x <= -16.64."""

    changed = 0

    def visit_Assign(self, node):
        v = node.value
        if (any(isinstance(t, ast.Name) and t.id == "sp" for t in node.targets) and isinstance(v, ast.BinOp)
                and isinstance(v.op, ast.Add) and isinstance(v.right, ast.Name) and v.right.id == "log1p_z"):
            v.right = ast.parse("tl.log(1.0 + tl.exp(-tl.abs(scores)))", mode="eval").body
            self.changed += 1
        return node


ROUTER_MODULE = "sglang.kernels.ops.moe.moe_fused_gate"


def _router_as_written(fp8, runner, cls):
    """The Triton router's module rewritten and loaded from a file of its own (Triton reads a
    kernel's source from its file), replacing SGLang's in ``sys.modules``."""
    import importlib.util
    import sys
    import tempfile
    from pathlib import Path

    where = f"{ROUTER_MODULE}: sqrtsoftplus's log1p_z -> tl.log(1.0 + tl.exp(-tl.abs(scores)))"
    spec = importlib.util.find_spec(ROUTER_MODULE)
    if spec is None or not spec.origin:
        return 0, where
    t = _SoftplusAsWritten()
    tree = t.visit(ast.parse(Path(spec.origin).read_text()))
    if not t.changed:
        return 0, where
    path = Path(tempfile.mkdtemp(prefix="fp4moe-mutant-")) / "moe_fused_gate.py"
    path.write_text(ast.unparse(ast.fix_missing_locations(tree)))
    new = importlib.util.spec_from_file_location(ROUTER_MODULE, path)
    mod = importlib.util.module_from_spec(new)
    sys.modules[ROUTER_MODULE] = mod
    new.loader.exec_module(mod)
    return t.changed, where


class _ItlvDefaultFalse(ast.NodeTransformer):
    """``envs.<...GU_ITLV>.get()`` -> ``get_bool_env_var("<...GU_ITLV>", "false")``: the same flag,
    read again with the opposite default."""

    changed = 0

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "get" and not node.args and isinstance(f.value, ast.Attribute)
                and isinstance(f.value.value, ast.Name) and f.value.value.id == "envs" and "GU_ITLV" in f.value.attr):
            self.changed += 1
            return ast.Call(ast.Name("_fp4moe_env_bool", ast.Load()), [ast.Constant(f.value.attr), ast.Constant("false")], [])
        return node


def _env_bool(name: str, default: str) -> bool:
    """SGLang's ``get_bool_env_var``: "true"/"1" (any case) is True."""
    import os

    return os.environ.get(name, default).lower() in ("true", "1")


#: SGLang #40204's threshold: the small-M kernel takes batches of at most this many tokens
SMALLM_BYPASS_TOKENS = 40


def _smallm_bypass(fp8, runner, cls):
    """SGLang's small-M shape gate (``smallm_moe_supported``) replaced by a token-count test alone."""
    import importlib

    from fp4moe.targets.sglang.child.paths import SMALLM_MODULE

    try:
        smallm = importlib.import_module(SMALLM_MODULE)
    except ImportError:
        return 0, f"{SMALLM_MODULE}: not in this release"
    if not hasattr(smallm, "smallm_moe_supported"):
        return 0, f"{SMALLM_MODULE}.smallm_moe_supported: not in this release"

    def smallm_moe_supported(hidden_states, *a, **k):
        take = 1 <= hidden_states.shape[0] <= SMALLM_BYPASS_TOKENS and hidden_states.dtype == torch.bfloat16
        if take:
            _hit("smallm_bypass_le40")
        return take

    smallm.smallm_moe_supported = smallm_moe_supported
    return 1, f"{SMALLM_MODULE}.smallm_moe_supported: tokens <= {SMALLM_BYPASS_TOKENS} (bf16), shapes not checked"


TOPK_MODULE = "sglang.srt.layers.moe.topk"


def _topk_rewrite(func: str, transformer, text: str):
    def apply(fp8, runner, cls):
        import importlib

        topk = importlib.import_module(TOPK_MODULE)
        return _recompile(topk, func, transformer, cls_name=None), f"topk.{func}: {text}"

    return apply


RUNNER_CLASS = "AiterRunnerCore"
PRE_PERMUTE = "pre_permute_standard_to_aiter"


def _fp8_process(make, text: str):
    """A source rewrite of fp8.py's ``CLASS.PROCESS`` (``make()`` -> (transformer, extra globals))."""
    return lambda fp8, runner, cls: (_recompile(fp8, PROCESS, *make()), f"{CLASS}.{PROCESS}: {text}")


def _pads(**byte):
    return lambda name: (_Unchanged(), {"torch": _TorchFilledPads(name, **byte)})


def _hit(name: str) -> None:
    _RUNTIME_HITS[name] = _RUNTIME_HITS.get(name, 0) + 1


def _all_mxfp8_activations(fp8, runner, cls):
    orig_b = getattr(cls, BUILDER)

    def builder(self, layer, *a, **k):
        info = orig_b(self, layer, *a, **k)
        if info is not None and hasattr(info, "fp8_activations"):
            info.fp8_activations = True
            _hit("all_mxfp8_activations")
        return info

    setattr(cls, BUILDER, builder)
    return 1, f"{CLASS}.{BUILDER}: fp8_activations=True for every FP4 layer"


def _topk_renormalised(fp8, runner, cls):
    rcls = getattr(runner, RUNNER_CLASS)
    orig_r = rcls.run

    def run(self, runner_input, quant_info, *a, **k):
        w = runner_input.topk_weights
        runner_input.topk_weights = w / w.sum(dim=-1, keepdim=True)
        _hit("topk_renormalised")
        return orig_r(self, runner_input, quant_info, *a, **k)

    rcls.run = run
    return 1, f"{RUNNER_CLASS}.run: top-k weights renormalised to sum 1"


def _pad_not_propagated(fp8, runner, cls):
    orig = getattr(cls, PROCESS)

    def process(self, layer, *a, **k):
        r = orig(self, layer, *a, **k)
        if hasattr(layer, "intermediate_pad"):
            del layer.intermediate_pad  # the builder's getattr(layer, "intermediate_pad", 0) reads 0
            _hit("pad_not_propagated")
        return r

    setattr(cls, PROCESS, process)
    return 1, f"{CLASS}.{PROCESS}: layer.intermediate_pad deleted after processing, before {BUILDER}"


#: mutant (or inert variant) -> apply(fp8, runner, fp8's CLASS) -> (places changed, where)
APPLY = {
    "align_256": _fp8_process(lambda: (_Align256(),), "align constant 128 -> 256"),
    "gate_up_one_block": _fp8_process(lambda: (_GateUpOneBlock(),), "up-half slice [P : P + I] -> [I : 2I]"),
    "scale_pad_0xff": _fp8_process(lambda: _pads(scale_byte=E8M0_NAN)("scale_pad_0xff"),
                                   "new e8m0 buffers filled with 0xFF"),
    "scale_pad_0x7f": _fp8_process(lambda: _pads(scale_byte=E8M0_ONE)("scale_pad_0x7f"),  # inert variant: must pass
                                   "new e8m0 buffers filled with 0x7F (scale 1.0; weight pads stay FP4 zero)"),
    "weight_pad_fp4_nonzero": _fp8_process(lambda: _pads(weight_byte=FP4_PAIR_ONE)("weight_pad_fp4_nonzero"),
                                           "new packed-FP4 weight buffers filled with 0x22 (FP4 +1.0 codes)"),
    "is_shuffled_lost": lambda fp8, runner, cls: (_recompile(fp8, BUILDER, _DropIsShuffled()),
                                                  f"{CLASS}.{BUILDER}: the is_shuffled assignments on the fp4 views removed"),
    "all_mxfp8_activations": _all_mxfp8_activations,
    "swiglu_limit_fp8_only": lambda fp8, runner, cls: (_recompile(runner, "run", _SwigluOnlyFp8(), cls_name=RUNNER_CLASS),
                                                       f"{RUNNER_CLASS}.run: swiglu_limit forwarded only when fp8_activations"),
    "topk_renormalised": _topk_renormalised,
    "topk_bf16_prepermute": lambda fp8, runner, cls: (_recompile(runner, PRE_PERMUTE, _ToBf16(), cls_name=None),
                                                      f"{PRE_PERMUTE}: topk_weights.to(torch.float32) -> bfloat16"),
    "gate_up_swap_padding": _fp8_process(lambda: (_SwapGateUpCopy(),), "gate and up sources swapped in the w13 padding copy"),
    "torch_empty_pads": _fp8_process(lambda: (_ZerosToEmpty(),), "padding buffers torch.zeros -> torch.empty"),
    "pad_not_propagated": _pad_not_propagated,
    "padded_ids_sentinel": _topk_rewrite("_post_process_topk_ids", _FillValue(), "padded-row fill_value 0 -> -1"),
    "sqrtsoftplus_as_written": _router_as_written,
    "smallm_bypass_le40": _smallm_bypass,
    "gu_itlv_read_twice": lambda fp8, runner, cls: (
        _recompile(runner, "run", _ItlvDefaultFalse(), {"_fp4moe_env_bool": _env_bool}, cls_name=RUNNER_CLASS),
        f"{RUNNER_CLASS}.run: SGLANG_USE_AITER_MOE_GU_ITLV read with default false"),
    "routed_scale_twice": _topk_rewrite("select_experts", _FoldScaleAlways(),
                                        "fold_scale_after_routing = True (scale multiplied after the router)"),
}


def apply(name: str, fp8, runner=None) -> dict:
    """Apply mutant ``name`` to the imported fp8 module; {"name", "applied", "changed", "why"}."""
    if name not in MUTANTS and name not in INERT_VARIANTS:
        return {"name": name, "applied": False, "changed": 0,
                "why": f"unknown mutant; known: {', '.join(MUTANTS)}; inert variants (must pass): {', '.join(INERT_VARIANTS)}"}
    cls = getattr(fp8, CLASS, None)
    if cls is None or not hasattr(cls, PROCESS):
        return {"name": name, "applied": False, "changed": 0, "why": f"{CLASS}.{PROCESS} not found"}
    try:
        n, where = APPLY[name](fp8, runner, cls)
    except (OSError, TypeError, SyntaxError) as e:
        return {"name": name, "applied": False, "changed": 0, "why": f"could not rewrite SGLang's source: {e}"}
    if not n:
        return {"name": name, "applied": False, "changed": 0, "why": f"pattern not found in this release ({where})"}
    return {"name": name, "applied": True, "changed": n, "where": where}
