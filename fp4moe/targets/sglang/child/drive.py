"""Child process: drive an SGLang release's own FP4 MoE code for one or more catalogue rows.

``python -m fp4moe.targets.sglang.child.drive REQUEST.json`` -- run only by ``fp4moe.targets.sglang.target``
through ``fp4moe.infra.childproc.run_child``. It imports SGLang with stubs (``fp4moe.targets.sglang.child.stubs``),
sets the patch points of ``fp4moe.targets.sglang.child.patches``, and for each row runs SGLang's code:

``Fp8Config(is_fp4_experts=True)`` -> ``Fp8MoEMethod.create_weights`` (int8 packed weights,
e8m0 scales as SGLang makes them) -> rank 0's checkpoint shard copied in ->
``process_weights_after_loading`` -> ``maybe_get_hip_aiter_quant_info`` ->
``AiterRunnerCore.run`` -> ``aiter.fused_moe`` (the spy: records, then runs ``fp4moe.reference.moe``).

Two modes (``request["mode"]``: ``auto``, ``cpu`` or ``gfx950``; ``auto`` picks gfx950 when
this process sees a ROCm torch on a gfx950 GPU and ``import aiter`` works, else cpu):

- ``cpu``: aiter is a stub, the branch selectors are patched (``fp4moe.targets.sglang.child.patches``), the
  shuffles are ``fp4moe.reference.layout``'s or ``--aiter-src``'s, ``fused_moe`` is the spy, which
  records and runs ``fp4moe.reference.moe``.
- ``gfx950``: no aiter stub and no flag patch. SGLang computes its own selectors at import on
  the real hardware (the drive refuses, exit 2, when they do not select the FP4 aiter branch),
  aiter's real shuffles run on the GPU and the real ``aiter.fused_moe`` computes the output.
  Both are wrapped transparently (same arguments in, same result out; ``functools.wraps`` keeps
  the signature SGLang inspects) only to record the calls, so the pad contract and field checks
  still run. Only modules that are not installed at all may be stubbed (never aiter, triton or
  torch), and the TP size still comes from ``patches.tp_functions`` / ``parallel_override``
  (no process group exists in the child). Never executed: no gfx950 machine was available.

It judges nothing: it writes the processed tensors and the spy's output to ``OUT_DIR/row*.pt``
and one JSON record (``childproc.record_writer``, taken before SGLang is imported) with what it saw; ``fp4moe.gates.sglang_check``
judges in the parent. It also builds the same layer at full DeepSeek-V4 size on the ``meta``
device (shapes only, no memory) so the parent can price SGLang's real footprint.

Until that final record, the same writer leaves *provisional* records (``"provisional": true``,
never a verdict): before and after each SGLang module's import-time code (:class:`ImportTrail`)
and before each row. SGLang code that ends the process (``os._exit``, ``sys.exit``, a hang
killed at the time limit) is then named by the module it was importing, not by its last line
of output (``fp4moe.targets.sglang.target.why_no_verdict``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path

from fp4moe.targets.sglang import modes

T0 = time.perf_counter()

# --------------------------------------------------------------------------- aiter stub
SPY_CALLS: list[dict] = []
SHUFFLE_CALLS: list[dict] = []
SPY_MODE = {"compute": True}
#: cpu mode with ``--aiter-src``: the parameter names of that tree's ``aiter.fused_moe`` (its
#: syntax tree); the spy refuses other keywords as the real function would (TypeError)
FUSED_MOE_PARAMS: dict = {"names": None, "origin": None}


class ActivationType(enum.Enum):  # aiter/ops/enum.py (a C++ enum there; the names matter)
    No = 0
    Silu = 1
    Gelu = 2
    Swiglu = 3
    Situv2 = 4


class QuantType(enum.Enum):
    No = 0
    per_Tensor = 1
    per_Token = 2
    per_1x32 = 3
    per_1x128 = 4
    per_128x128 = 5


class GateMode(str, enum.Enum):  # aiter/ops/flydsl/moe_common.py
    SEPARATED = "separated"
    MOCK_GATE_ONLY = "mock_gate_only"
    GATE_ONLY = "gate_only"
    INTERLEAVE = "interleave"


AITER_DEFAULT_GATE_MODE = GateMode.SEPARATED.value  # aiter.fused_moe's default


def _describe(v):
    import torch

    if isinstance(v, torch.Tensor):
        return {"tensor": True, "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
    if isinstance(v, enum.Enum):
        return {"enum": type(v).__name__, "name": v.name}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def weight_attrs(w) -> dict:
    """The Python attributes aiter may read from a weight tensor it receives: everything set on
    it (its ``__dict__``), plus each name of the aiter target's table (absent ones as "<absent>")."""
    from fp4moe.targets.aiter.tensor_attrs import KNOWN

    names = set(getattr(w, "__dict__", {}) or {}) | {n for _, n in KNOWN}
    return {n: _describe(getattr(w, n)) if hasattr(w, n) else "<absent>" for n in sorted(names)}


def _record_call(hidden_states, w1, w2, topk_weight, topk_ids, args, kwargs) -> dict:
    if args:
        raise TypeError(f"fused_moe spy: {len(args)} positional arguments after topk_ids; SGLang passes keywords")
    call = {"kwargs": {k: _describe(v) for k, v in kwargs.items()}, "objects": dict(kwargs, w1=w1, w2=w2,
            hidden_states=hidden_states, topk_weight=topk_weight, topk_ids=topk_ids),
            "act_mode": modes.effective_act_mode(kwargs, int(hidden_states.shape[0])),
            "w_attrs": {"w1": weight_attrs(w1), "w2": weight_attrs(w2)},
            "inputs": {"hidden_states": _describe(hidden_states), "topk_weight": _describe(topk_weight),
                       "topk_ids": _describe(topk_ids)}}
    SPY_CALLS.append(call)
    return call


