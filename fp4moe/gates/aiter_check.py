"""``fp4moe-gate aiter-check``: is this aiter still the one the gate was written against?

Runs on a CPU wherever aiter's Python sources exist, even where its GPU runtime cannot load
(sources from ``fp4moe.targets.aiter.source``: ``--aiter-src DIR``, ``--aiter-wheel WHEEL``, or the
installed aiter found without importing it). Three groups of checks:

(a) API conformance: ``fused_moe``, ``shuffle_weight`` and ``shuffle_scale`` signatures read
    with ``ast``; every keyword in ``fp4moe.targets.aiter.backend.AITER_CALL_KEYWORDS`` must exist.
    A keyword the backend always passes -> FAIL when missing; one it passes only under a
    condition (e.g. ``gate_mode`` for GU-interleaved weights) -> warn, naming the condition.
(b) Layout conformance: aiter's own ``aiter/ops/shuffle.py``, executed from source with its
    ``aiter.*`` imports stubbed (never importing aiter), against ``fp4moe.reference.layout`` on seeded
    random bytes, over the DeepSeek-V4-Pro/Flash per-rank shapes (TP 1-16, align 128/256):
    w13/w2 weights and scales, plain and GU-interleaved. Non-interleaved scale padding is
    ``torch.empty`` in aiter (uninitialised), so only the non-pad bytes are compared there;
    interleaved padding is 0x7F in aiter and compared in full. A case is "n/a" where this
    aiter has no function/keyword for it or raises on the shape ("not supported by this aiter").
    Older aiter (PyPI amd-aiter 0.1.7.post2.dev18) has no ``is_guinterleave`` keyword and no
    ``shuffle_scale``: its ``shuffle_weight_a16w4`` / ``shuffle_scale_a16w4`` are the
    interleaved entry points there, and are used for those cases.
(c) Capability probes: aiter PR #4130 (interleaved ``shuffle_scale`` accepts K/32 = 12, i.e.
    intermediate 384 = DeepSeek-V4-Pro w2 at TP8, padding the columns to 16); whether
    ``fused_moe`` reads ``AITER_BF16_FP8_MOE_BOUND`` (what selects fp8 activations at decode).
(d) Differential conformance (``fp4moe.targets.aiter.conformance``): aiter's own pure-torch reference
    functions, executed from these sources, against ``fp4moe`` -- codecs, quantizers on edge
    blocks, stage 1 / stage 2 / the full MoE for a16w4 and a8w4 with and without
    ``doweight_stage1``, ``swiglu_limit`` and the pads. Rows read ``bitwise``, ``within`` (a
    stated tolerance) or ``DIFFER`` (with where, and the aiter function's file:line).

(e) Kernel checks (``fp4moe.targets.aiter.kernels``): aiter's *Triton* MXFP4 MoE kernels
    (``moe_gemm_a16w4`` / ``moe_gemm_a8w4``, routing, ``reduce_grouped``) executed -- on a CPU
    under the Triton interpreter -- and judged: vs the reference within the kernel budget, vs
    the per-slot-bf16 reference at the ulp level, bitwise repeat, pad told == untold, pad
    poison (both scale layouts), allocation poison, the pad honoured across the ``block_m``
    switch, and aiter's routing vs a tie-proof top-k at 256/384 experts. Needs triton>=3.8
    (exit 2 naming it otherwise; ``--no-kernels`` skips the group and says so). A tree without
    ``aiter/ops/triton/moe/`` gives an ``n/a`` row. ``--known-defects FILE`` accepts the defects
    listed there (``known``); an entry that no longer reproduces is ``stale`` and fails (``not
    seen in this tree``, info, when the tree predates the entry's ``first_seen_date``).
    Each component (routing, a16w4, a8w4 + its MXFP8 quant, reduce) is loaded and judged on its
    own: one that cannot load or be called is a ``not judged`` row naming file and
    symbol/keyword, and the others still run; the GEMMs run on the gate's own routing.
    ``--base-src OLD`` runs the same inputs through both trees: per output bitwise / within
    (the kernel budget) / DIFFER, routing judged on its own (``fixed`` where only the head
    matches the tie-proof top-k); the base tree's routing/reduce rows are shown as ``base:``.

aiter's code runs in a child process (``fp4moe.infra.childproc``) with a time limit (``--timeout``,
default ``DEFAULT_TIMEOUT_S``): an aiter file that calls ``sys.exit`` at import or inside a
function, hangs, has a syntax error, or cannot be read from the wheel (bad CRC) ends the
command with exit 2 and one line naming the file, never with a verdict.

Exit: 0 when nothing fails; 1 when a check FAILs or DIFFERs, when a function or keyword the
checks need is absent ("n/a", unless ``--allow-missing``), when ``fused_moe`` takes only
``**kwargs`` (unless ``--allow-kwargs``), and with ``--strict`` also on warn/missing
capabilities; 2 when the check could not run, or when nothing failed but a kernel component
was not judged (the table is printed; one stderr line names it).
"""

from __future__ import annotations

import argparse
import inspect
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fp4moe.targets.aiter import source as aiter_src
from fp4moe.infra import childproc, harness
from fp4moe.infra.callrecord import ReplayMissing
from fp4moe.infra import files
from fp4moe.reference import layout
from fp4moe.targets.aiter.source import FUSED_MOE_FILE, SHUFFLE_FILE, STUB_MARK, AiterSource, aiter_stubs, function_params, load_shuffle_module
from fp4moe.targets.aiter.backend import ALWAYS, AITER_CALL_KEYWORDS, BOUND_ENV
from fp4moe.model.catalogue import load_catalogue
from fp4moe.infra.errors import GateCannotRun, exit_code_of
from fp4moe.infra.harness import Deadline
from fp4moe.infra.paths import wheel_dir
from fp4moe.reference.weight_path import PadPlan
from fp4moe.targets.aiter import kernels as kernels_pkg
from fp4moe.targets.aiter.kernels import defects as known_defects

PASS, FAIL, WARN, NA, PRESENT, MISSING = "pass", "FAIL", "warn", "n/a", "present", "missing"
KNOWN, INFO = "known", "info"  # a registry-accepted defect; a fact without a verdict
NOT_JUDGED = "not judged"  # a kernel component (or an upgrade comparison) that could not be loaded or called
FIXED = "fixed"  # upgrade: routing differs and the HEAD tree is the one matching the tie-proof top-k
BITWISE, WITHIN, DIFFER = "bitwise", "within", "DIFFER"
from fp4moe.targets.aiter import CHECK_TIMEOUT_S as DEFAULT_TIMEOUT_S  # noqa: E402 -- light, for --help
WHEEL_ENV = "FP4MOE_AITER_WHEEL"
WHEEL_CACHE = wheel_dir()  # ci/fetch_amd_aiter_wheel.sh downloads here (outside the checkout)
PR4130_PROBE_COLS = 12  # K/32 for intermediate 384
LAYOUT_EXPERTS = 2  # >1 so that a mix-up between experts shows
ALIGNS = (128, 256)


