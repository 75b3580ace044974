"""Applying the SGLang mutants (catalogue: ``fp4moe.targets.sglang.mutations``) in SGLang's OWN functions.

CHILD PROCESS ONLY (``fp4moe.targets.sglang.child.drive`` applies one, named by the request, after SGLang is
imported and before the rows are driven). A mutant rewrites the syntax tree of SGLang's
``Fp8MoEMethod.process_weights_after_loading_block_quant`` (or wraps its quant-info builder)
in the release under test and recompiles it in the module's own globals; it reports how many
places it changed. Zero places = not applied: the gate then exits 2 ("not judged"), never 0.

``fp4moe-gate zoo --target sglang`` runs the sglang tier once per mutant; every one must fail it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import torch

from fp4moe.targets.sglang.mutations import MUTANTS

CLASS = "Fp8MoEMethod"
PROCESS = "process_weights_after_loading_block_quant"
BUILDER = "maybe_get_hip_aiter_quant_info"

#: mutants whose effect happens at run time: how often it did (0 after the drive = no effect)
_RUNTIME_HITS: dict[str, int] = {}
RUNTIME_MUTANTS = ("pad_not_propagated", "scale_pad_0xff")


def runtime_hits(name: str) -> int | None:
    """How many times a run-time mutant acted so far; None for source rewrites (static)."""
    return _RUNTIME_HITS.get(name, 0) if name in RUNTIME_MUTANTS else None


def _recompile(fp8, func_name: str, transformer: ast.NodeTransformer, extra_globals: dict | None = None) -> int:
    cls = getattr(fp8, CLASS)
    fn = getattr(cls, func_name)
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    tree = transformer.visit(tree)
    if not transformer.changed:
        return 0
    ast.fix_missing_locations(tree)
    code = compile(tree, f"<fp4moe mutant of {fp8.__name__}.{CLASS}.{func_name}>", "exec")
    ns: dict = {}
    g = fp8.__dict__ if not extra_globals else dict(fp8.__dict__, **extra_globals)
    exec(code, g, ns)
    new = ns[func_name]
    if extra_globals:
        new = types.FunctionType(new.__code__, g, new.__name__, new.__defaults__, new.__closure__)
    setattr(cls, func_name, new)
    return transformer.changed


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


class _TorchNaNScales:
    """``torch`` as seen by the mutated function: new e8m0 buffers (the scale padding) are
    filled with 0xFF instead of zeros."""

    def __getattr__(self, item):
        return getattr(torch, item)

    @staticmethod
    def _nan_if_scale(t):
        if t.dtype == torch.float8_e8m0fnu:
            t.view(torch.uint8).fill_(0xFF)
            _RUNTIME_HITS["scale_pad_0xff"] = _RUNTIME_HITS.get("scale_pad_0xff", 0) + 1
        return t

    def zeros(self, *a, **k):
        return self._nan_if_scale(torch.zeros(*a, **k))

    def empty(self, *a, **k):
        return self._nan_if_scale(torch.empty(*a, **k))

    def full(self, *a, **k):
        return self._nan_if_scale(torch.full(*a, **k))


def apply(name: str, fp8) -> dict:
    """Apply mutant ``name`` to the imported fp8 module; {"name", "applied", "changed", "why"}."""
    if name not in MUTANTS:
        return {"name": name, "applied": False, "changed": 0, "why": f"unknown mutant; known: {', '.join(MUTANTS)}"}
    cls = getattr(fp8, CLASS, None)
    if cls is None or not hasattr(cls, PROCESS):
        return {"name": name, "applied": False, "changed": 0, "why": f"{CLASS}.{PROCESS} not found"}
    try:
        if name == "align_256":
            n = _recompile(fp8, PROCESS, _Align256())
            where = f"{CLASS}.{PROCESS}: align constant 128 -> 256"
        elif name == "gate_up_one_block":
            n = _recompile(fp8, PROCESS, _GateUpOneBlock())
            where = f"{CLASS}.{PROCESS}: up-half slice [P : P + I] -> [I : 2I]"
        elif name == "scale_pad_0xff":
            n = _recompile(fp8, PROCESS, _Unchanged(), {"torch": _TorchNaNScales()})
            where = f"{CLASS}.{PROCESS}: new e8m0 buffers filled with 0xFF"
        else:  # pad_not_propagated
            orig = getattr(cls, PROCESS)

            def process(self, layer, *a, **k):
                r = orig(self, layer, *a, **k)
                if hasattr(layer, "intermediate_pad"):
                    del layer.intermediate_pad  # the builder's getattr(layer, "intermediate_pad", 0) reads 0
                    _RUNTIME_HITS["pad_not_propagated"] = _RUNTIME_HITS.get("pad_not_propagated", 0) + 1
                return r

            setattr(cls, PROCESS, process)
            n = 1
            where = f"{CLASS}.{PROCESS}: layer.intermediate_pad deleted after processing, before {BUILDER}"
    except (OSError, TypeError, SyntaxError) as e:
        return {"name": name, "applied": False, "changed": 0, "why": f"could not rewrite SGLang's source: {e}"}
    if not n:
        return {"name": name, "applied": False, "changed": 0, "why": f"pattern not found in this release ({where})"}
    return {"name": name, "applied": True, "changed": n, "where": where}