def spy_fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, *args, **kwargs):
    """``aiter.fused_moe`` on this machine: record every argument, then the reference MoE."""
    import torch

    call = _record_call(hidden_states, w1, w2, topk_weight, topk_ids, args, kwargs)
    if not SPY_MODE["compute"]:
        return torch.zeros_like(hidden_states)
    names = FUSED_MOE_PARAMS["names"]
    if names is not None and not any(n.startswith("**") for n in names):
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"aiter.fused_moe() got unexpected keyword argument(s) {unknown} "
                            f"(its signature in {FUSED_MOE_PARAMS['origin']})")
    from fp4moe.reference.reference_backend import ReferenceBackend

    act = kwargs.get("activation", ActivationType.Silu)
    qt = kwargs.get("quant_type", QuantType.No)
    act_mode = call["act_mode"]
    unsupported = sorted(k for k in ("no_combine", "output", "stage2_scatter", "num_local_tokens", "beta", "linear_beta")
                         if kwargs.get(k) not in (None, False))
    if unsupported:
        raise NotImplementedError(f"fused_moe spy: the reference does not model {unsupported}")
    limit = kwargs.get("swiglu_limit")
    return ReferenceBackend().fused_moe(
        hidden_states, w1, w2, topk_weight, topk_ids,
        expert_mask=kwargs.get("expert_mask"),
        activation=act.name.lower() if isinstance(act, enum.Enum) else str(act),
        quant_type=qt.name if isinstance(qt, enum.Enum) else str(qt),
        doweight_stage1=bool(kwargs.get("doweight_stage1", False)),
        w1_scale=kwargs.get("w1_scale"), w2_scale=kwargs.get("w2_scale"),
        a1_scale=kwargs.get("a1_scale"), a2_scale=kwargs.get("a2_scale"),
        hidden_pad=int(kwargs.get("hidden_pad", 0)), intermediate_pad=int(kwargs.get("intermediate_pad", 0)),
        bias1=kwargs.get("bias1"), bias2=kwargs.get("bias2"),
        swiglu_limit=limit if limit else None,
        gate_mode=str(getattr(kwargs.get("gate_mode", AITER_DEFAULT_GATE_MODE), "value", kwargs.get("gate_mode", AITER_DEFAULT_GATE_MODE))),
        act_mode=act_mode,
    )


def _recording(name: str, fn, meta_fallback=None):
    """``fn`` recorded. ``meta_fallback`` (gfx950 mode): if the real shuffle cannot run on the
    ``meta`` device (the shapes-only full-size footprint build), the same-named
    ``fp4moe.reference.layout`` shuffle gives the shape instead; recorded as such."""
    def wrapper(*args, **kwargs):
        import torch

        meta = any(isinstance(a, torch.Tensor) and a.is_meta for a in args)
        call = {"name": name, "args": [_describe(a) for a in args],
                "kwargs": {k: _describe(v) for k, v in kwargs.items()}, "meta": meta}
        SHUFFLE_CALLS.append(call)
        if meta and meta_fallback is not None:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # shapes only: the real bytes are judged from the GPU run
                call["meta_fallback"] = f"{type(e).__name__}: {e}"[:200]
                return meta_fallback(*args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__name__ = name
    wrapper.__wrapped__ = fn
    return wrapper


def shuffle_provider(aiter_src: str | None) -> tuple[dict, str]:
    """name -> callable for aiter's shuffles: ``fp4moe.reference.layout`` or ``aiter_src``'s shuffle.py."""
    if aiter_src:
        from fp4moe.targets.aiter.source import AiterSource, load_shuffle_module

        src = AiterSource.from_dir(aiter_src)
        mod = load_shuffle_module(src)
        if mod is None:
            raise FileNotFoundError(f"--aiter-src {aiter_src}: no aiter/ops/shuffle.py")
        funcs = {k: v for k, v in vars(mod).items() if callable(v) and not k.startswith("_")}
        return funcs, f"aiter shuffle.py from {src.origin}"
    from fp4moe.reference import layout

    def shuffle_weight_a16w4(src, NLane, gate_up):  # aiter: shuffle_weight(..., is_guinterleave=True)
        return layout.shuffle_weight(src, (NLane, 16), is_guinterleave=True, gate_up=gate_up)

    def shuffle_scale_a16w4(src, experts_cnt, gate_up):  # aiter: shuffle_scale(..., is_guinterleave=True)
        return layout.shuffle_scale(src, experts_cnt, True, gate_up)

    return {"shuffle_weight": layout.shuffle_weight, "shuffle_scale": layout.shuffle_scale,
            "shuffle_weight_a16w4": shuffle_weight_a16w4, "shuffle_scale_a16w4": shuffle_scale_a16w4}, "fp4moe.reference.layout"


def _missing(name):
    def f(*a, **k):
        raise NotImplementedError(f"aiter.ops.shuffle.{name}: not provided by this shuffle source")

    return f


def aiter_fillers(shuffles: dict) -> dict:
    import torch

    def aiter_root(m):
        m.ActivationType, m.QuantType = ActivationType, QuantType
        m.dtypes = types.SimpleNamespace(fp4x2=torch.float4_e2m1fn_x2, fp8=torch.float8_e4m3fn,
                                         fp8_e8m0=torch.float8_e8m0fnu, bf16=torch.bfloat16, fp16=torch.float16,
                                         fp32=torch.float32, i32=torch.int32, u8=torch.uint8, i8=torch.int8)
        m.fused_moe = spy_fused_moe

    def fused_moe_mod(m):
        m.fused_moe = spy_fused_moe
        m.ActivationType, m.QuantType = ActivationType, QuantType

    def moe_common(m):
        m.GateMode = GateMode

    def shuffle_mod(m):
        for k, v in shuffles.items():
            setattr(m, k, v)

    return {"aiter": aiter_root, "aiter.fused_moe": fused_moe_mod, "aiter.ops.flydsl.moe_common": moe_common,
            "aiter.ops.shuffle": shuffle_mod}


# --------------------------------------------------------------------------- import trail
#: ``record["importing"]`` in a provisional record: the SGLang modules whose code is executing
#: (outermost first), paths relative to the SGLang root.
IMPORTING_KEY = "importing"


class ImportTrail:
    """Which of SGLang's modules is executing its import-time code, told to ``report(stack,
    raised)`` before and after each one runs (the stack of files begun and not finished,
    outermost first; ``raised``: the module stack an exception, ``SystemExit`` included, is
    unwinding from). The drive writes each change as a *provisional* authenticated record, so when
    SGLang's code ends the process in an import (``os._exit``, a signal), the parent names the
    module that did it instead of the last line it printed. A meta path finder first in
    ``sys.meta_path`` finds ``sglang.*`` modules with the finders after it and wraps their
    loaders; nothing else of the import changes (the wrapped loader delegates every other
    attribute)."""

    def __init__(self, root: str, report, prefix: str = "sglang."):
        self.roots = {os.path.abspath(root), os.path.realpath(root)}  # a tree of symlinks: its own paths
        self.report, self.prefix = report, prefix
        self.stack: list[str] = []
        self.raised: dict | None = None  # the innermost module an exception left (SystemExit too)

    def rel(self, origin: str) -> str:
        here = os.path.abspath(origin)
        for root in sorted(self.roots, key=len, reverse=True):
            if here.startswith(root + os.sep):
                return os.path.relpath(here, root)
        return origin

    def tell(self) -> None:
        self.report(list(self.stack), self.raised)

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.prefix):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.origin and spec.has_location and hasattr(spec.loader, "exec_module"):
            spec.loader = _TrailLoader(spec.loader, self, self.rel(spec.origin))
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _TrailLoader:
    def __init__(self, real, trail: ImportTrail, rel: str):
        self._real, self._trail, self._rel = real, trail, rel

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        t = self._trail
        t.stack.append(self._rel)
        t.tell()
        try:
            self._real.exec_module(module)
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: they end the child
            if t.raised is None:  # the innermost module it came out of
                t.raised = {"module": list(t.stack), "type": type(e).__name__}
            t.stack.pop()
            t.tell()
            raise
        t.stack.pop()
        t.raised = None  # an exception an outer module caught is no longer the story
        t.tell()

    def __getattr__(self, name):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._real, name)


