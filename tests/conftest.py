"""Shared fixtures for the CPU tier (hardware markers and tier reporting live in ../conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fp4moe.model.checkpoint import write_dsv4_checkpoint


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


@pytest.fixture
def loopback_only(monkeypatch):
    """Refuse any socket connection that is not to loopback (tests against local servers)."""
    import socket

    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test network guard: connection to {address!r} refused")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
