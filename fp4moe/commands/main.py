"""``fp4moe-gate``: one entry point, one subcommand per gate.

Each subcommand lives in its own module of ``fp4moe.commands``, which exposes
``register(subparsers)``; it adds its parser and binds a callable ``(args) -> int`` (an exit code)
with ``fp4moe.commands.options.bind``. With no subcommand, ``fp4moe-gate`` runs ``selfcheck``,
the CPU tier's main job. Building the parser imports neither torch nor scipy (each module
imports its gate when it runs): ``--help`` and usage errors answer at once.

Exit codes (``fp4moe.infra.errors``), enforced here and only here: 0 pass, 1 a regression the gate
measured (a subcommand returns it), 2 the gate could not run. Every exception that escapes a
subcommand -- ``GateCannotRun``, bad input, an OS error, a bug, ``SystemExit`` raised by code
under test, ``KeyboardInterrupt``/SIGTERM -- ends in exit 2 with one line naming the cause;
the traceback is printed only with ``--debug``. A subcommand can never exit 1 by crashing.

Output files (``fp4moe.commands.output``): before the gate runs, every ``--json/--markdown/--plot``
path is checked against the subcommand's inputs and the other outputs; on every exit 2 each one
asked for is replaced by a cannot-run record, so a stale result never outlives the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import threading
import traceback

from fp4moe.commands import output
from fp4moe.commands.options import STDOUT
from fp4moe.infra.culprit import bounded
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun
from fp4moe.infra.oneline_parser import OneLineParser

# the modules whose register() names their own subcommand(s)
SUBCOMMAND_MODULES = (
    "fp4moe.commands.selfcheck",
    "fp4moe.commands.footprint",
    "fp4moe.commands.zoo",
    "fp4moe.commands.aiter_check",
    "fp4moe.commands.aiter_bisect",
    "fp4moe.commands.perf",
    "fp4moe.commands.gsm8k",
    "fp4moe.commands.sglang_check",
    "fp4moe.commands.sglang_replay",
    "fp4moe.commands.serve_bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="fp4moe-gate",
        description="Regression gate for the MXFP4 MoE weight path (SGLang + aiter, DeepSeek-V4, gfx950).",
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error that ends the gate")
    parser.add_argument("--version", action=_VersionAction, help="print the package version, the git commit "
                        "(from a checkout) and the data folder, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in SUBCOMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue  # tests/commands/test_cli.py asserts every listed module exists
        importlib.import_module(name).register(sub)
    return parser


#: longest exit-2 line: whatever the cause carried (a child's megabytes of text), one bounded line
EXIT_LINE_CHARS = 500


class _VersionAction(argparse.Action):
    """``--version``: git is asked only when the option is given (``--help`` stays fast)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from fp4moe.commands.version import version_line

        print(version_line())
        parser.exit(EXIT_OK)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return bounded(text if isinstance(e, (GateCannotRun, ValueError)) else f"{type(e).__name__}: {text}",
                   EXIT_LINE_CHARS - 100)


def _message(e: BaseException) -> tuple[str, str]:
    """(kind, text) of the one stderr line for an exception that ended a gate."""
    from fp4moe.infra.runner import DeadlineSpent

    if isinstance(e, GateCannotRun):
        return "cannot run", _one_line(e)
    if isinstance(e, DeadlineSpent):  # the run's --timeout passed in the gate's own work
        return "cannot run", bounded(" ".join(str(e).split()), EXIT_LINE_CHARS - 100)
    if isinstance(e, KeyboardInterrupt):  # SIGINT (Ctrl-C), SIGTERM, SIGHUP ("signal N": fp4moe.infra.runner)
        return "cannot run", f"interrupted ({' '.join(str(e).split()) or 'SIGINT'})"
    if isinstance(e, SystemExit):
        return "cannot run", f"code under test called sys.exit({e.code!r})"
    if isinstance(e, (ValueError, TypeError, OSError, LookupError)):
        return "error", _one_line(e)
    return "cannot run", f"internal error: {_one_line(e)} (rerun with --debug for the traceback)"