# --------------------------------------------------------------------------- mode
# --------------------------------------------------------------------------- import SGLang
def import_sglang(root: str, shuffles: dict, mode: str = "cpu", trail=None):
    """SGLang's fp8 and aiter-runner modules, imported with the stubs; ``trail``: a
    ``report(stack, raised)`` for :class:`ImportTrail` (None: no trail)."""
    from fp4moe.targets.sglang.child import patches, stubs

    for k, v in patches.ENV.items():
        os.environ.setdefault(k, v)
    import torch

    torch.set_num_threads(1)  # the parent's expectation runs single-threaded (same summation order)
    import torch._dynamo  # noqa: F401  SGLang's import-time torch.compile needs these before a triton stub
    import torch._inductor.compile_fx  # noqa: F401

    if mode == "gfx950":
        stubs.install_stub_finder({}, force=False)  # only what is not installed; aiter is the real one
    else:
        stubs.FORCE_STUB_ROOTS = tuple(stubs.FORCE_STUB_ROOTS) + ("aiter",)
        stubs.install_stub_finder(aiter_fillers(shuffles))
    stubs.bare_sglang_package(root)
    import importlib

    tracker = ImportTrail(root, trail) if trail else None
    if tracker:
        tracker.install()
    try:
        fp8 = importlib.import_module("sglang.srt.layers.quantization.fp8")
        runner = importlib.import_module("sglang.srt.layers.moe.moe_runner.aiter")
    finally:
        if tracker:
            tracker.remove()
    return fp8, runner


def provisional(write_record, record: dict):
    """``report(stack)`` for :func:`import_sglang`: a provisional record (never a verdict: the
    parent refuses it) naming the stage and the SGLang files whose import is under way; the
    final record replaces it."""

    def report(stack=None, raised=None):
        write_record({**record, "provisional": True, **({IMPORTING_KEY: stack} if stack is not None else {}),
                      **({"import_raised": raised} if raised else {})})

    return report


def sglang_version(root: str) -> str:
    for rel in ("sglang/_version.py", "sglang/version.py"):
        p = Path(root) / rel
        if p.is_file():
            for line in p.read_text().splitlines():
                if line.strip().startswith("__version__") and "=" in line and ("'" in line or '"' in line):
                    return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


# --------------------------------------------------------------------------- the layer
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


#: Steps of one row. A failure in a SETUP step is this harness's (exit 2: could not drive);
#: in the others it is SGLang's weight path or runner with this aiter (exit 1).
SETUP_STEPS = ("create_weights", "load", "footprint (meta device)")


class RowFailed(Exception):
    def __init__(self, step, exc):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.step, self.exc = step, exc