@dataclass
class CheckResult:
    check: str
    result: str
    detail: str


# ---------------------------------------------------------------------- (a) API
def _params_or_cannot_run(src: AiterSource, relpath: str, func: str) -> list[str] | None:
    try:
        return function_params(src.read(relpath), func)
    except SyntaxError as e:
        raise GateCannotRun(f"{src.origin}: {relpath}: syntax error at line {e.lineno}: {e.msg}") from e


def check_api(src: AiterSource, keywords: dict[str, dict[str, str]] = AITER_CALL_KEYWORDS, allow_kwargs: bool = False) -> list[CheckResult]:
    files = {"fused_moe": FUSED_MOE_FILE, "shuffle_weight": SHUFFLE_FILE, "shuffle_scale": SHUFFLE_FILE}
    out = []
    for func, wanted in keywords.items():
        name = f"api: {func}"
        params = _params_or_cannot_run(src, files[func], func)
        if params is None:
            always = [k for k, when in wanted.items() if when == ALWAYS]
            conds = sorted({w for w in wanted.values() if w != ALWAYS})
            if always:
                out.append(CheckResult(name, FAIL, f"{func} not defined in {files[func]}"))
            else:  # a missing function is not checked: n/a, which fails unless --allow-missing
                out.append(CheckResult(name, NA, f"{func} not defined in {files[func]}; {'; '.join(conds)}"))
            continue
        named = [p for p in params if not p.startswith("*")]
        kwargs = [p for p in params if p.startswith("**")]
        hidden = [k for k in wanted if k not in named]
        if kwargs and hidden:
            res = PASS if allow_kwargs else FAIL
            out.append(CheckResult(name, res, f"takes {kwargs[0]}: {len(hidden)} keyword(s) not in its signature cannot be verified "
                                   f"({', '.join(hidden[:4])}{' ...' if len(hidden) > 4 else ''})" + ("; accepted by --allow-kwargs" if allow_kwargs else "; --allow-kwargs accepts this")))
            continue
        missing_always = [k for k, when in wanted.items() if when == ALWAYS and k not in params]
        missing_cond = [(k, when) for k, when in wanted.items() if when != ALWAYS and k not in params]
        if missing_always:
            out.append(CheckResult(name, FAIL, f"missing keyword(s) the backend always passes: {', '.join(missing_always)}"))
        for k, when in missing_cond:
            out.append(CheckResult(f"{name}.{k}", WARN, f"keyword absent; {when}"))
        if not missing_always and not missing_cond:
            out.append(CheckResult(name, PASS, f"all {len(wanted)} keywords present"))
    return out


# ---------------------------------------------------------------------- (b) layout
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


def _aiter_shuffle_call(mod, case: LayoutCase, experts: int):
    """(callable(x) -> tensor, how) for this aiter, or (None, why-not)."""
    sw = getattr(mod, "shuffle_weight", None)
    ss = getattr(mod, "shuffle_scale", None)
    g = case.gate_up
    if case.kind in ("w13", "w2"):
        if not case.interleaved:
            if sw is None:
                return None, "no shuffle_weight"
            return (lambda x: sw(x, layout=(16, 16))), "shuffle_weight"
        params = function_params_of(sw)
        if sw is not None and {"is_guinterleave", "gate_up"} <= params:
            return (lambda x: sw(x, layout=(16, 16), is_guinterleave=True, gate_up=g)), "shuffle_weight(is_guinterleave=True)"
        a16 = getattr(mod, "shuffle_weight_a16w4", None)
        if a16 is not None:
            return (lambda x: a16(x, 16, g)), "shuffle_weight_a16w4 (pre-is_guinterleave API)"
        return None, "no interleaved weight shuffle (shuffle_weight has no is_guinterleave)"
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


def function_params_of(fn) -> set[str]:
    """Parameter names of a loaded function (empty when it is absent)."""
    if fn is None:
        return set()
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _ours(case: LayoutCase, x: torch.Tensor, experts: int) -> torch.Tensor:
    if case.kind in ("w13", "w2"):
        return layout.shuffle_weight(x, (16, 16), is_guinterleave=case.interleaved, gate_up=case.gate_up)
    return layout.shuffle_scale(x, experts_cnt=experts, is_guinterleave=case.interleaved, gate_up=case.gate_up)


def check_layout_case(mod, case: LayoutCase, experts: int = LAYOUT_EXPERTS, seed: int = 0, judge: bool = True) -> CheckResult:
    """aiter's shuffle of one case against ``fp4moe.reference.layout``. ``judge=False`` (the
    recording child) stops after aiter's call: its result is recorded, the gate compares."""
    fn, how = _aiter_shuffle_call(mod, case, experts)
    if fn is None:
        return CheckResult(case.name, NA, f"not supported by this aiter: {how}")
    _progress(f"calling {how} from {SHUFFLE_FILE} ({case.name})")
    g = torch.Generator().manual_seed(seed)
    # full byte range 0..255: every nibble/e8m0 value, never all-zeros; no NaN semantics matter for a permutation
    x = torch.randint(0, 256, case.shape, dtype=torch.uint8, generator=g)
    x_before = x.clone()
    try:
        with aiter_stubs():  # a lazy `from aiter... import` inside the function resolves to the stubs too
            theirs = fn(x)
    except ReplayMissing as e:
        return CheckResult(case.name, FAIL, f"{how}: {e}")
    except Exception as e:  # old aiter: view/assert errors on shapes it does not support
        msg = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
        if isinstance(e, ImportError) or STUB_MARK in str(e):
            # the function needs more of aiter than the stubs model: the check could not run
            return CheckResult(case.name, FAIL, f"{how} could not run from source ({msg}); check this case on the runner")
        return CheckResult(case.name, NA, f"not supported by this aiter: {how} raises {msg}")
    if not judge:
        return CheckResult(case.name, INFO, "recorded")
    ours = _ours(case, x, experts)
    if not torch.equal(x, x_before):
        return CheckResult(case.name, FAIL, f"{how} modified its input in place")
    theirs = theirs.view(torch.uint8) if theirs.dtype != torch.uint8 else theirs
    ours = ours.view(torch.uint8)
    if tuple(theirs.shape) != tuple(ours.shape):
        return CheckResult(case.name, FAIL, f"{how}: output shape {tuple(theirs.shape)} != fp4moe.reference.layout {tuple(ours.shape)}")
    note = ""
    if case.kind.endswith("scale") and not case.interleaved:
        rows, cols = case.shape
        keep = ~layout.scale_padding_mask(rows, cols, experts, False, case.gate_up)
        pads = int((~keep).sum())
        note = f"; {pads} pad bytes not compared (aiter leaves them uninitialised)" if pads else ""
        diff = int((theirs[keep] != ours[keep]).sum())
        compared = int(keep.sum())
    else:
        diff = int((theirs != ours).sum())
        compared = ours.numel()
    if diff:
        return CheckResult(case.name, FAIL, f"{how}: {diff} of {compared} bytes differ from fp4moe.reference.layout{note}")
    rows = ", ".join(case.labels[:2]) + (f" +{len(case.labels) - 2} more" if len(case.labels) > 2 else "")
    return CheckResult(case.name, PASS, f"{how}: {compared} bytes identical{note} [{rows}]")


