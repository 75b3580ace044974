"""Shared fixtures for the CPU tier (hardware markers and tier reporting live in ../conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fp4moe.checkpoint import write_dsv4_checkpoint


@dataclass(frozen=True)
class DSV4Checkpoint:
    """A small but real DeepSeek-V4-format FP4 expert checkpoint written to a temp dir."""

    path: Path
    originals: dict[str, torch.Tensor]  # float32 weights by key, as write_dsv4_checkpoint returned them
    hidden: int
    intermediate: int
    experts: int
    layers: tuple[int, ...]
    files: int


@pytest.fixture(scope="session")
def dsv4_checkpoint(tmp_path_factory) -> DSV4Checkpoint:
    """3 experts x 2 layers, hidden 128, intermediate 256, split over 2 safetensors files.

    Session-scoped: written once (~0.1 s); tests must treat it as read-only.
    """
    spec = dict(hidden=128, intermediate=256, experts=3, layers=(0, 1), files=2)
    path = tmp_path_factory.mktemp("dsv4_ckpt")
    originals = write_dsv4_checkpoint(path, seed=1234, **spec)
    return DSV4Checkpoint(path=path, originals=originals, **spec)