def drive_row(fp8, runner_mod, row: dict, req: dict, out_dir: Path) -> dict:
    from fp4moe.targets.sglang.child import patches

    step = {"now": "create_weights"}
    try:
        with patches.parallel_override(fp8, row["tp"]):
            return _drive_row(fp8, runner_mod, row, req, out_dir, step)
    except Exception as e:
        raise RowFailed(step["now"], e) from e


def _drive_row(fp8, runner_mod, row: dict, req: dict, out_dir: Path, step: dict) -> dict:
    import torch

    from fp4moe.model.checkpoint import load_moe_layer

    rec: dict = {"label": row["label"]}
    e, h, ip, tp = row["experts"], row["hidden"], row["intermediate_per_partition"], row["tp"]
    limit = req["swiglu_limit"]
    dev = req.get("device", "cpu")
    with torch.device(dev):  # SGLang's model loader creates the parameters on the target device
        layer, method = make_layer(fp8, runner_mod, e=e, h=h, ip=ip, tp=tp, top_k=row["top_k"], swiglu_limit=limit,
                                   fp8_activations=row.get("fp8_activations", False), tp_rank=row.get("tp_rank"))
    step["now"] = "load"
    if layer.fp4moe_loader is not None:
        fm, fm_cls = layer.fp4moe_loader
        rec["created"] = {p: {"shape": list(getattr(layer, p).shape), "dtype": str(getattr(layer, p).dtype).replace("torch.", "")}
                          for p in PARAMS}
        rec["loader"] = dict(load_with_sglang(layer, fm, fm_cls, row["checkpoint"], e),
                             via=f"{FUSED_MOE_MODULE}.FusedMoE.weight_loader", tp_rank=row["tp_rank"], tp=tp)
    else:
        raw = load_moe_layer(row["checkpoint"], 0)  # the file holds one rank's partition (I_p rows)
        rec["created"] = load_shard(layer, raw)
        rec["loader"] = {"via": "fp4moe.model.checkpoint rank-0 partition copied into create_weights' parameters"}
    n_shuffle = len(SHUFFLE_CALLS)
    step["now"] = "process_weights_after_loading"
    method.process_weights_after_loading(layer)
    rec["shuffle_calls"] = SHUFFLE_CALLS[n_shuffle:]
    rec["layer_pads"] = {k: getattr(layer, k, None) for k in ("intermediate_pad", "hidden_pad")}
    rec["is_shuffled"] = bool(getattr(layer.w13_weight, "is_shuffled", False))
    processed = {p: getattr(layer, p) for p in PARAMS}
    rec["processed"] = {p: _describe(t) for p, t in processed.items()}

    # EP: global ids, a mask over all experts with 1 where this rank holds the expert
    mask = torch.tensor(row.get("expert_mask") or [1] * e, dtype=torch.int32, device=dev)
    layer.dispatcher = Dispatcher(mask)
    step["now"] = "maybe_get_hip_aiter_quant_info"
    info = method.maybe_get_hip_aiter_quant_info(layer)
    if info is None:
        raise RuntimeError("maybe_get_hip_aiter_quant_info returned None: the aiter quant info was not built")
    fields = [f.name for f in dataclasses.fields(info)]
    rec["quant_info"] = {f: _describe(getattr(info, f)) for f in fields}
    rec["quant_info_is_layer"] = {
        "w13_weight": _same(info.w13_weight, layer.w13_weight), "w2_weight": _same(info.w2_weight, layer.w2_weight),
        "w13_scale": _same(info.w13_scale, layer.w13_weight_scale_inv), "w2_scale": _same(info.w2_scale, layer.w2_weight_scale_inv),
        "expert_mask": info.expert_mask is mask,
    }

    tok = {k: v.to(dev) for k, v in torch.load(row["tokens"]).items()}
    core = runner_mod.AiterRunnerCore(layer.moe_runner_config)

    def runner_input(q):
        kw = dict(hidden_states=tok["hidden_states"], topk_ids=tok["topk_ids"], topk_weights=tok["topk_weights"],
                  quant_type=q.quant_type)
        names = {f.name for f in dataclasses.fields(runner_mod.AiterRunnerInput)}
        return runner_mod.AiterRunnerInput(**{k: v for k, v in kw.items() if k in names})

    # the runner's input as SGLang makes it: its registered pre-permute for the standard
    # dispatcher (pre_permute_standard_to_aiter) from a StandardDispatchOutput
    step["now"] = "pre-permute (standard -> aiter)"
    rec["runner_paths"], pre = runner_paths(runner_mod)
    n0 = len(SPY_CALLS)
    if pre is not None:
        topk_out = _topk_output(tok)
        disp = _dispatch_output(tok, topk_out)
        made = pre(disp, info, layer.moe_runner_config, {})
        rec["pre_permute_output"] = {k: _describe(getattr(made, k, None)) for k in ("hidden_states", "topk_ids", "topk_weights")}
        first = made
    else:
        first = runner_input(info)
    step["now"] = "AiterRunnerCore.run"
    with a8w4_route(row, fields, rec):
        out = core.run(first, info, {})
    calls = SPY_CALLS[n0:]
    if len(calls) != 1:
        raise RuntimeError(f"AiterRunnerCore.run called aiter.fused_moe {len(calls)} times (expected 1)")
    objs = calls[0]["objects"]
    rec["fused_moe_kwargs"] = calls[0]["kwargs"]
    rec["act_mode"] = calls[0]["act_mode"]
    rec["w_attrs"] = calls[0]["w_attrs"]
    rec["aiter_inputs"] = calls[0]["inputs"]
    rec["fused_moe_receives_layer"] = {
        "w1": _same(objs["w1"], layer.w13_weight), "w2": _same(objs["w2"], layer.w2_weight),
        "w1_scale": _same(objs.get("w1_scale"), layer.w13_weight_scale_inv),
        "w2_scale": _same(objs.get("w2_scale"), layer.w2_weight_scale_inv),
    }
    step["now"] = "AiterRunnerCore.run (empty batch)"
    rec["empty_batch"] = empty_batch(core, pre, info, layer, tok, runner_input)
    step["now"] = "AiterRunnerCore.run (field probe)"
    rec["field_probe"] = field_probe(core, runner_input, info, fields)
    step["now"] = "AiterRunnerCore.run (field probe, one field at a time)"
    rec["field_probe_each"] = {f: field_probe(core, runner_input, info, fields, only=f)[f]
                               for f in fields if f in PROBE_ONE}
    torch.save({"processed": {p: u8(t).cpu() for p, t in processed.items()}, "output": out.hidden_states.detach().cpu().clone()},
               out_dir / f"{row['label']}.pt")
    step["now"] = "footprint (meta device)"
    rec["footprint"] = full_size_footprint(fp8, runner_mod, row, limit)
    return rec