def check_layout(src: AiterSource, cases: list[LayoutCase] | None = None, access=None) -> list[CheckResult]:
    _progress(f"executing {SHUFFLE_FILE}")
    try:
        mod = (access or DirectAccess(src)).shuffle()
    except SyntaxError as e:
        raise GateCannotRun(f"{src.origin}: {SHUFFLE_FILE}: syntax error at line {e.lineno}: {e.msg}") from e
    except (ValueError, GateCannotRun):
        raise  # unreadable file (bad CRC, encoding): could not run, names the file
    except Exception as e:
        return [CheckResult(f"layout: load {SHUFFLE_FILE}", FAIL, f"executing it from source failed: {type(e).__name__}: {e}")]
    if mod is None:
        return [CheckResult("layout: load aiter/ops/shuffle.py", NA, "not supported by this aiter: no aiter/ops/shuffle.py")]
    judge = getattr(access, "judges", True)
    return [check_layout_case(mod, c, judge=judge) for c in (cases if cases is not None else layout_cases())]


# ---------------------------------------------------------------------- (c) capabilities
def probe_pr4130(src: AiterSource, experts: int = LAYOUT_EXPERTS, rows_per_expert: int = 64, access=None) -> CheckResult:
    """Interleaved shuffle_scale on [E*N, 12]: present iff it returns [E*N, 16]."""
    name = "capability: PR #4130 (interleaved scale K/32=12, inter 384)"
    _progress(f"executing {SHUFFLE_FILE} (PR #4130 probe)")
    try:
        mod = (access or DirectAccess(src)).shuffle()
    except (ValueError, GateCannotRun, SyntaxError):
        raise
    except Exception as e:
        return CheckResult(name, MISSING, f"aiter/ops/shuffle.py does not load from source: {type(e).__name__}: {e}")
    if mod is None:
        return CheckResult(name, MISSING, "no aiter/ops/shuffle.py")
    x = torch.randint(0, 256, (experts * rows_per_expert, PR4130_PROBE_COLS), dtype=torch.uint8, generator=torch.Generator().manual_seed(4130))
    ss = getattr(mod, "shuffle_scale", None)
    if ss is not None and "is_guinterleave" in function_params_of(ss):
        call, how = (lambda: ss(x, experts_cnt=experts, is_guinterleave=True, gate_up=False)), "shuffle_scale(is_guinterleave=True)"
    elif getattr(mod, "shuffle_scale_a16w4", None) is not None:
        a16 = mod.shuffle_scale_a16w4
        call, how = (lambda: a16(x, experts, False)), "shuffle_scale_a16w4"
    else:
        return CheckResult(name, MISSING, "no interleaved scale shuffle in aiter/ops/shuffle.py")
    try:
        with aiter_stubs():
            out = call()
    except ReplayMissing as e:
        return CheckResult(name, FAIL, f"{how}: {e}")
    except Exception as e:
        return CheckResult(name, MISSING, f"{how} raises {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    want = layout.shuffled_scale_shape(x.shape[0], PR4130_PROBE_COLS, True)
    if tuple(out.shape) != want:
        return CheckResult(name, MISSING, f"{how} returned shape {tuple(out.shape)}, not {want}")
    return CheckResult(name, PRESENT, f"{how} pads K/32 12 -> {want[1]}")


def probe_bound_env(src: AiterSource) -> CheckResult:
    name = f"capability: fused_moe reads {BOUND_ENV}"
    text = src.read(FUSED_MOE_FILE)
    if text is None:
        return CheckResult(name, MISSING, f"no {FUSED_MOE_FILE}")
    if BOUND_ENV in text:
        return CheckResult(name, PRESENT, "=0 gives fp8 activations at decode on gfx950 (default 256: bf16 below 256 tokens)")
    return CheckResult(name, MISSING, "act_mode a8w4/a16w4 cannot be selected by environment on this aiter")


# ---------------------------------------------------------------------- driver
def find_wheel() -> Path | None:
    """``$FP4MOE_AITER_WHEEL`` or the newest amd_aiter wheel in the wheel cache (``fp4moe.infra.paths.wheel_dir()``); None if neither."""
    env = os.environ.get(WHEEL_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    wheels = sorted(WHEEL_CACHE.glob("amd_aiter-*.whl")) if WHEEL_CACHE.is_dir() else []
    return wheels[-1] if wheels else None


def resolve_source(aiter_src: str | None = None, aiter_wheel: str | None = None) -> AiterSource:
    if aiter_src and aiter_wheel:
        raise ValueError("--aiter-src and --aiter-wheel are exclusive: give one")
    if aiter_src:
        return AiterSource.from_dir(aiter_src)
    if aiter_wheel:
        return AiterSource.from_wheel(aiter_wheel)
    src = AiterSource.from_installed()
    if src is None:
        raise GateCannotRun(
            "no aiter sources: aiter is not installed (importlib.util.find_spec('aiter') found no package); "
            "pass --aiter-src DIR or --aiter-wheel WHEEL (bash ci/fetch_amd_aiter_wheel.sh fetches the PyPI wheel)"
        )
    return src


#: Child side: the file where it notes what aiter code it is about to run (set by the parent).
PROGRESS_ENV = "FP4MOE_AITER_CHECK_PROGRESS"


def _progress(stage: str) -> None:
    """Child side: note what aiter code is about to run, so that an exit or a hang inside it
    is reported naming it (no-op outside a child run)."""
    path = os.environ.get(PROGRESS_ENV)
    if path:
        files.atomic_write_text(path, stage, replace=True)  # a FIFO left there by aiter's code: renamed over


#: Longest stage note read back from a child (a FIFO or a huge file left there is not read).
MAX_STAGE_BYTES = 4096


def _last_stage(path: str | None, default: str) -> str:
    try:
        text = files.read_regular_bytes(path, limit=MAX_STAGE_BYTES).decode("utf-8", "replace") if path else ""
    except OSError:
        return default
    return " ".join(text.split())[:300] or default


def check_differential(src: AiterSource, moe_cases=None, access=None) -> list[CheckResult]:
    from fp4moe.targets.aiter import conformance as conf

    aiter_src.PROGRESS = _progress
    try:
        diffs = conf.run_differential(src, moe_cases, refs=(access or DirectAccess(src)).refs())
    finally:
        aiter_src.PROGRESS = None
    res = {conf.BITWISE: BITWISE, conf.WITHIN: WITHIN, conf.DIFFER: DIFFER, conf.MISSING_FN: NA}
    return [CheckResult(f"diff: {d.check}", res[d.outcome], f"{d.detail} [aiter {d.aiter_fn}]") for d in diffs]


def run_checks(src: AiterSource, cases: list[LayoutCase] | None = None, *, differential: bool = False, moe_cases=None,
               allow_kwargs: bool = False, access=None) -> list[CheckResult]:
    """Every check of groups (a)-(d). ``access`` says where aiter's functions come from:
    :class:`DirectAccess` (this process: tests), a recording one (the child) or a replaying one
    (the judge, from the child's log: :func:`run_in_child`). (a) and the bound probe read source
    text only (``ast``, no aiter code runs)."""
    access = access or DirectAccess(src)
    _progress(f"reading {FUSED_MOE_FILE} and {SHUFFLE_FILE} signatures")
    out = check_api(src, allow_kwargs=allow_kwargs) + check_layout(src, cases, access) + \
        [probe_pr4130(src, access=access), probe_bound_env(src)]
    if differential:
        out += check_differential(src, moe_cases, access)
    return out


# ---------------------------------------------------------------------- where aiter's functions come from
#: the attributes of aiter/ops/shuffle.py the layout checks and the PR #4130 probe read
SHUFFLE_ATTRS = ("shuffle_weight", "shuffle_scale", "shuffle_weight_a16w4", "shuffle_scale_a16w4")


class DirectAccess:
    """aiter's files executed in THIS process (tests, and the child under a recorder)."""

    def __init__(self, src: AiterSource):
        self.src = src

    def shuffle(self):
        return load_shuffle_module(self.src)

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.AiterRefs(self.src)


class RecordingAccess(DirectAccess):
    """The child's access: every aiter function the checks call is recorded
    (``fp4moe.infra.callrecord.Recorder``); a load that fails is recorded and raised again."""

    judges = False  # the child only records: its rows are never read

    def __init__(self, src: AiterSource, recorder):
        super().__init__(src)
        self.rec, self._shuffle = recorder, None

    def shuffle(self):
        if self._shuffle is None:
            try:
                mod = super().shuffle()
            except (SyntaxError, ValueError, GateCannotRun):
                raise  # could not run: the child's cannot-run record names the file
            except Exception as e:
                self.rec.error("shuffle.load_error", e)
                raise
            self.rec.error("shuffle.load_error", None)
            self._shuffle = (self.rec.module("shuffle", mod, SHUFFLE_ATTRS),)
        return self._shuffle[0]

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.record_refs(super().refs(), self.rec)


class ReplayAccess:
    """The judge's access: aiter's functions answered from the child's call log
    (``fp4moe.infra.callrecord.Replay``); no aiter code runs in this process."""

    def __init__(self, replay):
        self.rp = replay

    def shuffle(self):
        from fp4moe.infra.callrecord import reraise

        reraise(self.rp.value("shuffle.load_error"))
        return self.rp.module("shuffle")

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.ReplayedRefs(self.rp)


def verdict(results: list[CheckResult], strict: bool = False, allow_missing: bool = False) -> int:
    """1 when any judged check fails (a regression measured), else 2 when a component could not
    be judged (``not judged`` rows; :func:`unjudged_line` names it), else 0. Rows of the base
    tree under ``--base-src`` ("base: ...") are facts about the OLD tree: they never fail the
    head's verdict (the ``upgrade:`` rows compare the two)."""
    bad = {FAIL, DIFFER} | (set() if allow_missing else {NA}) | ({WARN, MISSING} if strict else set())
    judged = [r for r in results if not r.check.startswith("base: ")]
    return exit_code_of(regressed=any(r.result in bad for r in judged),
                        unjudged=any(r.result == NOT_JUDGED for r in results))


def unjudged_line(results: list[CheckResult]) -> str | None:
    """The one stderr line for exit 2 from :func:`verdict`: the first component not judged."""
    nj = [r for r in results if r.result == NOT_JUDGED]
    if not nj:
        return None
    more = f" (+{len(nj) - 1} more not-judged row(s) in the table)" if len(nj) > 1 else ""
    return f"not judged: {nj[0].check.removesuffix(': not judged')}: {nj[0].detail}{more}"


def format_table(results: list[CheckResult], src_origin: str, version: str | None, fmt: str = "text") -> str:
    head = f"aiter-check: {src_origin}, version {version or 'unknown'}"
    if fmt == "markdown":
        lines = [f"### {head}", "", "| check | result | detail |", "| --- | --- | --- |"]
        lines += [f"| {r.check} | {r.result} | {r.detail.replace('|', '/')} |" for r in results]
        return "\n".join(lines)
    w1 = max(len("check"), *(len(r.check) for r in results))
    w2 = max(len("result"), *(len(r.result) for r in results))
    lines = [head, f"{'check':<{w1}}  {'result':<{w2}}  detail", f"{'-' * w1}  {'-' * w2}  ------"]
    lines += [f"{r.check:<{w1}}  {r.result:<{w2}}  {r.detail}" for r in results]
    counted = [r for r in results if not r.check.startswith("base: ")]  # the old tree's facts: no verdict
    counts = {k: sum(r.result == k for r in counted) for k in (PASS, BITWISE, WITHIN, FIXED, FAIL, DIFFER, KNOWN, WARN, NA, PRESENT,
                                                                MISSING, NOT_JUDGED)}
    nbase = len(results) - len(counted)
    lines.append("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
                 + (f" (+{nbase} base-tree rows, not counted)" if nbase else ""))
    return "\n".join(lines)


def _source_args(src_kind: str, path: str) -> list[str]:
    path = os.path.abspath(path)
    return ["--aiter-src", path] if src_kind == "dir" else ["--aiter-wheel", path]


def _refuse_output_inside(option: str, out: str | None, tree: str) -> None:
    """The gate's own output may not land in the tree under test (the caller's results and
    the code under test never share a folder)."""
    if not out:
        return
    o, t = Path(out).resolve(), Path(tree).resolve()
    if o == t or t in o.parents:
        raise ValueError(f"{option} {out}: inside the aiter tree under test ({tree}); write results elsewhere")


def _child_limit(deadline: Deadline | None, default_s: float, what: str) -> float:
    """A child's time limit: what the run's one deadline (``--timeout``, all children together)
    has left; ``default_s`` when no ``--timeout`` was given."""
    return deadline.remaining(what) if deadline is not None else default_s


def _limit_text(deadline: Deadline | None, timeout_s: float) -> str:
    if deadline is not None:
        return f" (--timeout {deadline.total_s:g} s, for the whole run)"
    return f" (limit {timeout_s:g} s)"


#: The record of the (a)-(d) child: where the tree came from; its call log travels as outputs.
CHILD_SCHEMA = harness.RecordSchema("aiter-check-calls", 1, {"source": str, "version": (str, type(None)),
                                                              "writes_confined": bool, "unconfined": (str, type(None))})


def run_in_child(src_kind: str, path: str, *, timeout_s: float, differential: bool, allow_kwargs: bool,
                 deadline: harness.Deadline | None = None) -> dict:
    """Groups (a)-(d), judged apart: the child executes aiter's files and records every call the
    checks make into them (``fp4moe.infra.callrecord``); this process, which never executes aiter
    code, runs the same checks again on the recorded results and makes every row. Returns
    ``{"source", "version", "results", "writes_confined"}``; GateCannotRun names the aiter file
    that ended or hung the child, or the call where the log does not fit the checks."""
    from fp4moe.infra.callrecord import Replay

    args = [*_source_args(src_kind, path)] + ([] if differential else ["--no-differential"])
    label = f"aiter-check ({'--aiter-src' if src_kind == 'dir' else '--aiter-wheel'} {path})"
    src = AiterSource.from_dir(path) if src_kind == "dir" else AiterSource.from_wheel(path)
    with harness.run_judged(CHILD_MODULE, args, label=label, timeout_s=timeout_s, schema=CHILD_SCHEMA,
                            env={PROGRESS_ENV: ""}, deadline=deadline, keep_files=True) as out:
        rp = Replay(out.json("calls"), out.tensors("call-tensors"))
        results = rp.run(label, run_checks, src, differential=differential, allow_kwargs=allow_kwargs,
                         access=ReplayAccess(rp))
        rec = out.record
    return {"source": rec["source"], "version": rec["version"], "results": [asdict(r) for r in results],
            "writes_confined": rec["writes_confined"] and rec["unconfined"] is None}


def child_main(argv: list[str]) -> int:
    """``python -m fp4moe.gates.aiter_check_child``: the child side. Executes aiter's files under a
    recorder and returns the call log (outputs ``calls`` and ``call-tensors``); its own rows are
    never read. Never exits with a verdict of its own."""
    from fp4moe.infra.callrecord import Recorder

    p = argparse.ArgumentParser(prog="fp4moe.gates.aiter_check (child)")
    p.add_argument("--aiter-src")
    p.add_argument("--aiter-wheel")
    p.add_argument("--no-differential", action="store_true")
    a = p.parse_args(argv)
    trees = [a.aiter_src] if a.aiter_src else []
    with harness.child_session(CHILD_SCHEMA, trees=trees, speaker="aiter") as s:  # before any aiter code runs
        os.environ[PROGRESS_ENV] = os.environ.get(harness.STAGE_ENV, "")
        s.stage("resolving the aiter sources")
        src = resolve_source(a.aiter_src, a.aiter_wheel)
        rec = Recorder()
        run_checks(src, differential=not a.no_differential, allow_kwargs=True, access=RecordingAccess(src, rec))
        log, tensors = rec.outputs()
        s.stage("writing the call log")
        s.put_json("calls", log)
        s.put_tensors("call-tensors", tensors)
        s.finish({"source": src.origin, "version": src.version(), "writes_confined": s.unconfined is None,
                  "unconfined": s.unconfined})
    return 0


@dataclass
class AiterCheckResult:
    """Every check's row, where the aiter came from, and the exit code of :func:`verdict`."""

    source: str
    version: str | None
    results: list[CheckResult]
    exit_code: int
    notes: list[str] = field(default_factory=list)  # the kernel group's provenance: tree, arch, triton, stubs
    writes_confined: bool = False  # aiter's writes limited to the child's scratch folder (Landlock)
    dispatch_table: list = field(default_factory=list)  # the dispatch group's per-row facts

    def to_dict(self) -> dict:
        return {"source": self.source, "version": self.version, "writes_confined": self.writes_confined,
                "results": [asdict(r) for r in self.results], "notes": self.notes, "dispatch_table": self.dispatch_table}


def check_aiter(aiter_src_dir: str | None, aiter_wheel: str | None, *, timeout_s: float | None = None,
                differential: bool = True, allow_kwargs: bool = False, strict: bool = False,
                allow_missing: bool = False, outputs: dict | None = None, kernels: bool = True, arch: str = "gfx950",
                known_defects_file: str | None = None, base_src: str | None = None, device: str = "cpu",
                shapes: str = "tiny", dispatch: bool = True, dispatch_scope: str = "default") -> AiterCheckResult:
    """Resolve the aiter sources here (the options' errors name them), run every check in a
    child with a time limit, and judge. The command line is ``fp4moe.commands.aiter_check``."""
    childproc.check_timeout("--timeout", timeout_s)
    base = AiterSource.from_dir(base_src, "--base-src") if base_src else None  # before any work: names --base-src
    src = resolve_source(aiter_src_dir, aiter_wheel)
    kind, path = src.location
    for option, out in (outputs or {}).items():  # results never land in (or on) the code under test
        if kind == "dir":
            _refuse_output_inside(option, out, path)
        elif out and Path(out).resolve() == Path(path).resolve():
            raise ValueError(f"{option} {out}: that is the aiter wheel under test")
    if base is not None and not kernels and not dispatch:
        raise ValueError("--base-src compares the kernel and dispatch checks of two trees: not with --no-kernels --no-dispatch")
    registry = known_defects.load_registry(known_defects_file) if known_defects_file else None
    if kernels and kind == "dir" and (Path(path) / KERNEL_MOE_DIR).is_dir():
        ok, line = kernels_pkg.triton_status_light(device)
        if not ok:
            raise GateCannotRun(f"kernel checks: {line}; or pass --no-kernels")
    if dispatch and kind == "dir":
        from fp4moe.targets.aiter.dispatch.group import preflight

        preflight(path)  # a csrc/ missing a file fused_moe imports: exit 2 naming it, before any child runs
    # --timeout: ONE deadline for every child (the (a)-(d) child, the kernel child, the --base-src
    # side, the dispatch children); without it each child has its own default limit
    deadline = Deadline(timeout_s, "--timeout") if timeout_s is not None else None
    rec = run_in_child(kind, path, timeout_s=DEFAULT_TIMEOUT_S, differential=differential, allow_kwargs=allow_kwargs,
                       deadline=deadline)
    results = [CheckResult(**r) for r in rec["results"]]
    notes: list[str] = []
    if not kernels:
        notes.append("kernel checks: not run (--no-kernels)")
    else:
        results += run_kernel_group(kind, path, arch=arch, timeout_s=timeout_s, registry=registry, base=base, notes=notes,
                                    device=device, shapes=shapes, deadline=deadline)
    table = run_dispatch_group(kind, path, dispatch, registry, base_src, dispatch_scope, results, notes, deadline)
    return AiterCheckResult(rec["source"], rec.get("version"), results, verdict(results, strict, allow_missing), notes,
                            writes_confined=rec.get("writes_confined") is True, dispatch_table=table)


def run_dispatch_group(kind, path, dispatch, registry, base_src, scope, results, notes, deadline) -> list:
    """(f) aiter's fused_moe dispatch executed (fp4moe.targets.aiter.dispatch): rows appended to
    ``results``; returns the per-row table for --json."""
    from fp4moe.targets.aiter.dispatch import group, table

    if not dispatch:
        notes.append("dispatch checks: not run (--no-dispatch)")
        return []
    if kind != "dir" or not group.applies(path):
        notes.append("dispatch checks: not run (the source has no aiter/fused_moe.py tree; --aiter-src a checkout)")
        return []
    rows, dnotes, facts = group.run_group(path, timeout_s=DEFAULT_TIMEOUT_S, registry=registry,
                                          accepted=registry is not None, base=base_src, scope=table.Scope(scope),
                                          deadline=deadline)
    results += [CheckResult(**r) for r in rows]
    notes += dnotes
    return facts


# ---------------------------------------------------------------------- (e) kernels
KERNEL_MOE_DIR = "aiter/ops/triton/moe"
#: the child entry of groups (a)-(d), started by module name (never imported by a parent)
CHILD_MODULE = "fp4moe.gates.aiter_check_child"
KERNEL_CHILD = "fp4moe.targets.aiter.child.kernel_checks"
DEFAULT_KERNEL_TIMEOUT_S = 600.0  # one tree's kernel checks; ~2 min on a loaded 2-core CPU


KERNEL_DEVICES = ("cpu", "cuda")
KERNEL_SHAPES = ("tiny", "dsv4")


def kernel_child_env(device: str, environ=None) -> dict:
    """The child's environment: ``TRITON_INTERPRET=1`` (and so the interpreter shims) on the
    CPU only; on a GPU it is removed, the kernels are compiled and no shim is installed."""
    env = dict(os.environ if environ is None else environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


#: components of the kernel child, in the order their jobs run (what a crash is charged to)
KERNEL_COMPONENTS = ("shims", "a16w4", "a8w4", "quant", "reduce", "routing")


def _crashed_component(line: str) -> str | None:
    """The component the kernel child named as its stage when it died (``component=NAME; ...``)."""
    import re

    m = re.search(r"component=([a-z0-9]+);", line)
    return m.group(1) if m and m.group(1) in KERNEL_COMPONENTS else None


def kernel_plan_args(argv: list[str]):
    """The kernel child's arguments as its plan reads them (parsed here with the same options,
    never by importing the child's entry module)."""
    p = argparse.ArgumentParser(add_help=False)
    for opt in ("--aiter-src", "--arch", "--skip"):
        p.add_argument(opt)
    p.add_argument("--device", default="cpu")
    p.add_argument("--shapes", default="tiny")
    p.add_argument("--routing-cases")
    p.add_argument("--only", default="")
    p.add_argument("--quick", action="store_true")
    return p.parse_args(argv)


#: the kernel child's jobs in two children run side by side (the interpreter is one core each):
#: the GEMMs, quants and reduce; and routing (which skips the shim self-test, not the shims)
KERNEL_CHILD_GROUPS = (("gemm,pad,tails,quant,reduce", ()), ("routing", ("--skip", "shims")))


def run_kernel_child(tree: str, *, arch: str, timeout_s: float, device: str = "cpu", shapes: str = "tiny",
                     extra_args: tuple = (), deadline: Deadline | None = None, label: str | None = None) -> dict:
    """The kernel checks of one tree (``tree``: the directory holding ``aiter/``): aiter's kernels
    run in harness children (on the CPU under ``TRITON_INTERPRET=1``, writes confined) that only
    compute -- two side by side (:data:`KERNEL_CHILD_GROUPS`) unless ``extra_args`` names
    ``--only`` -- and this process judges (``kernels.checks.judge_all``). Returns the first
    child's record with ``rows`` (dicts), ``saved`` (clean outputs per row label) and
    ``judge_seconds`` added.

    A child killed while running one component (a segfault on an out-of-range index, an
    ``os._exit`` in a kernel file) costs that component a FAIL row naming it; the child is run
    again without it, so the others are still judged. GateCannotRun (one line) otherwise."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from fp4moe.infra import harness
    from fp4moe.targets.aiter.kernels import checks

    # the run's one deadline (--timeout, every child together), else this tree's own limit
    deadline = deadline if deadline is not None else harness.Deadline(timeout_s)
    label = label or f"kernel checks ({tree}/aiter)"
    groups = [tuple(extra_args)] if "--only" in extra_args else \
        [tuple(extra_args) + ("--only", only, *more) for only, more in KERNEL_CHILD_GROUPS]
    with ThreadPoolExecutor(len(groups)) as pool:
        parts = list(pool.map(lambda g: _one_kernel_child(tree, arch, device, shapes, g, deadline, label), groups))
    t0 = time.perf_counter()
    rec = dict(parts[0][0])
    rows, saved, unjudged = [], {}, {}
    for prec, outputs, jobs, crashed in parts:
        r, sv = checks.judge_all(jobs, outputs, prec["jobs"], device=device, compiled=device != "cpu")
        rows += checks.shims_row(prec.get("shims")) + r
        saved.update(sv)
        rows += [checks.Row(f"{comp}: killed the kernel child", checks.FAIL, f"{why}; the other components were "
                            "judged in a fresh child without it") for comp, why in crashed.items()]
        unjudged.update(prec.get("unjudged") or {})
    rows += checks.not_judged_rows(unjudged)
    rec["unjudged"], rec["seconds"] = unjudged, max(p[0]["seconds"] for p in parts)
    rec["rows"], rec["saved"], rec["judge_seconds"] = checks.rows_to_dicts(rows), saved, round(time.perf_counter() - t0, 1)
    return rec


def _one_kernel_child(tree: str, arch: str, device: str, shapes: str, extra_args: tuple, deadline, label: str):
    """(record, outputs by job index, the plan, crashed components) of one kernel child, re-run
    without a component whose call killed it."""
    from fp4moe.infra import harness
    from fp4moe.targets.aiter.kernels import cases

    base_args = ["--aiter-src", str(Path(tree).resolve() / "aiter"), "--arch", arch, "--device", device,
                 "--shapes", shapes, *extra_args]
    env = {"TRITON_INTERPRET": "1" if device == "cpu" else "0"}  # a GPU run compiles the kernels
    crashed: dict[str, str] = {}
    while True:
        skip = ",".join([*crashed, *([base_args[base_args.index("--skip") + 1]] if "--skip" in base_args else [])])
        args = [a for i, a in enumerate(base_args) if a != "--skip" and (i == 0 or base_args[i - 1] != "--skip")]
        args += ["--skip", skip] if skip else []
        try:
            out = harness.run_judged(KERNEL_CHILD, args, label=label, timeout_s=deadline.remaining(label),
                                     schema=cases.record_schema(), env=env, confine=(device == "cpu"),
                                     # no PID namespace on a GPU: the CUDA driver failed in one (with the
                                     # host's /proc: cudaGetDeviceCount error 304 on the H200); see
                                     # scripts/gpu_sandbox_probe.py's pid+proc row before changing it
                                     deadline=deadline, namespace=(device == "cpu"))
            break
        except GateCannotRun as e:
            comp = _crashed_component(str(e))
            if comp is None or comp in crashed or "timed out" in str(e) or "deadline" in str(e):
                raise
            crashed[comp] = " ".join(str(e).split())[:300]
    jobs = cases.plan_from_args(kernel_plan_args(base_args))
    names = set(out.names())
    outputs = {i: out.tensors(cases.output_name(i)) for i in range(len(jobs)) if cases.output_name(i) in names}
    return dict(out.record), outputs, jobs, crashed


def _kernel_rows(rows: list[dict]) -> list[CheckResult]:
    return [CheckResult(f"kernel: {r['check']}", r["result"], r["detail"] + (f" [{r['seconds']:.1f} s]" if r.get("seconds") else ""))
            for r in rows]


def apply_registry(rows: list[dict], registry, accepted: bool, tree_date: str | None = None) -> list[CheckResult]:
    """Kernel rows -> results, with the registry's defects marked (``known`` when accepted and the
    row fails as the entry's signature says; named in the FAIL otherwise; a row that fails
    differently stays FAIL naming both) and one row per entry: reproduces / known / stale /
    fails differently / not judged."""
    out = _kernel_rows(rows)
    registry = [d for d in registry or [] if not known_defects.for_dispatch(d)]  # the dispatch group judges those
    if not registry:
        return out
    by_name = {r.check: r for r in out}
    statuses = known_defects.match(rows, registry, accepted, tree_date)
    for st in statuses:
        d = st.defect
        for name in st.failing:
            r = by_name[f"kernel: {name}"]
            if accepted:
                r.result = KNOWN
                r.detail += f" [known defect {d.id}]"
            else:
                r.detail += f" [= known defect {d.id}; --known-defects (the packaged registry) accepts it]"
        for name, why in st.differing.items():
            by_name[f"kernel: {name}"].detail += f" [NEW: {why}]"
        out.append(CheckResult(f"known defect: {d.id}", *_registry_verdict(st, accepted)))
    return out


def _registry_verdict(st, accepted: bool) -> tuple[str, str]:
    d = st.defect
    where = ", ".join(d.aiter_lines)
    if st.state in (known_defects.KNOWN, known_defects.REPRODUCED):
        extra = f"; {len(st.differing)} more matched row(s) fail differently (FAIL, new)" if st.differing else ""
        return (KNOWN if accepted else FAIL), (f"reproduces ({len(st.failing)} check(s)): {d.summary} [{where}; first "
                                               f"seen {d.first_seen}]{extra}")
    if st.state == known_defects.DIFFERS:
        first = next(iter(st.differing.values()))
        return FAIL, f"its checks fail, but not as registered ({len(st.differing)} row(s)): {first}"
    if st.state == known_defects.STALE:
        return FAIL, f"stale: no longer reproduces (its checks ran and passed); remove it from the registry [{where}]"
    return INFO, "not judged: none of its checks ran"


def compare_trees(head: dict, base: dict, head_rows: list[dict] | None = None, base_rows: list[dict] | None = None,
                  head_unjudged: dict | None = None, base_unjudged: dict | None = None) -> list[CheckResult]:
    """Per saved output: bitwise / within the kernel budget / DIFFER; routing on its own.

    The GEMM outputs were computed on the gate's own routing in both trees (the same ids and
    weights), so a routing change cannot move them; routing is compared apart, and where the two
    trees route differently the row says which tree matches the tie-proof top-k (``fixed``: the
    head does and the base does not -- the upgrade fixes it; ``DIFFER`` otherwise). An output only
    one tree produced is ``not judged`` when the other tree's component could not be judged, and
    ``info`` (not compared) when the other tree has no such case (e.g. no CDNA4_SCALE layout)."""
    from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2

    hres = {r["check"]: r["result"] for r in head_rows or []}
    bres = {r["check"]: r["result"] for r in base_rows or []}
    out = []
    for key in sorted(set(head) | set(base)):
        name = f"upgrade: {key}"
        if key not in head or key not in base:
            side, other = ("head", "base") if key in head else ("base", "head")
            unj = (base_unjudged if key in head else head_unjudged) or {}
            comp = next((c for c in unj if key.startswith(c)), None)
            if comp:
                out.append(CheckResult(name, NOT_JUDGED, f"only the {side} tree ran it: the {other} tree's {comp} was not judged ({unj[comp]})"))
            else:  # e.g. CDNA4_SCALE where the base has no utils/shuffle.py: each tree's own rows judge it
                out.append(CheckResult(name, INFO, f"not compared: only the {side} tree's run has it (the {other} tree "
                                       "cannot take this case; see its info rows)"))
            continue
        a, b = head[key], base[key]
        if a.shape != b.shape:
            out.append(CheckResult(name, DIFFER, f"shape {tuple(a.shape)} (head) != {tuple(b.shape)} (base)"))
        elif torch.equal(a, b) or (a.dtype.is_floating_point and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())):
            out.append(CheckResult(name, BITWISE, f"{a.numel()} values bitwise equal"))
        elif key.startswith("routing"):
            ids_a, ids_b = a[0], b[0]
            bad = (ids_a.sort(-1).values != ids_b.sort(-1).values).any(-1)
            if bool(bad.any()):
                det = f"{int(bad.sum())}/{bad.numel()} tokens routed to different experts (first: token {int(bad.nonzero()[0])})"
                h, bs = hres.get(key), bres.get(key)
                if h == PASS and bs == FAIL:
                    out.append(CheckResult(name, FIXED, f"DIFFER: {det}; head matches the tie-proof top-k, base does not: the upgrade fixes it"))
                else:
                    out.append(CheckResult(name, DIFFER, f"{det}; vs the tie-proof top-k: head {h or '?'}, base {bs or '?'}"))
            else:
                err = float((a[1] - b[1]).abs().max())
                out.append(CheckResult(name, WITHIN if err <= 1e-6 else DIFFER, f"same expert sets, max weight difference {err:.1e} (bound 1e-06)"))
        else:
            nan_a, nan_b = int(a.float().isnan().sum()), int(b.float().isnan().sum())
            if nan_a or nan_b:
                out.append(CheckResult(name, DIFFER, f"NaN: {nan_a} (head) vs {nan_b} (base) of {a.numel()}"))
                continue
            r, c = rel_l2(a, b), cosine_distance(a, b)
            ok = r <= KERNEL_REL_L2 and c <= KERNEL_COS_DIST
            out.append(CheckResult(name, WITHIN if ok else DIFFER, f"rel L2 {r:.2e}, cos dist {c:.1e} (kernel budget {KERNEL_REL_L2:g} / {KERNEL_COS_DIST:g})"))
    return out


def run_kernel_group(kind: str, path: str, *, arch: str, timeout_s: float | None, registry, base,
                     notes: list[str], device: str = "cpu", shapes: str = "tiny",
                     deadline: Deadline | None = None) -> list[CheckResult]:
    if kind != "dir":
        return [CheckResult("kernel: aiter Triton MoE", NA, "a wheel source: the kernel adapter loads a source tree (--aiter-src); "
                            "the PyPI wheel's flat layout (aiter/ops/triton/moe_op_gemm_a8w4.py, no a16w4) is not supported")]
    if not (Path(path) / KERNEL_MOE_DIR).is_dir():
        return [CheckResult("kernel: aiter Triton MoE", NA, f"this tree has no {KERNEL_MOE_DIR}/ (aiter's Triton MoE kernels)")]
    timeout = timeout_s or DEFAULT_KERNEL_TIMEOUT_S
    from fp4moe.targets.aiter.kernels.loader import tree_date

    # the date rule reads the tree before any of its code runs (nothing a child wrote)
    date = tree_date(Path(path).resolve() / "aiter")
    rec = run_kernel_child(path, arch=arch, timeout_s=timeout, device=device, shapes=shapes, deadline=deadline)
    where = (" (interpreter, TRITON_INTERPRET=1, shims on)" if rec['interpreter'] else
             f" (compiled on {rec.get('device')}: {rec.get('gpu')}; shims {'ON' if rec.get('shims_active') else 'off'})")
    notes.append(f"kernel checks: {rec['tree']}, --arch {rec['arch']}, triton {rec['triton']}{where}, shapes "
                 f"{rec.get('shapes', 'tiny')}, child {rec['seconds']:.0f} s, judge {rec['judge_seconds']:.0f} s "
                 "(the judge runs in the gate's process, apart from aiter's code); stubs and patches:")
    notes += [f"  {i}. {n}: {w} -- {y}" for i, (n, w, y) in enumerate(rec["patches"], 1)]
    if date.get("date"):
        notes.append(f"  tree date: {date['date']} ({date['how']})")
    reg = registry if registry is not None else _project_registry_quiet()
    out = apply_registry(rec["rows"], reg, accepted=registry is not None, tree_date=date.get("date"))
    if registry is None and reg:
        out = [r for r in out if not r.check.startswith("known defect: ")] + \
              [r for r in out if r.check.startswith("known defect: ") and r.result == FAIL and "reproduces" in r.detail]
    if base is not None:
        bkind, bpath = base.location
        brec = run_kernel_child(bpath, arch=arch, timeout_s=timeout, device=device, shapes=shapes, deadline=deadline,
                                label=f"--base-src {bpath}: kernel checks ({bpath}/aiter)")
        notes.append(f"base tree: {brec['tree']}, {brec['seconds']:.0f} s")
        hv = {r["check"]: r["result"] for r in rec["rows"]}
        for r in brec["rows"]:
            if r["check"] in hv and hv[r["check"]] != r["result"] and INFO not in (r["result"], hv[r["check"]]):
                notes.append(f"  verdict changed: {r['check']}: base {r['result']} -> head {hv[r['check']]}")
        for comp, why in (brec.get("unjudged") or {}).items():
            out.append(CheckResult(f"base: {comp}: not judged", NOT_JUDGED, why))
        out += [CheckResult(f"base: kernel: {r['check']}", r["result"], r["detail"]) for r in brec["rows"]
                if r["check"].startswith("routing") or r["check"].startswith("reduce")]
        out += compare_trees(rec["saved"], brec["saved"], _keyed(rec["rows"]), _keyed(brec["rows"]),
                             rec.get("unjudged"), brec.get("unjudged"))
    return out


def _keyed(rows: list[dict]) -> list[dict]:
    """Routing rows under their saved key (the row label before ': vs the reference top-k')."""
    return [dict(r, check=r["check"].rsplit(": vs the reference top-k", 1)[0]) for r in rows]


def _project_registry_quiet():
    """The project's registry, used without --known-defects only to NAME reproduced defects."""
    try:
        return known_defects.load_registry(known_defects.PROJECT_REGISTRY)
    except (OSError, ValueError):
        return None
