"""``fp4moe-gate aiter-bisect`` (``fp4moe.targets.aiter.bisect``).

CPU tier (no git, no child): the binary search with ``git bisect skip`` semantics on indices --
every position of the first bad commit found in at most ceil(log2 n) probes, a skipped commit
never probed again, skips next to the answer leave the candidates; the oracle that wires
aiter-check (``--check`` matching, exit 2 -> skip); the pass-through options (those the
bisection sets refused).

Slow tier: a git repository the test builds -- a small tree committed N times, the bad edit at
commit k, one commit that cannot be judged -- bisected through the command with a stand-in
oracle (the documented hook: the engine takes ``oracle(commit, tree) -> Verdict``; the command's
``aiter_check_oracle`` is replaced): it names k, prints the steps, reproduces; the fix direction
(``--find fix``); ends that do not differ, a verdict that does not reproduce, skips that leave
several candidates and an end off the first-parent history: exit 2 naming why."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from fp4moe.commands import aiter_bisect as cmd
from fp4moe.gates import aiter_check as ac
from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter import bisect as b
from fp4moe.targets.aiter.results import CheckResult as R
from fp4moe.targets.aiter.results import Result


def _probe(states: list[str], log: list[int]):
    def probe(i: int) -> str:
        log.append(i)
        return states[i]
    return probe


@pytest.mark.parametrize("n", [1, 2, 7, 64, 101])
def test_search_finds_every_position_in_log2_probes(n):
    for k in range(n):  # the first "new" index; the end n-1 is known new, -1 known old
        log: list[int] = []
        lo, hi = b.search(n, _probe(["old"] * k + ["new"] * (n - k), log))
        assert (lo, hi) == (k - 1, k)
        assert len(log) <= math.ceil(math.log2(n)) if n > 1 else not log


def test_a_skipped_commit_is_not_probed_again_and_the_search_goes_round_it():
    n, k = 64, 40
    states = ["old"] * k + ["new"] * (n - k)
    for skipped in (31, 38, 47, 41):  # the first midpoint, two below k, above, next above it
        st = list(states)
        st[skipped] = "skip"
        log: list[int] = []
        assert b.search(n, _probe(st, log)) == (k - 1, k), skipped
        assert log.count(skipped) <= 1 and len(log) <= math.ceil(math.log2(n)) + 2


def test_skips_next_to_the_answer_leave_the_candidates():
    n, k = 16, 9
    st = ["old"] * k + ["new"] * (n - k)
    st[8] = st[9] = "skip"  # the last old and the first new cannot be judged
    lo, hi = b.search(n, _probe(st, []))
    assert (lo, hi) == (7, 10)  # one of 8, 9, 10


def test_search_refuses_an_answer_that_is_no_state():
    with pytest.raises(ValueError, match="'bad'"):
        b.search(8, lambda i: "bad")


# ---------------------------------------------------------------------- the aiter-check oracle
ROUTING = "kernel: routing sqrtsoftplus renorm x1.5 +bias E256 k6 T17: vs the reference top-k"


@pytest.mark.parametrize(("rows", "code", "pattern", "want"), [
    ([R(ROUTING, Result.FAIL, "17/17"), R("layout: x", Result.NA, "")], 1, "kernel: routing*", (b.BAD, (ROUTING,))),
    ([R(ROUTING, Result.PASS, ""), R("layout: x", Result.NA, "")], 1, "kernel: routing*", (b.GOOD, ())),
    ([R(ROUTING, Result.PASS, ""), R("layout: x", Result.NA, "")], 1, "routing", (b.GOOD, ())),  # substring
    ([R("layout: x", Result.NA, "")], 1, "kernel: routing*", (b.SKIP, ())),  # nothing it names ran
    ([R(ROUTING, Result.PASS, ""), R("layout: x", Result.NA, "")], 1, None, (b.BAD, ())),  # the exit code
    ([R(ROUTING, Result.PASS, "")], 0, None, (b.GOOD, ())),
    ([R("kernel: routing: not judged", Result.NOT_JUDGED, "routing.py: symbol 'x' missing")], 2, None, (b.SKIP, ())),
])
def test_oracle_reads_the_checks_it_is_asked_for(monkeypatch, tmp_path, rows, code, pattern, want):
    monkeypatch.setattr(ac, "check_aiter", lambda opts: ac.AiterCheckResult("t", None, rows, code))
    v = cmd.aiter_check_oracle(ac.AiterCheckOptions(), pattern)(None, tmp_path)
    assert (v.state, v.failing) == want and v.exit_code == code


def test_oracle_skips_a_tree_aiter_check_cannot_run(monkeypatch, tmp_path):
    def cannot(opts):
        raise GateCannotRun("csrc/opus_moe/opus_moe_common.py: no such file")
    monkeypatch.setattr(ac, "check_aiter", cannot)
    v = cmd.aiter_check_oracle(ac.AiterCheckOptions(), None)(None, tmp_path)
    assert (v.state, v.exit_code) == (b.SKIP, 2) and "opus_moe_common.py" in v.detail


def test_pass_through_options_parse_with_aiter_checks_parser_and_the_owned_ones_are_refused():
    o = cmd.check_options(["--no-dispatch", "--kernel-jobs", "routing", "--layout-grid", "reduced"], 300.0)
    assert (o.dispatch, o.kernel_jobs, o.layout_grid, o.timeout_s, o.aiter_src) == (False, ("routing",), "reduced", 300.0, None)
    with pytest.raises(ValueError, match="--base-src"):
        cmd.check_options(["--base-src=/old"], None)


# ---------------------------------------------------------------------- slow: a repository built here
N, K, UNJUDGED = 24, 15, 9  # commits 1..N; the bad edit lands in commit K; commit UNJUDGED cannot be judged


def _git(repo, *args, env=None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A toy aiter tree committed N times; ``aiter/ops/topk.py`` holds ``MASK = "sorted"`` up to
    commit K-1 and ``"position"`` (the bug) from K; commit UNJUDGED has a file the oracle cannot
    read; a side branch merged in keeps the first-parent history honest. sha of commit i:
    ``shas[i]`` (``shas[0]``: the root)."""
    r = tmp_path_factory.mktemp("aiter-git")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(r), "PATH": "/usr/bin:/bin"}
    _git(r, "init", "-q", "-b", "main", env=env)
    (r / "aiter" / "ops").mkdir(parents=True)
    (r / "csrc").mkdir()
    (r / "op_tests").mkdir()
    (r / "op_tests" / "big.txt").write_text("not archived\n")
    shas = []
    for i in range(N + 1):
        (r / "aiter" / "ops" / "topk.py").write_text(f'MASK = "{"position" if i >= K else "sorted"}"\nREV = {i}\n')
        (r / "csrc" / "enum.h").write_text("broken\n" if i == UNJUDGED else "ok\n")
        _git(r, "add", "-A", env=env)
        _git(r, "commit", "-qm", f"commit {i}" + (" [bad edit]" if i == K else ""),
             env={**env, "GIT_COMMITTER_DATE": f"2026-05-{1 + i:02d}T12:00:00Z", "GIT_AUTHOR_DATE": f"2026-05-{1 + i:02d}T12:00:00Z"})
        shas.append(_git(r, "rev-parse", "HEAD"))
    return r, shas


