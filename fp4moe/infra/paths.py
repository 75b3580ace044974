"""Where the project's files are.

- :func:`data_path`: the gates' runtime data, shipped in the package (``fp4moe/data/``, in the
  wheel): the model catalogue, the footprint budget, the GSM8K thresholds, the registry of
  known aiter defects, the GSM8K task and mini data, stored perf baselines. ``$FP4MOE_DATA_DIR``
  names a folder that replaces the packaged one as a whole (same names; a file missing there is
  an error naming it, never the packaged file instead).
- :data:`REPO_ROOT`: the folder that holds the ``fp4moe`` package (a checkout, or
  site-packages); :data:`CHECKOUT`: the same folder when it is a checkout (``pyproject.toml``
  and ``tests/`` beside the package), else None: an installed package never writes there.
- :func:`shared_dir` (``../shared`` beside the checkout), :func:`cache_dir`, :func:`wheel_dir`
  (downloads).

``fixtures/`` of the checkout holds the tests' own fixtures only; nothing here reads it.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # fp4moe/infra/paths.py -> the folder holding fp4moe
CHECKOUT: Path | None = (REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "tests").is_dir()
                         else None)

#: The environment variable naming a folder that replaces the packaged data folder.
DATA_ENV = "FP4MOE_DATA_DIR"
#: The packaged data folder, relative to the ``fp4moe`` package.
DATA_PACKAGE_DIR = "data"


def packaged_data_dir() -> Path:
    """``fp4moe/data`` as installed (``importlib.resources``; a wheel or an editable checkout
    alike). A package imported from a zip has no folder to hand out: ValueError naming it."""
    root = resources.files("fp4moe") / DATA_PACKAGE_DIR
    if not isinstance(root, Path):
        raise ValueError(f"fp4moe package data {root}: not a folder on disk (install the wheel unzipped, "
                         f"or set {DATA_ENV})")
    return root


def data_dir() -> Path:
    """``$FP4MOE_DATA_DIR`` when set, else the packaged data folder."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else packaged_data_dir()


def data_path(name: str) -> Path:
    """One runtime data file or folder by its name under the data folder (e.g.
    ``"models.json"``, ``"gsm8k/mini"``). Every gate's data goes through here with a literal
    name (``tests/infra/test_package_data.py`` lists them from the code and checks the wheel)."""
    return data_dir() / name


def shared_dir() -> Path | None:
    """``$FP4MOE_SHARED`` when set (None when it names no folder: never a silent fall-back to
    another folder than the one the user named; :func:`shared_env_problem` says why), else
    ``../shared`` beside the checkout, else None."""
    env = os.environ.get("FP4MOE_SHARED")
    if env:
        return Path(env) if Path(env).is_dir() else None
    c = CHECKOUT.parent / "shared" if CHECKOUT is not None else None
    return c if c is not None and c.is_dir() else None


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