def a8w4_route(row: dict, fields: list[str], rec: dict):
    """How a row asking for fp8 activations reaches aiter's a8w4 in this release: through
    SGLang's own ``fp8_activations`` -> ``quant_dtype_a`` where ``AiterMoeQuantInfo`` has that
    field (the layer attribute is set in ``make_layer``); in releases without it, the way their
    DeepSeek-V4 launch did it, ``AITER_BF16_FP8_MOE_BOUND=0`` for the call (aiter reads it at
    call time; the spy's ``effective_act_mode`` too)."""
    import contextlib

    if not row.get("fp8_activations"):
        return contextlib.nullcontext()
    if "fp8_activations" in fields:
        rec["a8w4_via"] = "SGLang fp8_activations -> quant_dtype_a"
        return contextlib.nullcontext()
    rec["a8w4_via"] = f"{modes.BOUND_ENV}=0 (this release has no fp8_activations field)"

    @contextlib.contextmanager
    def bound0():
        was = os.environ.get(modes.BOUND_ENV)
        os.environ[modes.BOUND_ENV] = "0"
        try:
            yield
        finally:
            if was is None:
                os.environ.pop(modes.BOUND_ENV, None)
            else:
                os.environ[modes.BOUND_ENV] = was

    return bound0()


def _same(a, b) -> bool:
    """Same bytes in the same storage (a dtype view of the layer's tensor counts as the same)."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return a.data_ptr() == b.data_ptr() and a.nbytes == b.nbytes


#: AiterMoeQuantInfo field -> the aiter.fused_moe keyword it must reach (SGLang's contract).
FIELD_TO_KWARG = {
    "w13_weight": "w1", "w2_weight": "w2", "w13_scale": "w1_scale", "w2_scale": "w2_scale",
    "a13_scale": "a1_scale", "a2_scale": "a2_scale", "b13": "bias1", "b2": "bias2",
    "expert_mask": "expert_mask", "doweight_stage1": "doweight_stage1", "hidden_pad": "hidden_pad",
    "intermediate_pad": "intermediate_pad", "swiglu_limit": "swiglu_limit", "quant_type": "quant_type",
}


#: the dispatch formats SGLang registers a pre-permute to the aiter runner for, and what the
#: tier does with each (0.5.23 moe_runner/aiter.py): a release registering another one is an
#: unknown path (the runner_paths check fails naming it)
KNOWN_PRE_PERMUTE = {
    "standard": "driven: pre_permute_standard_to_aiter (TP, and EP through the standard dispatcher's expert mask)",
    "deepep_normal": "not driven: DeepEP dispatch (needs DeepEP and a process group); listed",
    "deepep_ll": "not driven: DeepEP low-latency dispatch (needs DeepEP and a process group); listed",
}


def runner_paths(runner_mod):
    """({format: what the tier does} for every pre-permute registered to aiter, plus "unknown"
    for those not in KNOWN_PRE_PERMUTE; the standard one or None)."""
    base = sys.modules[runner_mod.__name__.rsplit(".", 1)[0] + ".base"]
    pool = getattr(getattr(base, "PermuteMethodPool", None), "_pre_permute_methods", None)
    if pool is None:
        return {"error": "no PermuteMethodPool._pre_permute_methods in this release"}, None
    out = {}
    std = None
    for (fmt, backend), fn in pool.items():
        fmt, backend = str(getattr(fmt, "value", fmt)), str(getattr(backend, "value", backend))
        if backend != "aiter":
            continue
        out[fmt] = {"function": getattr(fn, "__name__", repr(fn)), "how": KNOWN_PRE_PERMUTE.get(fmt, "unknown")}
        if fmt == "standard":
            std = fn
    return out, std


def _topk_output(tok):
    topk = sys.modules.get("sglang.srt.layers.moe.topk") or __import__("importlib").import_module("sglang.srt.layers.moe.topk")
    import torch

    ids = tok["topk_ids"]
    logits = torch.zeros(ids.shape[0], int(ids.max()) + 1 if ids.numel() else 1)
    return topk.StandardTopKOutput(topk_weights=tok["topk_weights"], topk_ids=tok["topk_ids"], router_logits=logits)


def _dispatch_output(tok, topk_out):
    std = __import__("importlib").import_module("sglang.srt.layers.moe.token_dispatcher.standard")
    return std.StandardDispatchOutput(hidden_states=tok["hidden_states"], hidden_states_scale=None, topk_output=topk_out)


def empty_batch(core, pre, info, layer, tok, runner_input) -> dict:
    """The runner at 0 tokens, its input made the same way as the row's (SGLang's pre-permute
    where registered): SGLang 0.5.23's ``AiterRunnerCore.run`` returns early without calling
    ``fused_moe`` (aiter has no M == 0 guard of its own). Records the fused_moe calls it made,
    the output's shape and dtype, or the exception."""
    empty = {k: v[:0] for k, v in tok.items()}
    n0 = len(SPY_CALLS)
    try:
        first = pre(_dispatch_output(empty, _topk_output(empty)), info, layer.moe_runner_config, {}) if pre is not None \
            else runner_input(info)
        if pre is None:
            first.hidden_states, first.topk_ids, first.topk_weights = empty["hidden_states"], empty["topk_ids"], empty["topk_weights"]
        out = core.run(first, info, {})
        res = {"output": _describe(getattr(out, "hidden_states", out))}
    except Exception as e:  # judged in the parent (the empty_batch check), not a drive failure
        res = {"error": f"{type(e).__name__}: {e}"[:300]}
    res["fused_moe_calls"] = len(SPY_CALLS) - n0
    del SPY_CALLS[n0:]
    return res


