"""The child harness: the child computes, the parent validates and decides
(``fp4moe.infra.harness``). One table of misbehaving children, each a named cannot-run."""

import stat
import time
from pathlib import Path

import pytest
import torch

from fp4moe.infra import harness
from fp4moe.infra.errors import GateCannotRun

CHILD = str(Path(__file__).with_name("harness_child.py"))
SCHEMA = harness.RecordSchema("harness-test", 1, {"mode": str, "n": int})


def _x() -> torch.Tensor:
    return torch.randn(5, 3, generator=torch.Generator().manual_seed(7))


def _run(mode: str, timeout_s: float = 60.0, **kw):
    return harness.run_judged(CHILD, [mode], label=f"test child ({mode})", timeout_s=timeout_s, schema=SCHEMA,
                              inputs={"inp": {"x": _x()}}, **kw)


def _outcome(mode: str):
    try:
        return _run(mode)
    except GateCannotRun as e:
        return e


#: run in the CPU tier (one child each, ~1-2 s); the rest in the slow step
FAST_FAULTS = {"raise", "tamper", "forge"}


@pytest.fixture(scope="module")
def fast_children() -> dict:
    """The CPU tier's children (``ok`` and :data:`FAST_FAULTS`), started side by side: each is
    one child doing one thing, independent of the others (own scratch, inputs and outputs), and
    most of each is its interpreter's start; every test below still judges its own child."""
    from concurrent.futures import ThreadPoolExecutor

    modes = ["ok", *sorted(FAST_FAULTS)]
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(modes, pool.map(_outcome, modes)))


def test_outputs_come_back_validated_and_bitwise(fast_children):
    out = fast_children["ok"]
    assert not isinstance(out, GateCannotRun), out
    assert out.record == {"mode": "ok", "n": 15}
    assert torch.equal(out.tensors("out")["y"], _x() * 2)
    assert out.json("meta") == {"rows": 5}
    assert out.names() == ["meta", "out"]
    with pytest.raises(GateCannotRun, match="no output 'nope'"):
        out.tensors("nope")


# mode -> what the one cannot-run line must say
FAULTS = {
    "raise": r"test child \(raise\): ValueError while running mode raise; it said: \"boom x",
    "exit": r"called sys.exit\(0\) while running mode exit",
    "osexit": r"exited 0 without a result record while running mode osexit",
    "tamper": r"output 'out' was changed after the harness wrote it",
    "symlink": r"output 'out' is a symbolic link",
    "forge": r"not authenticated",
    "schema": r"unknown key\(s\) \['extra'\]",
    "no-finish": r"ended without a result while running mode no-finish",
    "write-input": r"PermissionError while running mode write-input",
}


@pytest.mark.parametrize("mode", [m if m in FAST_FAULTS else pytest.param(m, marks=pytest.mark.slow)
                                  for m in sorted(FAULTS)])
def test_a_misbehaving_child_is_one_named_bounded_line(mode, request):
    got = request.getfixturevalue("fast_children")[mode] if mode in FAST_FAULTS else _outcome(mode)
    assert isinstance(got, GateCannotRun), f"mode {mode}: the child's outputs were accepted: {got!r}"
    line = str(got)
    assert "\n" not in line and len(line) <= harness.MAX_LINE_CHARS
    import re

    assert re.search(FAULTS[mode], line), line


@pytest.mark.slow
def test_a_hung_child_is_killed_at_the_one_deadline_and_named():
    d = harness.Deadline(1.5)
    t0 = time.monotonic()
    with pytest.raises(GateCannotRun, match=r"killed at the deadline \(--timeout 1.5 s.*while running mode hang"):
        _run("hang", timeout_s=600, deadline=d)
    assert time.monotonic() - t0 < 1.5 + 10  # the kill grace, not the child's own 600 s
    with pytest.raises(GateCannotRun, match=r"--timeout 1.5: spent before test child \(ok\) could start"):
        _run("ok", deadline=d)


def test_schema_names_missing_keys_and_wrong_types():
    s = harness.RecordSchema("r", 2, {"a": int, "b": str}, optional=frozenset({"b"}))
    assert s.validate({"schema": "r", "schema_version": 2, "a": 1}, "L") == {"a": 1}
    for rec, msg in (({"schema": "r", "schema_version": 1, "a": 1}, "version 1, the judge reads 'r' version 2"),
                     ({"schema": "r", "schema_version": 2}, r"missing key\(s\) \['a'\]"),
                     ({"schema": "r", "schema_version": 2, "a": "1"}, "'a' is str, not int"),
                     ({"schema": "r", "schema_version": 2, "a": True}, "'a' is bool, not int")):
        with pytest.raises(GateCannotRun, match=msg):
            s.validate(rec, "L")


def test_inputs_are_read_only_files_and_the_env_is_scratch(tmp_path):
    env = harness.scratch_env(tmp_path, writable=[tmp_path / "w"], environ={"PYTHONPATH": "/x", "HOME": "/h"})
    assert env["HOME"].startswith(str(tmp_path)) and env["TMPDIR"] == str(tmp_path)
    assert env["PYTHONPATH"].endswith(":/x") and env["FP4MOE_WRITABLE"].split(":") == [str(tmp_path), str(tmp_path / "w")]
    harness._write_inputs(tmp_path / "in", {"a": {"x": _x()}})
    assert not (tmp_path / "in" / "a.safetensors").stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    with pytest.raises(ValueError, match="input name"):
        harness._write_inputs(tmp_path / "in2", {"../a": {"x": _x()}})


def test_quote_is_one_bounded_line():
    q = harness.quote("a\nb" + "c" * 1000, 50)
    assert q.startswith('"a b') and q.endswith('..."') and len(q) == 52
