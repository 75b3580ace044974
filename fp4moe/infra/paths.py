"""Where the project's data lives: ``fixtures/`` in the checkout, ``../shared`` beside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # fp4moe/infra/paths.py -> the checkout
FIXTURES = REPO_ROOT / "fixtures"


def shared_dir() -> Path | None:
    """``$FP4MOE_SHARED`` when set (None when it names no folder: never a silent fall-back to
    another folder than the one the user named; :func:`shared_env_problem` says why), else
    ``../shared`` beside the checkout, else None."""
    env = os.environ.get("FP4MOE_SHARED")
    if env:
        return Path(env) if Path(env).is_dir() else None
    c = REPO_ROOT.parent / "shared"
    return c if c.is_dir() else None


def shared_env_problem() -> str | None:
    """A line naming ``$FP4MOE_SHARED`` when it is set to something that is not a folder."""
    env = os.environ.get("FP4MOE_SHARED")
    if env and not Path(env).is_dir():
        what = "does not exist" if not os.path.lexists(env) else "is not a folder"
        return f"FP4MOE_SHARED={env} {what}: point it at the shared data folder or unset it"
    return None