def _oracle(seen: list, flaky_at: str | None = None, invert: bool = False):
    """Bad when topk.py masks by position (``invert``: when it does not); skip where csrc/enum.h
    is broken; ``flaky_at``: that commit answers the other way on its second run."""
    count: dict[str, int] = {}

    def oracle(commit, tree):
        assert not (tree / "op_tests").exists() and (tree / "aiter" / "ops" / "topk.py").is_file()
        seen.append(commit.sha)
        count[commit.sha] = count.get(commit.sha, 0) + 1
        if (tree / "csrc" / "enum.h").read_text() == "broken\n":
            return b.Verdict(b.SKIP, 2, (), "csrc/enum.h: cannot be read")
        bad = ('MASK = "position"' in (tree / "aiter" / "ops" / "topk.py").read_text()) != invert
        if flaky_at == commit.sha and count[commit.sha] == 2:
            bad = not bad
        return b.Verdict(b.BAD if bad else b.GOOD, int(bad), ("kernel: routing E256 k6",) if bad else ())
    return oracle


@pytest.fixture
def stand_in(monkeypatch):
    seen: list[str] = []
    box = {"flaky_at": None, "invert": False}
    monkeypatch.setattr(cmd, "aiter_check_oracle", lambda opts, pattern: _oracle(seen, box["flaky_at"], box["invert"]))
    return seen, box


