"""What ran: the package version and, from a git checkout, its commit.

- :func:`package_version`: ``fp4moe.__version__`` (the one source; ``pyproject.toml`` reads it).
- :func:`checkout_commit`: ``git rev-parse HEAD`` of the checkout the package runs from, with
  ``+dirty`` when tracked files differ from it; None for an installed package (no checkout) or
  where git cannot answer.
- :func:`provenance`: the two fields every result record carries (``fp4moe_version``,
  ``fp4moe_commit``); :func:`version_line`: what ``fp4moe-gate --version`` prints.
"""

from __future__ import annotations

import functools
import subprocess

from fp4moe.infra.paths import CHECKOUT, data_dir

#: Seconds git may take to answer (a hung network file system never holds a gate).
GIT_TIMEOUT_S = 10.0


def package_version() -> str:
    import fp4moe

    return fp4moe.__version__


def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True,
                           timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def checkout_commit() -> str | None:
    if CHECKOUT is None or not (CHECKOUT / ".git").exists():
        return None
    head = (_git("rev-parse", "HEAD") or "").strip()
    if not head:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if status is None or status.strip() else "")


def provenance() -> dict[str, str | None]:
    return {"fp4moe_version": package_version(), "fp4moe_commit": checkout_commit()}


def version_line() -> str:
    commit = checkout_commit()
    where = f"commit {commit}" if commit else "installed package (no git checkout)"
    return f"fp4moe-gate {package_version()} ({where}); data {data_dir()}"
