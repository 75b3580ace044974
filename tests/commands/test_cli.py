"""``fp4moe-gate`` (``fp4moe.commands.main``): the default job prints the pad table; every listed
subcommand module exists; exit codes follow fp4moe.infra.errors."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import re
import sys
import types

import pytest

from fp4moe.commands import main as cli
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, GateCannotRun

# (model, tp, ep, experts, align, I_p, padded, pad): the examples, by hand
TABLE_ROWS = [
    ("dsv4-pro", 8, 1, 384, 128, 384, 384, 0),
    ("dsv4-pro", 8, 1, 384, 256, 384, 512, 128),
    ("dsv4-pro", 16, 1, 384, 128, 192, 256, 64),
    ("dsv4-pro", 16, 1, 384, 256, 192, 256, 64),
    ("dsv4-flash", 16, 1, 256, 256, 128, 256, 128),
]


def test_no_arguments_exits_0_and_prints_the_pad_table(capsys):
    rc = cli.main([])
    out = capsys.readouterr().out
    assert rc == EXIT_OK, out
    rows = {
        tuple(int(v) if v.isdigit() else v for v in m.groups())
        for m in re.finditer(r"^(dsv4-\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", out, re.M)
    }
    assert len(rows) == 14 * 2  # every catalogue row x align {128, 256}
    for row in TABLE_ROWS:
        assert row in rows, row
    assert "selfcheck: ok" in out and "FAIL" not in out


def test_selfcheck_json_pad_table(capsys):
    assert cli.main(["selfcheck", "--json", "-"]) == EXIT_OK
    table = json.loads(capsys.readouterr().out)  # the whole stdout is one JSON document
    assert table["ok"] is True and [c["name"] for c in table["checks"]] == ["codec", "layouts", "reference"]
    got = {(r["model"], r["tp"], r["ep"], r["experts"], r["align"], r["I_p"], r["padded"], r["pad"]) for r in table["pad_table"]}
    assert set(TABLE_ROWS) <= got and len(got) == 28


@pytest.mark.parametrize("name", cli.SUBCOMMAND_MODULES)
def test_every_listed_subcommand_module_exists_and_registers(name):
    assert importlib.util.find_spec(name) is not None, f"{name} is listed in cli.SUBCOMMAND_MODULES but does not exist"
    assert callable(getattr(importlib.import_module(name), "register", None)), f"{name} defines no register(subparsers)"


def test_console_script_points_at_main(pyproject):
    """Read from pyproject.toml, so it holds also where the checkout is not pip-installed."""
    project = pyproject["project"]
    assert project["name"] == "fp4-moe-gate"
    assert project["scripts"] == {"fp4moe-gate": "fp4moe.commands.entry:run"}


def _fake_gate(monkeypatch, raise_exc):
    """Register a throwaway subcommand 'boom' whose func raises ``raise_exc``."""
    mod = types.ModuleType("fp4moe_test_fake_gate")
    mod.__spec__ = importlib.machinery.ModuleSpec(mod.__name__, None)

    def run(args):
        raise raise_exc

    def register(sub):
        sub.add_parser("boom").set_defaults(func=run)

    mod.register = register
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ("fp4moe.commands.selfcheck", mod.__name__))


@pytest.mark.parametrize(
    "exc,msg",
    [(GateCannotRun("server down"), "boom: cannot run: server down"), (ValueError("--tp 5 is bad"), "boom: error: --tp 5 is bad")],
    ids=["cannot-run", "bad-option"],
)
def test_cannot_run_and_bad_input_exit_2_with_the_reason(monkeypatch, capsys, exc, msg):
    _fake_gate(monkeypatch, exc)
    assert cli.main(["boom"]) == EXIT_CANNOT_RUN
    assert msg in capsys.readouterr().err