#: fields probed one at a time as well (every other field as the builder made it), so a field
#: forwarded only inside some branch (e.g. swiglu_limit only with fp8 activations) is seen
PROBE_ONE = ("a13_scale", "a2_scale", "b13", "b2", "expert_mask", "doweight_stage1", "hidden_pad", "intermediate_pad",
             "swiglu_limit", "fp8_activations")


def field_probe(core, runner_input, info, fields, only: str | None = None) -> dict:
    """Run the runner once more with every quant-info field set to a distinct sentinel (or
    only field ``only``) and see which ``fused_moe`` keyword each one reaches (the spy only
    records here)."""
    import torch

    sentinels = {
        "a13_scale": torch.full((1,), 3.0), "a2_scale": torch.full((1,), 5.0), "b13": torch.full((1,), 7.0),
        "b2": torch.full((1,), 11.0), "expert_mask": torch.ones(info.expert_mask.numel() if info.expert_mask is not None else 1, dtype=torch.int32),
        "doweight_stage1": True, "hidden_pad": 96, "intermediate_pad": 160, "swiglu_limit": 7.25,
        "fp8_activations": True,  # gfx950 + bf16 + interleaved gate/up: must become quant_dtype_a=fp8
    }
    sentinels = {k: v for k, v in sentinels.items() if k in fields and (only is None or k == only)}
    probe = dataclasses.replace(info, **sentinels)
    if "fused_moe_kwargs" in fields and only is None:
        probe.fused_moe_kwargs = dict(info.fused_moe_kwargs or {}, fp4moe_probe_kwarg=13)
    SPY_MODE["compute"] = False
    n0 = len(SPY_CALLS)
    try:
        core.run(runner_input(probe), probe, {})
    finally:
        SPY_MODE["compute"] = True
    objs = SPY_CALLS[n0]["objects"] if len(SPY_CALLS) > n0 else {}
    out = {}
    for f in (fields if only is None else [only]):
        want = FIELD_TO_KWARG.get(f)
        v = getattr(probe, f)
        if f == "fused_moe_kwargs":
            got = objs.get("fp4moe_probe_kwarg")
            out[f] = {"kwarg": "(its keys)", "reached": got == 13, "got": _describe(got)}
        elif f == "fp8_activations":  # aiter's a8w4: MXFP8 activations (dtypes.fp8)
            got = objs.get("quant_dtype_a")
            out[f] = {"kwarg": "quant_dtype_a", "reached": got is torch.float8_e4m3fn, "got": _describe(got),
                      "sent": True, "gate_mode": _describe(objs.get("gate_mode"))}
        elif f == "quant_type":
            got = objs.get("quant_type")
            out[f] = {"kwarg": want, "reached": getattr(got, "name", None) == getattr(v, "value", v), "got": _describe(got),
                      "sent": _describe(v)}
        elif want is None:
            out[f] = {"kwarg": None, "reached": None, "got": None, "note": "no fused_moe keyword known for this field"}
        elif isinstance(v, torch.Tensor):
            got = objs.get(want)
            out[f] = {"kwarg": want, "reached": got is v or _same(got, v), "got": _describe(got), "sent": _describe(v)}
        else:
            got = objs.get(want, "<absent>")
            out[f] = {"kwarg": want, "reached": got == v, "got": _describe(got), "sent": _describe(v)}
    return out


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


