"""Ingest of DeepSeek-V4 FP4 routed-expert tensors from safetensors, with TP/EP sharding.

Checkpoint format (DeepSeek-V4 FP4 release): per layer L and expert e,
``layers.{L}.ffn.experts.{e}.{w1,w2,w3}.weight`` are packed MXFP4 bytes (safetensors ``I8``;
``U8`` and ``F4`` are read too) of shape [rows, K/2], and ``.scale`` the e8m0 block scales
(``F8_E8M0``) of shape [rows, K/32]. w1 = gate [I, H], w3 = up [I, H], w2 = down [H, I].
safetensors >= 0.6 reads all of these dtypes.

Sharding (SGLang's, for the MoE intermediate dim I):
- tensor parallel (``tp_size`` = the MoE TP degree, tp / ep): rank r holds rows
  [r*I/tp, (r+1)*I/tp) of w1/w3 and their scales, and w2's packed columns [r*I/(2tp), ...)
  with scale columns [r*I/(32tp), ...). I/tp must be a multiple of 32 (one scale block).
- expert parallel: rank r holds the contiguous experts [r*E/ep, (r+1)*E/ep).
Loaded experts are stacked to w13 (E, 2*I_p, H/2) [gate rows then up rows],
w13_scale (E, 2*I_p, H/32), w2 (E, H, I_p/2), w2_scale (E, H, I_p/32).
Slices are read with ``safe_open(...).get_slice`` so a rank reads only its own bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from fp4moe.mx import e8m0, mxfp4
from fp4moe.mx.mxfp4 import BLOCK_SIZE

KEY = "layers.{layer}.ffn.experts.{expert}.{proj}.{kind}"
PROJECTIONS = ("w1", "w2", "w3")  # gate, down, up
#: a DeepSeek-V4 routed-expert tensor name: layer, expert, w1|w2|w3, weight|scale
KEY_RE = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale)$")


@dataclass
class RawMoEWeights:
    """One rank's stacked, unprocessed routed experts of one layer (uint8 bytes)."""

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    expert_ids: tuple[int, ...]  # global ids of the stacked experts

    def tensors(self):
        return self.w13, self.w13_scale, self.w2, self.w2_scale