def main(argv: list[str] | None = None) -> int:
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:  # the caller's handlers again (a gate run in-process: the test suite)
        if threading.current_thread() is threading.main_thread():
            for s, h in saved.items():
                signal.signal(s, h)


def _main(argv: list[str]) -> int:
    try:  # a subcommand module that cannot be imported (a missing dependency) is exit 2, one line
        parser = build_parser()
    except KeyboardInterrupt:  # Ctrl-C while the subcommands load (the first second): one line, not a traceback
        print("fp4moe-gate: cannot run: interrupted while starting", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except Exception as e:  # noqa: BLE001 -- same contract as below, before any gate runs
        if "--debug" in argv:
            traceback.print_exc()
        print(f"fp4moe-gate: cannot run: internal error while loading the subcommands: {_one_line(e)} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if not [a for a in argv if a != "--debug"]:
        argv = [*argv, "selfcheck"]
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the subcommand whose options these are not (argparse would say fp4moe-gate)
            getattr(args, "subparser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except KeyboardInterrupt:
        print("fp4moe-gate: cannot run: interrupted while starting", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_CANNOT_RUN
    from fp4moe.infra.runner import deadline_spent, install_signal_cleanup, interrupted, kill_all_children

    install_signal_cleanup()
    cmd = getattr(args, "prog", None) or f"fp4moe-gate {args.command}"
    output.begin(args)
    rc, line = None, None
    try:
        with _stdout_for(args):
            output.check(args)  # every output path, before any work
            rc = args.func(args)
    except BaseException as e:  # noqa: BLE001 -- the one place the exit-code contract is enforced
        kill_all_children()
        if args.debug:
            traceback.print_exc()
        kind, text = ("cannot run", f"interrupted (SIGINT; it ended as {type(e).__name__})") \
            if interrupted() and not isinstance(e, KeyboardInterrupt) else _message(e)
        line = f"{cmd}: {kind}: {text}"
        reason = text
    else:
        if interrupted() and rc in (EXIT_OK, EXIT_REGRESSION):  # a library swallowed the KeyboardInterrupt
            # (torch's C-level import of numpy does: torch then runs without numpy)
            kill_all_children()
            line = f"{cmd}: cannot run: interrupted (SIGINT arrived while the gate ran; its result is not a verdict)"
            reason = line.split(": ", 1)[1]
        elif deadline_spent() and rc in (EXIT_OK, EXIT_REGRESSION):  # a library swallowed DeadlineSpent
            kill_all_children()
            line = f"{cmd}: cannot run: {deadline_spent()} (its result is not a verdict)"
            reason = line.split(": ", 1)[1]
        elif isinstance(rc, bool) or rc not in (EXIT_OK, EXIT_REGRESSION, EXIT_CANNOT_RUN):
            line = f"{cmd}: cannot run: internal error: the gate returned {rc!r}, not 0/1/2"
            reason = line.split(": ", 1)[1]
        elif rc == EXIT_CANNOT_RUN:  # the gate printed its own line
            reason = "the gate could not judge (its message on stderr names the cause)"
        else:
            return rc
    problem = output.cannot_run(args, reason)
    if line is not None:
        print(bounded(line + (f"; and the cannot-run record could not be written: {problem}" if problem else ""),
                      EXIT_LINE_CHARS), file=sys.stderr)
    return EXIT_CANNOT_RUN


@contextlib.contextmanager
def _stdout_for(args):
    """``--json -``: stdout holds the record alone; the gate's text report is dropped."""
    if getattr(args, "json", None) != STDOUT:
        yield
        return
    saved = sys.stdout
    with open(os.devnull, "w") as null:
        sys.stdout = null
        try:
            yield
        finally:
            sys.stdout = saved


if __name__ == "__main__":  # the console script and `python -m fp4moe.commands` start in entry.py
    from fp4moe.infra.deadline import anchor_to_process_start

    anchor_to_process_start()
    sys.exit(main())
