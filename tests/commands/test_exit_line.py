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
