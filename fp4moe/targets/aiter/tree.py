"""An aiter tree of one revision, made from a git repository of ROCm/aiter (no work tree needed).

- :func:`archive_tree` -- ``git archive REV`` of what aiter-check reads (``aiter/`` and the
  ``csrc/`` files of ``dispatch.loader.REQUIRED_CSRC`` that revision has) into a folder;
- :func:`first_parent_revs` -- the first-parent commits of a branch in a date window, oldest
  first (with their dates), and :func:`spread` -- N of them evenly spaced.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

#: what aiter-check reads of a tree: the package, plus the csrc files the dispatch may import
ARCHIVED = ("aiter",)


def _git(git_dir: str | Path, *args: str, text: bool = True, timeout: float = 120):
    return subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, text=text, check=True, timeout=timeout).stdout


def archive_tree(git_dir: str | Path, rev: str, dest: str | Path) -> Path:
    """``dest`` holding ``aiter/`` (and the needed ``csrc/`` files) of ``rev``; returns ``dest``."""
    from fp4moe.targets.aiter.dispatch.loader import REQUIRED_CSRC

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    have = _git(git_dir, "ls-tree", "--name-only", rev, "--", *REQUIRED_CSRC).split()
    data = _git(git_dir, "archive", "--format=tar", rev, "--", *ARCHIVED, *have, text=False)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True, timeout=120)
    return dest


def first_parent_revs(git_dir: str | Path, branch: str = "main", since: str | None = None,
                      until_rev: str | None = None) -> list[tuple[str, str, str]]:
    """(short sha, commit date YYYY-MM-DD, subject) of ``branch``'s first-parent line up to
    ``until_rev`` (default the branch head), from ``since`` on; oldest first."""
    args = ["log", "--first-parent", "--format=%h%x09%cs%x09%s", until_rev or branch]
    if since:
        args.insert(2, f"--since={since}")
    out = [tuple(ln.split("\t", 2)) for ln in _git(git_dir, *args).splitlines() if ln.strip()]
    return list(reversed(out))


def spread(items: list, n: int) -> list:
    """``n`` items evenly spaced over ``items``, the first and the last included."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[-1]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]
