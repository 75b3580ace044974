"""No ``assert`` statement decides a verdict (issue #48 item 5): ``python -O`` and
``PYTHONOPTIMIZE=1`` strip them, and a broken reference would then pass. selfcheck's checks
raise :class:`CheckFailed` explicitly; every ``assert`` left in ``fp4moe/`` is listed below with
why it decides no verdict (a new one fails this test until it is made an explicit check or
listed)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from fp4moe.gates import selfcheck as sc
from fp4moe.infra.paths import REPO_ROOT

#: (file, the assert's source) -> why it decides no verdict. Both are in folders this change does
#: not own (targets/aiter): listed in the report of issue #48, left to their owners.
NOT_A_VERDICT = {
    ("fp4moe/targets/aiter/backend.py", "assert not unknown"): "the gate's own keyword table is complete (a bug of ours)",
    ("fp4moe/targets/aiter/source.py", "assert self._zip is not None"): "a type narrowing: a source is a folder or a zip",
}


def _asserts():
    for path in sorted((REPO_ROOT / "fp4moe").rglob("*.py")):
        text = path.read_text()
        if not re.search(r"\bassert\b", text):  # parse only where one can be (milliseconds, not seconds)
            continue
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                yield path.relative_to(REPO_ROOT).as_posix(), f"assert {ast.unparse(node.test)}", node.lineno


def test_no_assert_statement_decides_a_verdict():
    found = {(f, src): line for f, src, line in _asserts()}
    unlisted = [f"{f}:{line}: {src}" for (f, src), line in found.items() if (f, src) not in NOT_A_VERDICT]
    assert not unlisted, "make these explicit checks (raise / return a failure), or list why they decide nothing"
    assert not [f for f, _ in found if f.endswith("gates/selfcheck.py")]


def test_a_broken_codec_is_a_failed_check_raised_explicitly(monkeypatch):
    good = sc.mxfp4.decode_e2m1
    monkeypatch.setattr(sc.mxfp4, "decode_e2m1", lambda c: good(c) + (c == 3))  # code 3: 1.5 -> 2.5
    with pytest.raises(sc.CheckFailed, match=r"E2M1 decode .*2\.5"):
        sc._check_codec()
    monkeypatch.setattr(sc, "CHECKS", (("codec", sc._check_codec),))
    res = sc.selfcheck()
    assert res.failed == ["codec"] and "E2M1 decode" in res.checks[0]["detail"]


def test_a_broken_e8m0_byte_is_named(monkeypatch):
    good = sc.e8m0.decode
    monkeypatch.setattr(sc.e8m0, "decode", lambda b: good(b) * (1 + (b == 130)))
    with pytest.raises(sc.CheckFailed, match=r"E8M0 decode: byte 130 -> 16\.0"):
        sc._check_codec()


_BROKEN = (
    "import sys, fp4moe.mx.mxfp4 as m\n"
    "good = m.decode_e2m1\n"
    "m.decode_e2m1 = lambda c: good(c) + (c == 3)\n"
    "from fp4moe.commands.main import main\n"
    "sys.exit(main(['selfcheck']))\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["plain", "-O", "PYTHONOPTIMIZE=1"])
def test_optimized_python_gives_the_same_verdict(how, tmp_path):
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONOPTIMIZE": "1" if how.startswith("PYTHONOPT") else ""}
    flags = [how] if how.startswith("-O") else []
    stripped = subprocess.run([sys.executable, *flags, "-c", "assert False"], env=env, capture_output=True)
    assert stripped.returncode == (1 if how == "plain" else 0)  # the mode really strips asserts
    r = subprocess.run([sys.executable, *flags, "-c", _BROKEN], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "FAIL  codec" in r.stdout and "E2M1 decode" in r.stdout
