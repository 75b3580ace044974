"""Where the project's data lives: ``fixtures/`` in the checkout, ``../shared`` beside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # fp4moe/infra/paths.py -> the checkout
FIXTURES = REPO_ROOT / "fixtures"


def shared_dir() -> Path | None:
    """``$FP4MOE_SHARED`` or ``../shared`` beside the checkout; None when neither exists."""
    env = os.environ.get("FP4MOE_SHARED")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared")
    for c in candidates:
        if c.is_dir():
            return c
    return None
