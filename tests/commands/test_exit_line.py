"""The one stderr line of ``fp4moe-gate``'s exit 2 (``fp4moe.commands.main``), at its edges: an
exception without a message is named by its type, the line's bound (``EXIT_LINE_CHARS - 100``
for the cause) exactly and one character past it, an interrupt with and without its signal's
words, and Ctrl-C while the subcommands load."""

from __future__ import annotations

import pytest

from fp4moe.commands import main as gate_main
from fp4moe.infra.errors import EXIT_CANNOT_RUN, GateCannotRun

CAUSE_CHARS = gate_main.EXIT_LINE_CHARS - 100


@pytest.mark.parametrize("exc, line", [(ValueError(), "ValueError"), (RuntimeError(), "RuntimeError: RuntimeError"),
                                       (GateCannotRun("  no  aiter\n tree "), "no aiter tree"),
                                       (OSError("disk\nfull"), "OSError: disk full")])
def test_a_cause_is_one_line_and_an_empty_one_is_named_by_its_type(exc, line):
    assert gate_main._one_line(exc) == line


@pytest.mark.parametrize("n, bounded", [(CAUSE_CHARS, False), (CAUSE_CHARS + 1, True)])
def test_the_cause_is_bounded_exactly_at_its_length(n, bounded):
    text = "".join(chr(ord("a") + i % 26) for i in range(n))
    got = gate_main._one_line(GateCannotRun(text))
    assert got == (text[: CAUSE_CHARS - 3] + "..." if bounded else text)
    assert len(got) == CAUSE_CHARS


@pytest.mark.parametrize("exc, text", [(KeyboardInterrupt(), "interrupted (SIGINT)"),
                                       (KeyboardInterrupt("signal   15"), "interrupted (signal 15)")])
def test_an_interrupt_says_which(exc, text):
    assert gate_main._message(exc) == ("cannot run", text)


def test_ctrl_c_while_the_subcommands_load_is_one_stderr_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(gate_main, "build_parser", interrupted)
    assert gate_main.main(["selfcheck"]) == EXIT_CANNOT_RUN
    out, err = capsys.readouterr()
    assert (out, err) == ("", "fp4moe-gate: cannot run: interrupted while starting\n")


class _Parser:
    """A stand-in for the built parser: records what it was asked to parse."""

    def __init__(self, interrupt: bool = False):
        self.seen, self.interrupt = None, interrupt

    def parse_known_args(self, argv):
        import argparse

        self.seen = list(argv)
        if self.interrupt:
            raise KeyboardInterrupt
        return argparse.Namespace(), []

    def print_help(self):
        print("usage: fp4moe-gate")


@pytest.mark.parametrize("argv, parsed", [([], ["selfcheck"]), (["--debug"], ["--debug", "selfcheck"]),
                                          (["--debug", "footprint"], ["--debug", "footprint"])])
def test_no_subcommand_means_selfcheck_and_debug_alone_is_no_subcommand(monkeypatch, capsys, argv, parsed):
    p = _Parser()
    monkeypatch.setattr(gate_main, "build_parser", lambda: p)
    assert gate_main.main(argv) == EXIT_CANNOT_RUN  # the stand-in binds no command: help, exit 2
    assert p.seen == parsed


def test_ctrl_c_while_the_options_are_parsed_is_one_stderr_line(monkeypatch, capsys):
    monkeypatch.setattr(gate_main, "build_parser", lambda: _Parser(interrupt=True))
    assert gate_main.main(["footprint"]) == EXIT_CANNOT_RUN
    assert capsys.readouterr() == ("", "fp4moe-gate: cannot run: interrupted while starting\n")


@pytest.mark.parametrize("debug", [False, True])
def test_a_subcommand_that_cannot_load_is_one_line_and_a_traceback_only_with_debug(monkeypatch, capsys, debug):
    def broken():
        raise RuntimeError("no  module\n named x")

    monkeypatch.setattr(gate_main, "build_parser", broken)
    assert gate_main.main(["--debug"] if debug else []) == EXIT_CANNOT_RUN
    out, err = capsys.readouterr()
    line = ("fp4moe-gate: cannot run: internal error while loading the subcommands: RuntimeError: no module named x "
            "(rerun with --debug for the traceback)\n")
    assert out == "" and err.endswith(line) and (err != line) is debug and ("Traceback" in err) is debug


@pytest.mark.parametrize("argv, prog, words", [(["footprint", "--no-such", "two"], "fp4moe-gate footprint", "--no-such two"),
                                               (["--no-such"], "fp4moe-gate", "--no-such")])
def test_unknown_options_name_the_subcommand_they_were_given_to(capsys, argv, prog, words):
    with pytest.raises(SystemExit) as stop:
        gate_main.main(argv)
    assert stop.value.code == EXIT_CANNOT_RUN
    assert capsys.readouterr().err == f"{prog}: error: unrecognized arguments: {words} (see {prog} --help)\n"
