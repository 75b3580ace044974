"""``fp4moe-gate``'s exit-code mapping (``fp4moe.commands.main._main``) on a stand-in gate, in
process: a SIGINT seen while the gate ran turns its 0 or 1 into exit 2 (its 2 stays the gate's
own), the one line names the gate's own ``prog``, children are killed exactly on the paths that
end the gate early, the cleanup handlers are installed before the gate, a cannot-run record that
could not be written is said on the same line, bounded, and no subcommand bound prints the help."""

from __future__ import annotations

import argparse

import pytest

from fp4moe.commands import main as gate_main
from fp4moe.commands import output
from fp4moe.infra import runner
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun

SWALLOWED = "cannot run: interrupted (SIGINT arrived while the gate ran; its result is not a verdict)"


class _Parser:
    """Parses any argv into ``ns`` (a subcommand already bound)."""

    def __init__(self, ns):
        self.ns = ns

    def parse_known_args(self, argv):
        return self.ns, []


@pytest.fixture
def run(monkeypatch, capsys):
    """``run(behave, seen=False, **ns) -> (rc, stderr, events)``: ``_main`` over a stand-in
    subcommand ``boom`` whose func is ``behave``; ``events`` lists the cleanup calls in order."""
    events = []
    monkeypatch.setattr(runner, "kill_all_children", lambda: events.append("kill"))
    monkeypatch.setattr(runner, "install_signal_cleanup", lambda: events.append("install"))
    monkeypatch.setattr(output, "cannot_run", lambda args, reason: events.append(("record", reason)))

    def go(behave, seen=False, **ns):
        def func(args):
            events.append("gate")
            return behave(args)

        args = argparse.Namespace(command="boom", debug=False, func=func, **ns)
        monkeypatch.setattr(gate_main, "build_parser", lambda: _Parser(args))
        monkeypatch.setattr(runner, "interrupted", lambda: seen)
        rc = gate_main._main(["boom"])
        out, err = capsys.readouterr()
        assert out == ""
        return rc, err, events

    return go


def _raise(e):
    def behave(args):
        raise e
    return behave


@pytest.mark.parametrize("rc", [EXIT_OK, EXIT_REGRESSION])
def test_a_verdict_reached_after_a_swallowed_sigint_is_no_verdict(run, rc):
    got, err, events = run(lambda args: rc, seen=True)
    assert got == EXIT_CANNOT_RUN
    assert err == f"fp4moe-gate boom: {SWALLOWED}\n"
    assert events == ["install", "gate", "kill", ("record", SWALLOWED)]


def test_a_cannot_run_after_a_sigint_stays_the_gates_own_line(run):
    got, err, events = run(lambda args: EXIT_CANNOT_RUN, seen=True)
    assert (got, err) == (EXIT_CANNOT_RUN, "")
    assert events == ["install", "gate", ("record", "the gate could not judge (its message on stderr names the cause)")]


@pytest.mark.parametrize("rc", [EXIT_OK, EXIT_REGRESSION])
def test_a_verdict_without_a_sigint_passes_through_and_kills_nothing(run, rc):
    assert run(lambda args: rc) == (rc, "", ["install", "gate"])


def test_an_error_after_a_sigint_is_called_an_interrupt_naming_how_it_ended(run):
    got, err, events = run(_raise(ValueError("numpy half-initialised")), seen=True)
    assert got == EXIT_CANNOT_RUN
    assert err == "fp4moe-gate boom: cannot run: interrupted (SIGINT; it ended as ValueError)\n"
    assert events == ["install", "gate", "kill", ("record", "interrupted (SIGINT; it ended as ValueError)")]


def test_the_interrupt_itself_after_a_sigint_is_the_interrupt_line(run):
    got, err, _ = run(_raise(KeyboardInterrupt()), seen=True)
    assert (got, err) == (EXIT_CANNOT_RUN, "fp4moe-gate boom: cannot run: interrupted (SIGINT)\n")


def test_an_escape_kills_the_children_and_records_the_cause(run):
    got, err, events = run(_raise(GateCannotRun("no tree")))
    assert (got, err) == (EXIT_CANNOT_RUN, "fp4moe-gate boom: cannot run: no tree\n")
    assert events == ["install", "gate", "kill", ("record", "no tree")]


