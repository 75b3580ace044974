"""(b) Layout conformance: aiter's own ``aiter/ops/shuffle.py``, executed from source with its
``aiter.*`` imports stubbed (aiter never imported), against ``fp4moe.reference.layout`` on seeded
random bytes over the DeepSeek-V4-Pro/-Flash per-rank shapes (every catalogue TP, align 128/256):
w13/w2 weights and scales, plain and GU-interleaved.

- :class:`LayoutCase`, :func:`layout_cases` -- the shapes, deduplicated, each naming the
  catalogue rows that produce it; :func:`reduced_layout_cases` -- the small grid of
  ``aiter-check --layout-grid reduced`` (:data:`LAYOUT_GRIDS`: the grids by name);
- :func:`shuffle_call` -- the entry point this aiter has for a case (``is_guinterleave``
  keyword, or the older ``shuffle_*_a16w4``), or why it has none (``n/a``);
- :func:`check_layout_case` -- one case: aiter's bytes vs the reference's. Non-interleaved scale
  padding is ``torch.empty`` in aiter (uninitialised): only the non-pad bytes are compared
  there; interleaved padding is 0x7F in aiter and compared in full;
- :func:`check_layout` -- every case, after loading the module (aiter's file executed here: in
  aiter-check's source-checks child).
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass

import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.model.catalogue import load_catalogue
from fp4moe.reference import layout
from fp4moe.reference.weight_path import PadPlan
from fp4moe.targets.aiter.results import CheckResult, Result
from fp4moe.targets.aiter.source import SHUFFLE_FILE, STUB_MARK, AiterSource, aiter_stubs, load_shuffle_module, note_stage

#: >1 so that a mix-up between experts shows
LAYOUT_EXPERTS = 2
ALIGNS = (128, 256)
#: the tile aiter's ``shuffle_weight`` is called with
WEIGHT_LAYOUT = (16, 16)
#: catalogue rows named in a passing row
LABELS_SHOWN = 2


@dataclass(frozen=True)
class LayoutCase:
    kind: str  # w13 | w2 | w13_scale | w2_scale
    shape: tuple[int, ...]
    interleaved: bool
    labels: tuple[str, ...]  # catalogue rows that produce this shape

    @property
    def gate_up(self) -> bool:
        return self.kind.startswith("w13")

    @property
    def name(self) -> str:
        mode = "gu-interleaved" if self.interleaved else "plain"
        return f"layout: {self.kind} {list(self.shape)} {mode}"


def layout_cases(experts: int = LAYOUT_EXPERTS, aligns=ALIGNS) -> list[LayoutCase]:
    """Per-rank DeepSeek-V4 shapes (every catalogue TP, ep=1, each align), deduplicated."""
    seen: dict[tuple, list[str]] = {}
    for spec in load_catalogue().values():
        h = spec.hidden
        for tp in spec.tp:
            i_p = spec.moe_intermediate // tp
            for align in aligns:
                p = PadPlan(i_p, align).padded
                label = f"{spec.name} tp{tp} align{align} (I_p {i_p} -> {p})"
                for kind, shape in (
                    ("w13", (experts, 2 * p, h // 2)),
                    ("w2", (experts, h, p // 2)),
                    ("w13_scale", (experts * 2 * p, h // 32)),
                    ("w2_scale", (experts * h, p // 32)),
                ):
                    for itlv in (False, True):
                        seen.setdefault((kind, shape, itlv), []).append(label)
    return [LayoutCase(k, s, i, tuple(labels)) for (k, s, i), labels in seen.items()]


#: ``--layout-grid reduced``: small tileable shapes, plus the two K/32 edge cases of real
#: DeepSeek-V4 ranks at a reduced row count (Pro TP8's w2 scale, K/32 = 12, needs aiter PR #4130;
#: Flash TP16's, K/32 = 4)
REDUCED_SHAPES = (
    ("w13", (LAYOUT_EXPERTS, 64, 128)),
    ("w2", (LAYOUT_EXPERTS, 64, 64)),
    ("w13_scale", (LAYOUT_EXPERTS * 64, 8)),
    ("w2_scale", (LAYOUT_EXPERTS * 32, 16)),
    ("w2_scale", (LAYOUT_EXPERTS * 64, 12)),
    ("w2_scale", (LAYOUT_EXPERTS * 64, 4)),
)


def reduced_layout_cases() -> list[LayoutCase]:
    """:data:`REDUCED_SHAPES`, plain and GU-interleaved: a fault probe's grid, not the model's."""
    return [LayoutCase(k, s, itlv, ("reduced",)) for k, s in REDUCED_SHAPES for itlv in (False, True)]


class LayoutGrid(str, enum.Enum):
    """The layout cases one aiter-check run judges (``--layout-grid``)."""

    DSV4 = "dsv4"  # every catalogue TP and align of DeepSeek-V4-Pro/-Flash (the default)
    REDUCED = "reduced"  # :data:`REDUCED_SHAPES` (probing a fault fast; the model's shapes not judged)


LAYOUT_GRIDS = {LayoutGrid.DSV4: layout_cases, LayoutGrid.REDUCED: reduced_layout_cases}


def function_params_of(fn) -> set[str]:
    """Parameter names of a loaded function (empty when it is absent)."""
    if fn is None:
        return set()
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _weight_call(mod, case: LayoutCase):
    sw = getattr(mod, "shuffle_weight", None)
    g = case.gate_up
    if not case.interleaved:
        if sw is None:
            return None, "no shuffle_weight"
        return (lambda x: sw(x, layout=WEIGHT_LAYOUT)), "shuffle_weight"
    if sw is not None and {"is_guinterleave", "gate_up"} <= function_params_of(sw):
        return (lambda x: sw(x, layout=WEIGHT_LAYOUT, is_guinterleave=True, gate_up=g)), "shuffle_weight(is_guinterleave=True)"
    a16 = getattr(mod, "shuffle_weight_a16w4", None)
    if a16 is not None:
        return (lambda x: a16(x, 16, g)), "shuffle_weight_a16w4 (pre-is_guinterleave API)"
    return None, "no interleaved weight shuffle (shuffle_weight has no is_guinterleave)"


def _scale_call(mod, case: LayoutCase, experts: int):
    ss = getattr(mod, "shuffle_scale", None)
    g = case.gate_up
    params = function_params_of(ss)
    if not case.interleaved:
        if ss is None:
            return None, "no shuffle_scale (the plain gfx950 scale shuffle is absent)"
        if "is_guinterleave" in params:
            return (lambda x: ss(x, is_guinterleave=False)), "shuffle_scale"
        return (lambda x: ss(x)), "shuffle_scale (no is_guinterleave keyword)"
    if ss is not None and {"experts_cnt", "is_guinterleave", "gate_up"} <= params:
        return (lambda x: ss(x, experts_cnt=experts, is_guinterleave=True, gate_up=g)), "shuffle_scale(is_guinterleave=True)"
    a16 = getattr(mod, "shuffle_scale_a16w4", None)
    if a16 is not None:
        return (lambda x: a16(x, experts, g)), "shuffle_scale_a16w4 (pre-is_guinterleave API)"
    return None, "no interleaved scale shuffle"


def shuffle_call(mod, case: LayoutCase, experts: int):
    """(callable(x) -> tensor, how) for this aiter, or (None, why-not)."""
    return _weight_call(mod, case) if case.kind in ("w13", "w2") else _scale_call(mod, case, experts)


def _ours(case: LayoutCase, x: torch.Tensor, experts: int) -> torch.Tensor:
    if case.kind in ("w13", "w2"):
        return layout.shuffle_weight(x, WEIGHT_LAYOUT, is_guinterleave=case.interleaved, gate_up=case.gate_up)
    return layout.shuffle_scale(x, experts_cnt=experts, is_guinterleave=case.interleaved, gate_up=case.gate_up)


def _call_aiter(fn, how: str, case: LayoutCase, x: torch.Tensor):
    """(aiter's output, None) or (None, the row that says why there is none)."""
    try:
        with aiter_stubs():  # a lazy `from aiter... import` inside the function resolves to the stubs too
            return fn(x), None
    except Exception as e:  # old aiter: view/assert errors on shapes it does not support
        msg = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
        if isinstance(e, ImportError) or STUB_MARK in str(e):
            # the function needs more of aiter than the stubs model: the check could not run
            return None, CheckResult(case.name, Result.FAIL, f"{how} could not run from source ({msg}); check this case on the runner")
        return None, CheckResult(case.name, Result.ABSENT, f"not supported by this aiter: {how} raises {msg}")


def _first_diff(theirs: torch.Tensor, ours: torch.Tensor, keep: torch.Tensor | None) -> str:
    bad = theirs != ours if keep is None else (theirs != ours) & keep
    at = tuple(int(i) for i in bad.nonzero()[0])
    return f"; first at {list(at)}: aiter 0x{int(theirs[at]):02X}, reference 0x{int(ours[at]):02X}"


def _where(mod, how: str) -> str:
    """`` [aiter/ops/shuffle.py:LINE]`` of the shuffle function ``how`` names (its ``def``), or ""."""
    fn = getattr(mod, how.split("(")[0].split(" ")[0], None)
    code = getattr(fn, "__code__", None)
    return f" [{SHUFFLE_FILE}:{code.co_firstlineno}]" if code is not None else f" [{SHUFFLE_FILE}]"


def _compare(case: LayoutCase, how: str, theirs: torch.Tensor, ours: torch.Tensor, experts: int, where: str = "") -> CheckResult:
    theirs = theirs.view(torch.uint8) if theirs.dtype != torch.uint8 else theirs
    ours = ours.view(torch.uint8)
    if tuple(theirs.shape) != tuple(ours.shape):
        return CheckResult(case.name, Result.FAIL, f"{how}: output shape {tuple(theirs.shape)} != fp4moe.reference.layout "
                                                   f"{tuple(ours.shape)}{where}")
    note = ""
    if case.kind.endswith("scale") and not case.interleaved:
        rows, cols = case.shape
        keep = ~layout.scale_padding_mask(rows, cols, experts, False, case.gate_up)
        pads = int((~keep).sum())
        note = f"; {pads} pad bytes not compared (aiter leaves them uninitialised)" if pads else ""
        # bytes equal everywhere are equal where compared (torch.equal: no count made)
        diff = 0 if torch.equal(theirs, ours) else int((theirs[keep] != ours[keep]).sum())
        compared = int(keep.sum())
    else:
        keep = None
        diff = 0 if torch.equal(theirs, ours) else int((theirs != ours).sum())
        compared = ours.numel()
    if diff:
        return CheckResult(case.name, Result.FAIL, f"{how}: {diff} of {compared} bytes differ from fp4moe.reference.layout{note}"
                                                   f"{_first_diff(theirs, ours, keep)}{where}")
    shown = ", ".join(case.labels[:LABELS_SHOWN]) + (f" +{len(case.labels) - LABELS_SHOWN} more" if len(case.labels) > LABELS_SHOWN else "")
    return CheckResult(case.name, Result.PASS, f"{how}: {compared} bytes identical{note} [{shown}]")


def check_layout_case(mod, case: LayoutCase, experts: int = LAYOUT_EXPERTS, seed: int = 0) -> CheckResult:
    """aiter's shuffle of one case against ``fp4moe.reference.layout``."""
    fn, how = shuffle_call(mod, case, experts)
    if fn is None:
        return CheckResult(case.name, Result.ABSENT, f"not supported by this aiter: {how}")
    note_stage(f"calling {how} from {SHUFFLE_FILE} ({case.name})")
    g = torch.Generator().manual_seed(seed)
    # full byte range 0..255: every nibble/e8m0 value, never all-zeros; no NaN semantics matter for a permutation
    x = torch.randint(0, 256, case.shape, dtype=torch.uint8, generator=g)
    x_before = x.clone()
    theirs, why_not = _call_aiter(fn, how, case, x)
    if why_not is not None:
        return why_not
    ours = _ours(case, x, experts)
    if not torch.equal(x, x_before):
        return CheckResult(case.name, Result.FAIL, f"{how} modified its input in place{_where(mod, how)}")
    return _compare(case, how, theirs, ours, experts, _where(mod, how))


def check_layout(src: AiterSource, cases: list[LayoutCase] | None = None) -> list[CheckResult]:
    note_stage(f"executing {SHUFFLE_FILE}")
    try:
        mod = load_shuffle_module(src)
    except SyntaxError as e:
        raise GateCannotRun(f"{src.origin}: {SHUFFLE_FILE}: syntax error at line {e.lineno}: {e.msg}") from e
    except (ValueError, GateCannotRun):
        raise  # unreadable file (bad CRC, encoding): could not run, names the file
    except Exception as e:
        return [CheckResult(f"layout: load {SHUFFLE_FILE}", Result.FAIL, f"executing it from source failed: {type(e).__name__}: {e}")]
    if mod is None:
        return [CheckResult(f"layout: load {SHUFFLE_FILE}", Result.ABSENT, f"not supported by this aiter: no {SHUFFLE_FILE}")]
    return [check_layout_case(mod, c) for c in (cases if cases is not None else layout_cases())]