@pytest.mark.slow
def test_bisect_names_the_bad_commit_past_an_unjudgeable_one(repo, stand_in, gate, tmp_path):
    r, shas = repo
    seen, _ = stand_in
    out = tmp_path / "bisect.json"
    res = gate("aiter-bisect", "--aiter-git", r, "--good", shas[1], "--bad", shas[N], "--json", out, inputs=[r])
    assert res.rc == 0, res.err
    assert f"first bad commit: {shas[K]} (2026-05-{1 + K:02d}) commit {K} [bad edit]" in res.out
    assert "checks that flip: kernel: routing E256 k6" in res.out and "reproduced" in res.out
    rec = json.loads(out.read_text())
    assert rec["culprit"]["sha"] == shas[K] and rec["parent"]["sha"] == shas[K - 1] and rec["commits"] == N - 1
    assert rec["find"] == "regression" and rec["check"] is None and rec["aiter_check_args"] == []
    roles = [s["role"] for s in rec["steps"]]
    assert roles[:2] == ["good end", "bad end"] and roles[-2:] == ["reproduce", "reproduce"]
    assert [s["commit"]["sha"] for s in rec["steps"][-2:]] == [shas[K], shas[K - 1]]
    # the search itself: at most ceil(log2(N-1)) + 1 probes (one skip) between the ends and the reproduction
    assert len(roles) - 4 <= math.ceil(math.log2(N - 1)) + 1
    assert seen.count(shas[K]) == 2 and seen.count(shas[K - 1]) == 2


@pytest.mark.slow
def test_the_unjudgeable_commit_is_skipped_when_the_search_lands_on_it(repo, stand_in, gate):
    r, shas = repo
    seen, _ = stand_in
    # the range 1..17: the first midpoint is commit 9, which cannot be judged
    res = gate("aiter-bisect", "--aiter-git", r, "--good", shas[1], "--bad", shas[17], inputs=[r])
    assert res.rc == 0, res.err
    assert shas[UNJUDGED] in seen and seen.count(shas[UNJUDGED]) == 1 and f"first bad commit: {shas[K]}" in res.out
    assert f"{shas[UNJUDGED][:10]} (2026-05-{1 + UNJUDGED:02d}) commit {UNJUDGED}: skip (exit 2; csrc/enum.h: cannot be read)" in res.out


@pytest.mark.slow
def test_find_fix_names_the_first_good_commit(repo, stand_in, gate):
    r, shas = repo
    _, box = stand_in
    box["invert"] = True  # a check the edit at K fixes: bad before K, good from K
    res = gate("aiter-bisect", "--aiter-git", r, "--bad", shas[1], "--good", shas[N], "--find", "fix", inputs=[r])
    assert res.rc == 0, res.err
    assert f"first good commit: {shas[K]}" in res.out and "checks that flip: kernel: routing E256 k6" in res.out