def where(e: BaseException, most: int = 8) -> list[str]:
    """The SGLang / fp4moe frames of an exception, innermost last: "file:line in func"."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if ("/sglang/" in f.filename or "/fp4moe/" in f.filename)
              and not (f.name == "exec_module" and f.filename == __file__)]  # the import trail's loader: noise
    return [f"{f.filename.split('/sglang/')[-1] if '/sglang/' in f.filename else 'fp4moe/' + f.filename.split('/fp4moe/')[-1]}"
            f":{f.lineno} in {f.name}" for f in frames[-most:]]


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    from fp4moe.infra import childproc

    write_record = childproc.record_writer()  # before any SGLang code runs (it must not get one)
    from fp4moe.infra.confine import confine_from_env

    # before SGLang is imported: its code writes only beneath the work folder and the record's
    unconfined = confine_from_env(also=[os.path.dirname(os.environ.get(childproc.RESULT_ENV, "") or ".")])
    argv = sys.argv[1:] if argv is None else argv
    req = json.loads(Path(argv[0]).read_text())
    out_dir = Path(req["out_dir"])
    record: dict = {"stage": "start", "rows": [], "writes_confined": unconfined is None,
                    **({"unconfined": unconfined} if unconfined else {})}
    try:
        record["sglang_version"] = req.get("sglang_version") or sglang_version(req["sglang_root"])
        record["stage"] = "mode"
        mode, record["mode_why"] = modes.detect_mode(req.get("mode") or "auto")
        record["mode"] = mode
        if mode == "gfx950" and req.get("aiter_src"):
            raise ValueError("--aiter-src: the gfx950 mode runs the installed aiter's own shuffles; drop the option")
        if mode == "gfx950":
            return _main_gfx950(req, out_dir, record, write_record)
        record["stage"] = "shuffle source"
        shuffles, origin = shuffle_provider(req.get("aiter_src"))
        record["shuffle_source"] = origin
        if req.get("aiter_src"):
            from fp4moe.targets.aiter.source import AiterSource, function_params

            src = AiterSource.from_dir(req["aiter_src"])
            FUSED_MOE_PARAMS.update(names=function_params(src.read("aiter/fused_moe.py"), "fused_moe"),
                                    origin=f"{src.origin}/aiter/fused_moe.py")
            record["fused_moe_params"] = FUSED_MOE_PARAMS["names"]  # None: not found, keywords not checked
        record["stage"] = "import"
        mark = provisional(write_record, record)
        fp8, runner_mod = import_sglang(req["sglang_root"], {}, trail=mark)
        from fp4moe.targets.sglang.child import patches, stubs

        record["import_seconds"] = round(time.perf_counter() - T0, 2)
        record["stage"] = "imported"
        mark()  # SGLang's code that ends the process later is named by its stage
        if req.get("import_only"):  # `pytest --require sglang`: can the child import SGLang's FP4 path?
            record["stage"] = "imported"
            record["stubbed"] = list(stubs.STUBBED)
            write_record(record)
            return 0
        record["stage"] = "patch"
        fp8_text = Path(fp8.__file__).read_text()
        names = patches.shuffle_imports(fp8_text)
        record["shuffle_imports"] = names
        provided = {n: _recording(n, shuffles[n]) if n in shuffles else _missing(n) for n in names}
        for n in ("shuffle_weight", "shuffle_scale"):
            provided.setdefault(n, _recording(n, shuffles[n]) if n in shuffles else _missing(n))
        shuffle_mod = sys.modules.get("aiter.ops.shuffle") or __import__("aiter.ops.shuffle", fromlist=["x"])
        for n, f in provided.items():
            setattr(fp8, n, f) if n in names else None
            setattr(shuffle_mod, n, f)
        record["shuffle_names_missing"] = [n for n in names if n not in shuffles]
        record["flags"] = patches.set_flags(fp8, patches.FP8_FLAGS)
        record["runner_flags"] = patches.set_flags(runner_mod, patches.RUNNER_FLAGS)
        missing = [f for f in patches.REQUIRED_FLAGS if not record["flags"][f]["found"]]
        from fp4moe.targets.sglang.source import has_fp4_aiter_branch

        branch = has_fp4_aiter_branch(fp8_text)
        record["fp4_aiter_branch"] = branch and not missing
        if not record["fp4_aiter_branch"]:
            record["stage"] = "no branch"
            record["error"] = (f"sglang {record['sglang_version']}: fp8.py has no DeepSeek-V4 FP4 aiter branch "
                               f"(no `if _use_aiter and ... is_fp4_expert` in it; flags missing: {missing})")
            write_record(record)
            return 0
        drive_rows(fp8, runner_mod, req, out_dir, record, mark)
    except Exception as e:  # the verdict: SGLang's code raised here (the parent decides 1 or 2)
        record["error"] = f"{type(e).__name__}: {e}"
        record["where"] = where(e)
        if isinstance(e, ModuleNotFoundError) and record.get("stage") == "import" and e.name:
            record["missing_module"] = e.name  # neither installed nor stubbed: the parent names its package
    record["seconds"] = round(time.perf_counter() - T0, 2)
    write_record(record)
    return 0


def drive_rows(fp8, runner_mod, req: dict, out_dir: Path, record: dict, mark=None) -> None:
    """Mutant (if any), then every row; shared by both modes. ``mark()`` (see
    :func:`provisional`) before each row: a process ended by SGLang's code names the row."""
    from fp4moe.targets.sglang.child import stubs

    if req.get("mutant"):
        from fp4moe.targets.sglang.child import mutants

        record["stage"] = "mutant"
        record["mutant"] = mutants.apply(req["mutant"], fp8, runner_mod)
    record["pad_poison"] = poison_fresh_memory(fp8, runner_mod)
    record["stage"] = "rows"
    for row in req["rows"]:  # rows are independent: one that raises does not hide the others
        if mark:
            record["row"] = row["label"]
            mark()
        n0 = len(SPY_CALLS)
        try:
            record["rows"].append(drive_row(fp8, runner_mod, row, req, out_dir))
        except RowFailed as e:  # SGLang's code (or the reference it feeds) raised for this row
            from fp4moe.targets.sglang.child.refused_call import recorded_fields

            record["rows"].append({"label": row["label"], "error": str(e)[:2000], "where": where(e.exc),
                                   "step": e.step, "setup": e.step in SETUP_STEPS,
                                   **recorded_fields(SPY_CALLS[n0:], e.exc)})
    if req.get("mutant") and record["mutant"].get("applied"):
        from fp4moe.targets.sglang.child import mutants

        hits = mutants.runtime_hits(req["mutant"])
        record["mutant"]["runtime_hits"] = hits
        if hits == 0:  # patched, but SGLang never reached the mutated behaviour: not judged
            record["mutant"].update(applied=False, why="patched, but it never acted during the drive")
    record.pop("row", None)
    record["stubbed_modules"] = sorted({m.split(".")[0] for m in stubs.STUBBED})
    record["stage"] = "done"


