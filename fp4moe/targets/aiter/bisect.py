"""A bisection over aiter's first-parent history with a pluggable oracle (``fp4moe-gate
aiter-bisect`` wires ``aiter-check`` in; a test passes a stand-in).

- :class:`Verdict` -- what the oracle says of one tree: ``good``, ``bad`` or ``skip`` (could not
  judge: ``git bisect skip``), with the failing checks and an exit code;
- :func:`first_parent` -- the commits of ``git rev-list --first-parent OLD..NEW``, oldest first;
- :func:`archive` -- one commit's :data:`ARCHIVE_PATHS` ``git archive``d into a scratch folder;
- :func:`search` -- the binary search with skip semantics, on indices (no git);
- :func:`bisect` -- both ends judged, the search, and the culprit's verdict and its parent's
  reproduced on a second run before it is named: :class:`BisectResult`.

``find="regression"``: ``good`` is the older end, ``bad`` the newer; the result is the first bad
commit. ``find="fix"``: ``bad`` is the older end, ``good`` the newer; the result is the first good
commit (where a fix landed).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: what aiter-check reads of a tree: the package and the C++ sources beside it (the dispatch
#: group's enums and Opus wrappers); tests, docs and 3rdparty stay out of the scratch folder
ARCHIVE_PATHS = ("aiter", "csrc")
GOOD, BAD, SKIP = "good", "bad", "skip"
GIT_TIMEOUT_S = 120


@dataclass(frozen=True)
class Verdict:
    state: str  # GOOD, BAD or SKIP
    exit_code: int | None = None  # the oracle's exit code (aiter-check's), where it has one
    failing: tuple[str, ...] = ()  # the checks that fail (those --check names, where given)
    detail: str = ""  # one line: why (the exit-2 line of a skip)


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str
    subject: str

    def label(self) -> str:
        return f"{self.sha[:10]} ({self.date}) {self.subject}"


@dataclass
class Step:
    role: str  # "good end", "bad end", "step", "reproduce"
    commit: Commit
    state: str
    exit_code: int | None
    failing: list[str]
    detail: str
    seconds: float


@dataclass
class BisectResult:
    find: str  # "regression" or "fix"
    culprit: Commit | None  # the first bad (regression) / first good (fix) commit, reproduced
    parent: Commit | None
    flips: list[str]  # the checks that fail on one side of the culprit and not the other
    candidates: list[Commit]  # where skips leave more than one commit possible
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0
    commits: int = 0  # first-parent commits in the range (the newer end included)
    reason: str = ""  # why no culprit is named (exit 2)

    def to_dict(self) -> dict:
        return asdict(self)


class BisectError(RuntimeError):
    """The bisection could not name a commit (the command exits 2 with this line)."""


def _git(git_dir: str | Path, *args: str, binary: bool = False):
    r = subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, timeout=GIT_TIMEOUT_S, text=not binary)
    if r.returncode != 0:
        err = r.stderr if not binary else r.stderr.decode(errors="replace")
        raise BisectError(f"git {' '.join(args)}: {' '.join(err.split())[:300] or f'exit {r.returncode}'}")
    return r.stdout


def commit(git_dir: str | Path, rev: str, option: str) -> Commit:
    """``rev`` resolved to a commit of ``git_dir`` (BisectError naming ``option`` otherwise)."""
    try:
        sha = _git(git_dir, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except BisectError as e:
        raise BisectError(f"{option} {rev}: not a commit of {git_dir}") from e
    date, subject = _git(git_dir, "log", "-1", "--format=%cs%x00%s", sha).rstrip("\n").split("\0", 1)
    return Commit(sha, date, subject)


def first_parent(git_dir: str | Path, old: Commit, new: Commit, old_option: str, new_option: str) -> list[Commit]:
    """The commits of ``rev-list --first-parent old..new``, oldest first (``new`` last). ``old``
    must lie on ``new``'s first-parent chain (each step's parent is then the step before)."""
    out = _git(git_dir, "log", "--first-parent", "--format=%H%x00%P%x00%cs%x00%s", f"{old.sha}..{new.sha}")
    rows = [ln.split("\0", 3) for ln in out.splitlines() if ln]
    if not rows:
        raise BisectError(f"{new_option} {new.sha[:10]} has no commit after {old_option} {old.sha[:10]} on its first-parent history")
    if rows[-1][1].split()[0] != old.sha:
        raise BisectError(f"{old_option} {old.sha[:10]} is not on the first-parent history of {new_option} {new.sha[:10]}")
    return [Commit(sha, date, subject) for sha, _parents, date, subject in reversed(rows)]


def archive(git_dir: str | Path, sha: str, dest: Path, paths: tuple[str, ...] = ARCHIVE_PATHS) -> Path:
    """``git archive sha -- paths`` (those of ``paths`` the commit has) unpacked into ``dest``."""
    have = [p for p in _git(git_dir, "ls-tree", "--name-only", sha, "--", *paths).split() if p]
    if not have:
        raise BisectError(f"{sha[:10]}: none of {', '.join(paths)} in that commit")
    dest.mkdir(parents=True)
    tar = _git(git_dir, "archive", "--format=tar", sha, "--", *have, binary=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True, timeout=GIT_TIMEOUT_S)
    return dest


def search(n: int, probe: Callable[[int], str]) -> tuple[int, int]:
    """Binary search over indices 0..n-1 whose end ``n-1`` is known ``new`` and whose (virtual)
    ``-1`` is known ``old``; ``probe(i)`` answers ``"old"``, ``"new"`` or ``"skip"``. A skipped
    index is never probed again; the next probe is the untested, unskipped index nearest the
    middle (``git bisect skip``). Returns ``(lo, hi)``: the last index known old and the first
    known new -- the answer is ``hi`` when ``hi == lo + 1``, else one of ``lo+1 .. hi`` (all
    between skipped)."""
    lo, hi, skipped = -1, n - 1, set()
    while True:
        left = [i for i in range(lo + 1, hi) if i not in skipped]
        if not left:
            return lo, hi
        mid = (lo + hi) / 2
        i = min(left, key=lambda j: (abs(j - mid), j))
        ans = probe(i)
        if ans == "new":
            hi = i
        elif ans == "old":
            lo = i
        elif ans == "skip":
            skipped.add(i)
        else:
            raise ValueError(f"probe({i}) answered {ans!r}: not old/new/skip")


def bisect(git_dir: str | Path, good: str, bad: str, oracle: Callable[[Commit, Path], Verdict], *, find: str = "regression",
           scratch: str | Path | None = None, log: Callable[[str], None] = print) -> BisectResult:
    """Judge both ends, search the first-parent range between them, and name the first commit in
    the newer end's state only when its verdict and its parent's reproduce on a second run.
    ``oracle(commit, tree)`` judges the tree ``git archive``d for ``commit``. Returns the result;
    ``culprit`` is None (and ``reason`` says why) where none could be named."""
    if find not in ("regression", "fix"):
        raise ValueError(f"find={find!r}: regression or fix")
    t0 = time.monotonic()
    new_state, old_state = (BAD, GOOD) if find == "regression" else (GOOD, BAD)
    old_opt, new_opt = ("--good", "--bad") if find == "regression" else ("--bad", "--good")
    old_c = commit(git_dir, good if find == "regression" else bad, old_opt)
    new_c = commit(git_dir, bad if find == "regression" else good, new_opt)
    revs = first_parent(git_dir, old_c, new_c, old_opt, new_opt)
    res = BisectResult(find, None, None, [], [], commits=len(revs))
    root = Path(tempfile.mkdtemp(prefix="aiter-bisect-", dir=scratch))

    def run(c: Commit, role: str) -> Verdict:
        t = time.monotonic()
        tree = root / f"{len(res.steps):03d}-{c.sha[:10]}"
        try:
            archive(git_dir, c.sha, tree)
            v = oracle(c, tree)
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        st = Step(role, c, v.state, v.exit_code, list(v.failing), v.detail, round(time.monotonic() - t, 1))
        res.steps.append(st)
        shown = f"; failing: {', '.join(v.failing[:3])}{' ...' if len(v.failing) > 3 else ''}" if v.failing else ""
        log(f"[{len(res.steps):2d}] {role:<9} {c.label()}: {v.state} (exit {v.exit_code}{shown}"
            f"{'; ' + v.detail if v.state == SKIP and v.detail else ''}) {st.seconds:.0f} s")
        return v

    def finish(reason: str = "") -> BisectResult:
        res.reason, res.seconds = reason, round(time.monotonic() - t0, 1)
        return res

    try:
        vo, vn = run(old_c, f"{old_state} end"), run(new_c, f"{new_state} end")
        if vo.state == SKIP or vn.state == SKIP:
            which = (old_opt, old_c) if vo.state == SKIP else (new_opt, new_c)
            return finish(f"{which[0]} {which[1].sha[:10]} could not be judged: {(vo if vo.state == SKIP else vn).detail}")
        if vo.state != old_state or vn.state != new_state:
            return finish(f"{old_opt} {old_c.sha[:10]} judged {vo.state} and {new_opt} {new_c.sha[:10]} judged {vn.state}: "
                          f"the ends do not differ as --find {find} needs ({old_opt} {old_state}, {new_opt} {new_state})")

        def probe(i: int) -> str:
            v = run(revs[i], "step")
            return SKIP if v.state == SKIP else "new" if v.state == new_state else "old"

        lo, hi = search(len(revs), probe)
        if hi != lo + 1:
            res.candidates = revs[lo + 1:hi + 1]
            return finish(f"{hi - lo - 1} commit(s) before {revs[hi].sha[:10]} could not be judged: the first "
                          f"{new_state} commit is one of {', '.join(c.sha[:10] for c in res.candidates)}")
        culprit, parent = revs[hi], (revs[lo] if lo >= 0 else old_c)
        again_c, again_p = run(culprit, "reproduce"), run(parent, "reproduce")
        if again_c.state != new_state or again_p.state != old_state:
            return finish(f"not reproduced: {culprit.sha[:10]} judged {again_c.state} (first {new_state}) and its parent "
                          f"{parent.sha[:10]} {again_p.state} (first {old_state}) on the second run: not named")
        res.culprit, res.parent = culprit, parent
        first_bad, first_good = (again_c, again_p) if find == "regression" else (again_p, again_c)
        res.flips = [k for k in first_bad.failing if k not in set(first_good.failing)]
        return finish()
    finally:
        shutil.rmtree(root, ignore_errors=True)