@pytest.mark.slow
@pytest.mark.parametrize(("case", "words"), [
    ("same", ("--good", "judged bad", "do not differ")),
    ("flaky", ("not reproduced",)),
    ("order", ("has no commit after",)),
    ("unknown", ("--good nosuchrev", "not a commit")),
    ("bad end unjudged", ("--bad", "could not be judged", "csrc/enum.h")),
])
def test_exit_2_when_no_commit_can_be_named(repo, stand_in, gate, case, words):
    r, shas = repo
    _, box = stand_in
    good, bad = {"same": (shas[K + 1], shas[N]), "order": (shas[N], shas[1]), "unknown": ("nosuchrev", shas[N]),
                 "bad end unjudged": (shas[1], shas[UNJUDGED])}.get(case, (shas[1], shas[N]))
    box["flaky_at"] = shas[K] if case == "flaky" else None
    gate("aiter-bisect", "--aiter-git", r, "--good", good, "--bad", bad, inputs=[r]).cannot_run(*words)


@pytest.mark.slow
def test_skips_next_to_the_answer_leave_candidates_through_the_engine(repo, tmp_path):
    r, shas = repo
    seen: list[str] = []
    inner = _oracle(seen)

    def oracle(commit, tree):  # commits K-1 and K cannot be judged either
        return b.Verdict(b.SKIP, 2, (), "x") if commit.sha in (shas[K - 1], shas[K]) else inner(commit, tree)
    res = b.bisect(r, shas[1], shas[N], oracle, scratch=tmp_path, log=lambda s: None)
    assert res.culprit is None and [c.sha for c in res.candidates] == shas[K - 1:K + 2] and "is one of" in res.reason
    assert not list(tmp_path.iterdir())  # the scratch folder is left empty


@pytest.mark.slow
@pytest.mark.shared
def test_the_command_bisects_with_aiter_check_itself(tmp_path, gate):
    """The real oracle: a toy aiter tree (e4048607's ``fused_moe.py`` and ``ops/shuffle.py``)
    committed 7 times; commit 3 has a syntax error in ``fused_moe.py`` (aiter-check exit 2: skipped),
    commit 5 drops ``intermediate_pad`` from ``fused_moe``'s signature (an ``absent`` row, a FAIL
    with ``--require "api: fused_moe"``: the caller depends on it).
    aiter-check runs only its (a)-(c) groups (``-- --no-kernels --no-dispatch --no-differential
    --layout-grid reduced``): ~5 s CPU a commit."""
    from fp4moe.infra.paths import shared_dir

    src = (shared_dir() or tmp_path / "none") / "aiter" / "e4048607" / "aiter"
    if not src.is_dir():
        pytest.skip(f"{src}: no aiter e4048607 tree (../shared)")
    r = tmp_path / "aiter-git"
    (r / "aiter" / "ops").mkdir(parents=True)
    fused, shuffle = (src / "fused_moe.py").read_text(), (src / "ops" / "shuffle.py").read_text()
    assert "    intermediate_pad=0,\n" in fused
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    _git(r, "init", "-q", "-b", "main", env=env)
    (r / "aiter" / "ops" / "shuffle.py").write_text(shuffle)
    shas = []
    for i in range(7):
        text = fused.replace("    intermediate_pad=0,\n", "") if i >= 5 else fused
        (r / "aiter" / "fused_moe.py").write_text(text + f"# rev {i}\n" + ("def broken(:\n" if i == 3 else ""))
        _git(r, "add", "-A", env=env)
        _git(r, "commit", "-qm", f"rev {i}", env=env)
        shas.append(_git(r, "rev-parse", "HEAD"))
    res = gate("aiter-bisect", "--aiter-git", r, "--good", shas[0], "--bad", shas[6], "--check", "api: fused_moe", "--",
               "--no-kernels", "--no-dispatch", "--no-differential", "--layout-grid", "reduced", "--require", "api: fused_moe",
               inputs=[r])
    assert res.rc == 0, res.out[-3000:] + res.err
    assert f"first bad commit: {shas[5]}" in res.out and "checks that flip: api: fused_moe" in res.out
    assert f"{shas[3][:10]}" in res.out and ": skip (exit 2" in res.out