#: the byte every fresh allocation SGLang's fp8 / runner modules make is filled with: not zero
#: and no legal pad byte (FP4 zero codes 0x00/0x08/0x80/0x88; e8m0 pads 0x00 or 0x7F), so a
#: pad left uninitialised is seen whatever the allocator hands back (MALLOC_PERTURB_ or not).
#: 0xA5: FP4 codes 0x5 (+3.0) and 0xA (-1.0), e8m0 2^38 (finite: not the NaN check's finding).
POISON_BYTE = 0xA5


class _PoisonTorch:
    """``torch`` as SGLang's fp8.py / runner module see it: ``empty`` / ``empty_like`` return
    memory filled with POISON_BYTE (deterministic); everything else is torch itself."""

    def __init__(self, real):
        self._real = real
        self.hits = 0

    def __getattr__(self, item):
        return getattr(self._real, item)

    def _poison(self, t):
        if t.device.type != "meta" and t.numel():
            t.view(self._real.uint8).fill_(POISON_BYTE) if t.is_contiguous() else t.fill_(0)
            self.hits += 1
        return t

    def empty(self, *a, **k):
        return self._poison(self._real.empty(*a, **k))

    def empty_like(self, *a, **k):
        return self._poison(self._real.empty_like(*a, **k))


def poison_fresh_memory(*modules) -> dict:
    """Give each SGLang module a poisoning ``torch`` (only those modules: the rest of the
    process, the reference included, sees torch itself). ``Tensor.new_empty`` is not covered."""
    import torch

    done = {}
    for m in modules:
        cur = getattr(m, "torch", None)
        if cur is torch or isinstance(cur, _PoisonTorch):
            if cur is torch:
                m.torch = _PoisonTorch(torch)
            done[m.__name__] = f"torch.empty/empty_like filled with 0x{POISON_BYTE:02X}"
    return done


def _main_gfx950(req: dict, out_dir: Path, record: dict, write_record) -> int:
    """gfx950 mode: real aiter, real selectors, recorded (not replaced) shuffles and fused_moe."""
    import importlib

    import torch

    from fp4moe.targets.sglang.child import patches, stubs

    try:
        req = dict(req, device="cuda")  # ROCm torch names HIP devices "cuda"
        record["stage"] = "import"
        mark = provisional(write_record, record)
        fp8, runner_mod = import_sglang(req["sglang_root"], {}, mode="gfx950", trail=mark)
        record["stage"] = "imported"
        mark()
        record["import_seconds"] = round(time.perf_counter() - T0, 2)
        fake = sorted({m.split(".")[0] for m in stubs.STUBBED} & set(modes.REAL_IN_GFX950))
        if fake:
            raise RuntimeError(f"gfx950 mode: {fake} resolved to stubs (not installed?)")
        record["stage"] = "selectors"
        record["flags"] = {n: {"found": hasattr(fp8, n), "was": repr(getattr(fp8, n, None)), "now": repr(getattr(fp8, n, None))}
                           for n in modes.GFX950_SELECTORS}
        off = [n for n in modes.GFX950_SELECTORS if hasattr(fp8, n) and not getattr(fp8, n)]
        if off or not hasattr(fp8, "_use_aiter"):
            raise RuntimeError(f"gfx950 mode: SGLang did not select its aiter FP4 branch on this runner: {off or ['_use_aiter absent']} "
                               f"false (SGLANG_USE_AITER={os.environ.get('SGLANG_USE_AITER')!r})")
        record["runner_flags"] = {}
        from fp4moe.targets.sglang.source import has_fp4_aiter_branch

        fp8_text = Path(fp8.__file__).read_text()
        record["fp4_aiter_branch"] = has_fp4_aiter_branch(fp8_text)
        if not record["fp4_aiter_branch"]:
            record["stage"] = "no branch"
            record["error"] = f"sglang {record['sglang_version']}: fp8.py has no DeepSeek-V4 FP4 aiter branch"
            write_record(record)
            return 0
        record["stage"] = "record"
        names = patches.shuffle_imports(fp8_text)
        record["shuffle_imports"] = names
        fallback, _ = shuffle_provider(None)
        for n in names:  # fp8.py's own bindings of aiter's shuffles, recorded
            if hasattr(fp8, n):
                setattr(fp8, n, _recording(n, getattr(fp8, n), meta_fallback=fallback.get(n)))
        record["shuffle_names_missing"] = [n for n in names if not hasattr(fp8, n)]
        afm = importlib.import_module("aiter.fused_moe")
        real = afm.fused_moe
        afm.fused_moe = modes.recording(real, _record_call, lambda: SPY_MODE["compute"])  # the runner imports it at call time
        import aiter

        if getattr(aiter, "fused_moe", None) is real:
            aiter.fused_moe = afm.fused_moe
        record["shuffle_source"] = f"aiter {getattr(aiter, '__file__', '?')} (real, on {torch.cuda.get_device_name(0)})"
        record["kernel"] = f"aiter.fused_moe from {getattr(afm, '__file__', '?')}"
        drive_rows(fp8, runner_mod, req, out_dir, record, mark)
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}"
        record["where"] = where(e)
    record["seconds"] = round(time.perf_counter() - T0, 2)
    write_record(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
