"""``fp4moe-gate serve-bench``: options that would quietly mean something else (round-2 probes,
issue 21) are refused with one line naming them, before any request (no server is needed:
the base URL points at a closed loopback port)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reliability

pytest.importorskip("aiohttp", reason="[cpu tier] serve-bench needs aiohttp (pip install -e '.[serve]')")

BASE = ["serve-bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--prompts", "random"]


@pytest.mark.parametrize("extra, words", [
    (["--input-len", "0"], ["--input-len 0"]),
    (["--input-len", "-5"], ["--input-len -5"]),
    (["--stall-timeout", "0"], ["--stall-timeout 0"]),
    (["--request-timeout", "-1"], ["--request-timeout -1"]),
    (["--connect-timeout", "inf"], ["--connect-timeout inf"]),
], ids=["input-len-0", "input-len-negative", "stall-timeout-0", "request-timeout-negative", "connect-timeout-inf"])
def test_options_are_refused_naming_themselves(gate, extra, words):
    """Probes: ``--input-len 0`` measured 1024-token prompts; ``--stall-timeout 0`` and
    ``--request-timeout -1`` were accepted."""
    gate(*BASE, *extra).cannot_run(*words)


def test_json_and_markdown_naming_one_file_is_refused(gate, tmp_path):
    """Probe: ``--json X --markdown X`` let one output overwrite the other."""
    out = tmp_path / "x"
    gate(*BASE, "--json", out, "--markdown", tmp_path / "." / "x").cannot_run("--json", "--markdown", "same file")
    assert not out.exists()
