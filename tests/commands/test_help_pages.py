"""Every subcommand's --help page speaks to its user: what it judges, what it reads, what each
exit code means; no module paths, no pointer to the source for the meaning of an option."""

from __future__ import annotations

import argparse
import re

import pytest

from fp4moe.commands import main as cli

#: a dotted module path of this package (``fp4moe.gates.x``), which a user cannot act on
MODULE_PATH = re.compile(r"\bfp4moe\.[a-z_]+\.[a-z_]")


def _leaves(parser: argparse.ArgumentParser, prefix: str = ""):
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return [(prefix.strip(), parser)]
    return [leaf for name, p in sorted(sub.choices.items()) for leaf in _leaves(p, f"{prefix} {name}")]


LEAVES = _leaves(cli.build_parser())


def test_every_command_is_listed():
    names = {name for name, _ in LEAVES}
    assert {"aiter-check", "sglang-check", "zoo", "footprint", "selfcheck", "perf compare", "perf ab"} <= names, names


@pytest.mark.parametrize("name,parser", LEAVES, ids=[n for n, _ in LEAVES])
def test_help_says_what_it_judges_its_inputs_and_its_exit_codes(name, parser):
    text = parser.format_help()
    assert "Inputs: " in text, name
    exits = text.split("exit codes:\n", 1)
    assert len(exits) == 2, f"{name}: no exit-codes section"
    codes = re.findall(r"^  ([012])  \S", exits[1], re.M)
    assert codes[0] == "0" and codes[-1] == "2" and codes == sorted(codes), (name, codes)
    assert "one line on stderr names" in " ".join(exits[1].split()), name


@pytest.mark.parametrize("name,parser", LEAVES, ids=[n for n, _ in LEAVES])
def test_help_names_no_module_path_and_no_docstring(name, parser):
    text = parser.format_help()
    assert not MODULE_PATH.search(text), (name, MODULE_PATH.search(text).group(0))
    assert "docstring" not in text, name