def test_the_line_names_the_gates_own_prog(run):
    got, err, _ = run(_raise(ValueError("--x 3")), prog="fp4moe-gate perf compare")
    assert err == "fp4moe-gate perf compare: error: --x 3\n"
    assert run(lambda args: None, prog="")[1] == \
        "fp4moe-gate boom: cannot run: internal error: the gate returned None, not 0/1/2\n"


@pytest.mark.parametrize("rc", [False, True, 3, -1, None, "0"])
def test_only_the_three_exit_codes_pass_and_bools_are_not_codes(run, rc):
    got, err, events = run(lambda args: rc)
    assert got == EXIT_CANNOT_RUN
    assert err == f"fp4moe-gate boom: cannot run: internal error: the gate returned {rc!r}, not 0/1/2\n"
    assert events == ["install", "gate", ("record", f"cannot run: internal error: the gate returned {rc!r}, not 0/1/2")]


def test_a_record_that_could_not_be_written_is_said_on_the_same_bounded_line(run, monkeypatch):
    monkeypatch.setattr(output, "cannot_run", lambda args, reason: "--json out.json: disk full")
    got, err, _ = run(_raise(GateCannotRun("no tree")))
    assert err == "fp4moe-gate boom: cannot run: no tree; and the cannot-run record could not be written: " \
                  "--json out.json: disk full\n"
    monkeypatch.setattr(output, "cannot_run", lambda args, reason: "x" * 1000)
    line = run(_raise(GateCannotRun("no tree")))[1]
    assert len(line) == gate_main.EXIT_LINE_CHARS + 1 and line.endswith("xxx...\n")


def test_no_subcommand_bound_prints_the_help_and_exits_2(monkeypatch, capsys):
    class Help(_Parser):
        def print_help(self):
            print("usage: fp4moe-gate [-h] COMMAND")

    monkeypatch.setattr(gate_main, "build_parser", lambda: Help(argparse.Namespace(command=None)))
    assert gate_main._main(["x"]) == EXIT_CANNOT_RUN
    assert capsys.readouterr() == ("usage: fp4moe-gate [-h] COMMAND\n", "")


def test_the_outputs_are_begun_and_checked_after_the_cleanup_is_installed_and_before_the_gate(run, monkeypatch):
    got, _, events = run(lambda args: EXIT_OK)
    monkeypatch.setattr(output, "begin", lambda args: events.append("begin"))
    monkeypatch.setattr(output, "check", lambda args: events.append("check"))
    events.clear()
    assert run(lambda args: EXIT_OK) == (EXIT_OK, "", ["install", "begin", "check", "gate"])


SPENT = "--timeout 6: timed out, the deadline for the whole run passed while the gate was at fp4moe/x.py:1 (f)"


def test_the_run_deadline_stopping_the_gate_is_exit_2_with_its_line(run):
    rc, err, events = run(_raise(runner.DeadlineSpent(SPENT)))
    assert rc == EXIT_CANNOT_RUN and err.strip() == f"fp4moe-gate boom: cannot run: {SPENT}", err
    assert events[-2:] == ["kill", ("record", SPENT)]


@pytest.mark.parametrize("verdict", [EXIT_OK, EXIT_REGRESSION])
def test_a_swallowed_deadline_turns_the_verdict_into_exit_2(run, monkeypatch, verdict):
    """A library that caught the DeadlineSpent and returned: the run is not a verdict."""
    monkeypatch.setattr(runner, "deadline_spent", lambda: SPENT)
    rc, err, events = run(lambda args: verdict)
    assert rc == EXIT_CANNOT_RUN and err.strip() == f"fp4moe-gate boom: cannot run: {SPENT} (its result is not a verdict)"
    assert events == ["install", "gate", "kill", ("record", f"cannot run: {SPENT} (its result is not a verdict)")]


@pytest.mark.parametrize("make", [GateCannotRun, runner.DeadlineSpent], ids=["cannot-run", "deadline"])
def test_the_message_is_kept_whole_to_400_characters_and_cut_past_them(run, make):
    """EXIT_LINE_CHARS - 100 characters of the gate's own message (the rest of the 500: the
    command's name and what a failed cannot-run record adds)."""
    whole = "w" * (gate_main.EXIT_LINE_CHARS - 100)
    assert run(_raise(make(whole)))[1] == f"fp4moe-gate boom: cannot run: {whole}\n"
    cut = run(_raise(make(whole + "x")))[1]
    assert cut == f"fp4moe-gate boom: cannot run: {whole[:-3]}...\n"