def _regular(p: Path) -> Path:
    """``p``, a regular file (symlinks followed): a FIFO would block the open forever, a device
    would be read without end; each is an error naming it and what it is."""
    import stat

    from fp4moe.infra.files import node_kind

    try:
        mode = p.stat().st_mode
    except OSError as e:
        raise FileNotFoundError(f"checkpoint {p}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"checkpoint {p}: is {node_kind(mode)}, not a regular file")
    return p


def _files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if files:
            return [_regular(f) for f in files]
        raise FileNotFoundError(f"checkpoint {p}: no *.safetensors files in the directory")
    if not p.exists():
        raise FileNotFoundError(f"checkpoint {p}: no such file or directory")
    return [_regular(p)]


class CheckpointError(KeyError, ValueError):
    """A checkpoint that cannot be read as one consistent set of expert tensors. Both a
    KeyError (a tensor is missing) and a ValueError (bad input); the message names the file,
    layer, expert and key."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


#: Model-configuration file beside the safetensors files, and its expert-count key
#: (DeepSeek-V3/V4 Hugging Face ``config.json``, ~2 KB: more than CONFIG_LIMIT is refused unread).
CONFIG_FILE = "config.json"
CONFIG_LIMIT = 1 << 20
EXPERTS_KEY = "n_routed_experts"


def _config_path(path: str | Path) -> Path:
    p = Path(path)
    return (p if p.is_dir() else p.parent) / CONFIG_FILE


def expert_count(path: str | Path, num_experts: int | None = None) -> tuple[int, str]:
    """(routed experts per layer, where that number came from): the explicit argument, else
    ``n_routed_experts`` of the ``config.json`` beside the checkpoint. Never inferred from the
    ids present: a checkpoint missing its last expert must not load as one expert fewer."""
    cfg_path = _config_path(path)
    from_cfg = None
    if cfg_path.exists():
        from fp4moe.infra.files import read_regular_bytes

        try:
            cfg = json.loads(read_regular_bytes(cfg_path, limit=CONFIG_LIMIT).decode("utf-8"))
        except OSError as e:  # a FIFO, a device, a folder, a file too large: named, never read
            raise CheckpointError(f"{cfg_path}: cannot read: {str(e).removeprefix(f'{cfg_path}: ')}") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise CheckpointError(f"{cfg_path}: not a readable JSON model configuration "
                                  f"({' '.join(str(e).split())[:200] or 'nested too deeply'})") from None
        v = cfg.get(EXPERTS_KEY) if isinstance(cfg, dict) else None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CheckpointError(f"{cfg_path}: {EXPERTS_KEY} is {v!r}, not a positive integer")
        from_cfg = v
    if num_experts is not None:
        if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
            raise CheckpointError(f"num_experts={num_experts!r}: must be a positive integer")
        if from_cfg is not None and from_cfg != num_experts:
            raise CheckpointError(f"num_experts={num_experts} disagrees with {EXPERTS_KEY}={from_cfg} in {cfg_path}")
        return num_experts, "num_experts argument"
    if from_cfg is None:
        raise CheckpointError(
            f"checkpoint {path}: the expert count is unknown: no {cfg_path.name} with {EXPERTS_KEY} beside it "
            "and no num_experts argument"
        )
    return from_cfg, f"{cfg_path}"


class _Index:
    """key -> file over every safetensors file of a checkpoint (headers only). A key in more
    than one file is an error naming every such key and its files: which copy wins would
    depend on the file order."""

    def __init__(self, path):
        self.files = _files(path)
        self.where: dict[str, Path] = {}
        dups: dict[str, list[str]] = {}
        for f in self.files:
            try:
                with safe_open(str(f), framework="pt") as h:
                    keys = list(h.keys())
            except Exception as e:  # safetensors raises its own SafetensorError for a bad header
                raise CheckpointError(f"{f}: not a readable safetensors file ({' '.join(str(e).split())})") from None
            for k in keys:
                if k in self.where:
                    dups.setdefault(k, [self.where[k].name]).append(f.name)
                self.where[k] = f
        if dups:
            listed = "; ".join(f"{k} ({', '.join(fs)})" for k, fs in sorted(dups.items()))
            raise CheckpointError(f"checkpoint {path}: {len(dups)} key(s) in more than one file: {listed}")

    def experts_in_layer(self, layer: int) -> list[int]:
        ids = set()
        for k in self.where:
            m = KEY_RE.match(k)
            if m and int(m.group(1)) == layer:
                ids.add(int(m.group(2)))
        return sorted(ids)

    def read(self, key: str, rows: slice | None = None, cols: slice | None = None) -> torch.Tensor:
        if key not in self.where:
            raise CheckpointError(f"checkpoint is missing tensor {key!r} (files: {', '.join(f.name for f in self.files)})")
        with safe_open(str(self.where[key]), framework="pt") as h:
            sl = h.get_slice(key)
            shape = sl.get_shape()
            if len(shape) != 2:
                raise ValueError(f"{key} in {self.where[key].name}: expected 2 dims, got shape {shape}")
            t = sl[rows or slice(None), cols or slice(None)]
        return t


def _bytes(t: torch.Tensor, key: str, is_scale: bool) -> torch.Tensor:
    return e8m0.as_uint8(t, key) if is_scale else mxfp4.as_packed_uint8(t, key)


def _shard_bounds(total: int, size: int, rank: int, what: str, unit: int) -> slice:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"{what}: rank {rank} out of range for size {size}")
    if total % size or (total // size) % unit:
        raise ValueError(f"{what}: {total} is not divisible into {size} shards of a multiple of {unit}")
    n = total // size
    return slice(rank * n, (rank + 1) * n)


def load_moe_layer(
    path: str | Path,
    layer: int,
    *,
    tp_size: int = 1,
    tp_rank: int = 0,
    ep_size: int = 1,
    ep_rank: int = 0,
    num_experts: int | None = None,
) -> RawMoEWeights:
    """Read one rank's shard of a layer's routed experts and stack them.

    The expert count is ``num_experts`` or the model configuration's (:func:`expert_count`);
    every expert of the layer must be present with all six tensors, and no other: the error
    names every missing expert and tensor, every unexpected expert id, every duplicate key.
    """
    idx = _Index(path)
    n_exp, source = expert_count(path, num_experts)
    experts = idx.experts_in_layer(layer)
    if not experts:
        raise CheckpointError(f"checkpoint {path}: no routed experts for layer {layer}")
    extra = [e for e in experts if e >= n_exp]
    if extra:
        raise CheckpointError(f"checkpoint {path}: layer {layer} has expert id(s) {extra} beyond the "
                              f"{n_exp} experts of {source}")
    whole = sorted(set(range(n_exp)) - set(experts))
    partial = [KEY.format(layer=layer, expert=e, proj=p, kind=k) for e in sorted(set(experts))
               for p in PROJECTIONS for k in ("weight", "scale")
               if KEY.format(layer=layer, expert=e, proj=p, kind=k) not in idx.where]
    if whole or partial:
        parts = [f"is missing expert(s) {whole} of 0..{n_exp - 1} ({source})"] if whole else []
        parts += [f"is missing tensor {', '.join(repr(k) for k in partial)}"] if partial else []
        raise CheckpointError(f"checkpoint {path}: layer {layer} " + "; ".join(parts))
    ex = _shard_bounds(n_exp, ep_size, ep_rank, "ep (experts)", 1)
    w1_key = KEY.format(layer=layer, expert=0, proj="w1", kind="weight")
    with safe_open(str(idx.where[w1_key]), framework="pt") as h:
        inter, h_half = h.get_slice(w1_key).get_shape()
    rows = _shard_bounds(inter, tp_size, tp_rank, "tp (intermediate rows)", BLOCK_SIZE)
    cols_w = slice(rows.start // 2, rows.stop // 2)
    cols_s = slice(rows.start // BLOCK_SIZE, rows.stop // BLOCK_SIZE)
    w13, s13, w2, s2 = [], [], [], []
    for e in range(ex.start, ex.stop):
        def rd(proj, kind, r=None, c=None):
            key = KEY.format(layer=layer, expert=e, proj=proj, kind=kind)
            return _bytes(idx.read(key, r, c), key, kind == "scale")

        gate, up = rd("w1", "weight", rows), rd("w3", "weight", rows)
        gate_s, up_s = rd("w1", "scale", rows), rd("w3", "scale", rows)
        down, down_s = rd("w2", "weight", None, cols_w), rd("w2", "scale", None, cols_s)
        for name, t, shape in (
            ("w1.weight", gate, (rows.stop - rows.start, h_half)),
            ("w3.weight", up, (rows.stop - rows.start, h_half)),
            ("w1.scale", gate_s, (rows.stop - rows.start, h_half * 2 // BLOCK_SIZE)),
            ("w3.scale", up_s, (rows.stop - rows.start, h_half * 2 // BLOCK_SIZE)),
            ("w2.weight", down, (h_half * 2, cols_w.stop - cols_w.start)),
            ("w2.scale", down_s, (h_half * 2, cols_s.stop - cols_s.start)),
        ):
            if tuple(t.shape) != shape:
                raise ValueError(
                    f"layers.{layer}.ffn.experts.{e}.{name}: shard shape {tuple(t.shape)} != expected {shape}"
                )
        w13.append(torch.cat((gate, up), 0))
        s13.append(torch.cat((gate_s, up_s), 0))
        w2.append(down)
        s2.append(down_s)
    return RawMoEWeights(
        w13=torch.stack(w13).contiguous(),
        w13_scale=torch.stack(s13).contiguous(),
        w2=torch.stack(w2).contiguous(),
        w2_scale=torch.stack(s2).contiguous(),
        expert_ids=tuple(range(ex.start, ex.stop)),
    )


def write_dsv4_checkpoint(
    path: str | Path,
    *,
    hidden: int,
    intermediate: int,
    experts: int,
    layers=(0,),
    seed: int = 0,
    files: int = 1,
    scale_mode: str = "round_up",
) -> dict[str, torch.Tensor]:
    """Write a small but real DeepSeek-V4-format FP4 expert checkpoint.

    Weights are seeded random normals (std 0.02, like an initialised projection) quantized with
    ``fp4moe.mx.mxfp4``; stored as ``I8`` packed bytes and ``F8_E8M0`` scales, split over
    ``files`` safetensors files plus a ``model.safetensors.index.json`` and a ``config.json``
    holding ``n_routed_experts``. Returns the float32
    originals by key (``...w1.weight`` etc.) so tests can check the round trip.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1": (intermediate, hidden), "w3": (intermediate, hidden), "w2": (hidden, intermediate)}
    tensors: dict[str, torch.Tensor] = {}
    originals: dict[str, torch.Tensor] = {}
    for layer in layers:
        for e in range(experts):
            for proj in PROJECTIONS:
                w = torch.randn(shapes[proj], generator=g) * 0.02
                packed, scale = mxfp4.quantize(w, scale_mode)
                wk = KEY.format(layer=layer, expert=e, proj=proj, kind="weight")
                sk = KEY.format(layer=layer, expert=e, proj=proj, kind="scale")
                tensors[wk] = packed.view(torch.int8)
                tensors[sk] = scale.view(torch.float8_e8m0fnu)
                originals[wk] = w
    keys = sorted(tensors)
    weight_map = {}
    for i in range(files):
        part = keys[i::files]
        name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(out / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
    with open(out / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
    with open(out / CONFIG_FILE, "w") as f:  # the loader takes the expert count from here
        json.dump({EXPERTS_KEY: experts, "hidden_size": hidden, "moe_intermediate_size": intermediate}, f, indent=1)
    return originals
