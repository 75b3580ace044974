"""aiter's gfx950 layouts recorded as index maps (``../shared/golden/aiter-layouts``).

For every output byte the map holds the flat index of the input byte that lands there, or -1
for padding. ``index_map_of`` computes the same map for ``fp4moe.reference.layout`` by pushing the input
positions through the shuffle (four byte planes of an int32 position), so a case is checked
against the stored array where it ships, else against its sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_regular_bytes
from fp4moe.infra.paths import shared_dir, shared_env_problem
from fp4moe.reference import layout

GOLDEN_SUBDIR = "golden/aiter-layouts"


def golden_dir() -> Path:
    """The golden folder; FileNotFoundError only when no shared folder is there at all (the
    layouts are then not checked, and the check says so). A shared folder the user named that
    does not exist (``$FP4MOE_SHARED``), or a golden folder whose manifest is missing or not a
    regular file (a FIFO would block the read forever), is ``GateCannotRun`` naming it."""
    problem = shared_env_problem()
    if problem:
        raise GateCannotRun(problem)
    s = shared_dir()
    if s is None:
        raise FileNotFoundError("../shared/golden/aiter-layouts is absent in this checkout")
    d = s / GOLDEN_SUBDIR
    manifest = d / "layout_manifest.json"
    if not os.path.lexists(manifest):
        if not os.path.lexists(d):
            raise FileNotFoundError(f"{d} is absent")
        raise GateCannotRun(f"{manifest}: the golden manifest is missing from {d}")
    if not manifest.is_file():
        raise GateCannotRun(f"{manifest}: the golden manifest is not a regular file")
    return d


def load_cases() -> tuple[list[dict], dict[str, np.ndarray]]:
    """The manifest's cases and the stored index maps; a file that cannot be read (truncated
    ``.npz``, bad JSON or UTF-8, no ``cases`` list) is GateCannotRun naming it."""
    d = golden_dir()
    manifest_path, maps_path = d / "layout_manifest.json", d / "layout_index_maps.npz"
    try:
        manifest = json.loads(read_regular_bytes(manifest_path).decode("utf-8"))
        cases = manifest["cases"]
        if not isinstance(cases, list):
            raise TypeError(f"'cases' is a {type(cases).__name__}, not a list")
    except Exception as e:  # noqa: BLE001 -- any way the file is broken means: cannot check
        raise GateCannotRun(f"{manifest_path}: unreadable golden manifest ({type(e).__name__}: {e})") from None
    if not maps_path.is_file():
        return cases, {}  # the manifest's sha256 values still check every case
    try:
        with np.load(maps_path, allow_pickle=False) as z:
            maps = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 -- BadZipFile, EOFError, zlib.error, ValueError ...
        raise GateCannotRun(f"{maps_path}: unreadable golden index maps ({type(e).__name__}: {e})") from None
    return cases, maps


def apply_case(case: dict, x: torch.Tensor) -> torch.Tensor:
    p = case["params"]
    if case["function"] == "shuffle_weight":
        return layout.shuffle_weight(x, (16, 16), is_guinterleave=p["is_guinterleave"], gate_up=p["gate_up"])
    return layout.shuffle_scale(x, experts_cnt=p["experts_cnt"], is_guinterleave=p["is_guinterleave"], gate_up=p["gate_up"])


def index_map_of(case: dict) -> np.ndarray:
    shape = case["input_shape"]
    pos = torch.arange(int(np.prod(shape)), dtype=torch.int64)
    out = None
    for plane in range(4):
        y = apply_case(case, ((pos >> (8 * plane)) & 0xFF).to(torch.uint8).reshape(shape)).to(torch.int64)
        out = y << (8 * plane) if out is None else out | (y << (8 * plane))
    if case["function"] == "shuffle_scale":
        p = case["params"]
        pad = layout.scale_padding_mask(*shape, experts_cnt=p["experts_cnt"], is_guinterleave=p["is_guinterleave"], gate_up=p["gate_up"])
        out[pad] = -1
    return out.numpy()


def sha256_of_map(m: np.ndarray) -> str:
    return hashlib.sha256(m.astype("<i8").tobytes()).hexdigest()


def check_case(case: dict, maps: dict[str, np.ndarray]) -> None:
    m = index_map_of(case)
    if list(m.shape) != case["output_shape"]:
        raise AssertionError(f"{case['id']}: output shape {list(m.shape)} != aiter's {case['output_shape']}")
    if case["id"] in maps and not np.array_equal(maps[case["id"]], m):
        bad = int((maps[case["id"]] != m).sum())
        raise AssertionError(f"{case['id']}: {bad} bytes differ from aiter's index map")
    if sha256_of_map(m) != case["sha256_index_map"]:
        raise AssertionError(f"{case['id']}: index map sha256 differs from aiter's")


def check_all_golden() -> int:
    """Check every case; a manifest without a case is ``GateCannotRun`` (nothing was checked)."""
    cases, maps = load_cases()
    if not cases:
        raise GateCannotRun(f"{golden_dir() / 'layout_manifest.json'}: the golden manifest lists no case: nothing to check")
    for c in cases:
        check_case(c, maps)
    return len(cases)
