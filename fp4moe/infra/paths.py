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


def cache_dir() -> Path:
    """Where downloads go, outside the checkout: ``$FP4MOE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fp4moe``, else ``~/.cache/fp4moe`` (the XDG base-directory default).
    Never inside the checkout, so a clone stays what git tracks."""
    env = os.environ.get("FP4MOE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "fp4moe"


def wheel_dir() -> Path:
    """Downloaded and unpacked wheels (SGLang releases, amd-aiter): ``$FP4MOE_WHEEL_DIR`` or
    ``cache_dir()/wheels``. ``ci/fetch_amd_aiter_wheel.sh`` uses the same rule."""
    env = os.environ.get("FP4MOE_WHEEL_DIR")
    return Path(env) if env else cache_dir() / "wheels"


#: The one folder results go to when no option names a file (git-ignored in a checkout).
RESULTS_ENV = "FP4MOE_RESULTS_DIR"


def results_dir() -> Path:
    """Where a gate writes results files nobody named: ``$FP4MOE_RESULTS_DIR``, else
    ``results/`` of this checkout (``/results/`` is in ``.gitignore``), else, for an installed
    (non-editable) package, ``${XDG_STATE_HOME:-~/.local/state}/fp4moe/results``. Never the
    current directory. Not created here: the gate creates it when it writes its first file."""
    env = os.environ.get(RESULTS_ENV)
    if env:
        return Path(env)
    if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "fp4moe").is_dir():
        return REPO_ROOT / "results"
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state") / "fp4moe" / "results"
