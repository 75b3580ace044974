"""``fp4moe-gate``: one entry point, one subcommand per gate.

Each subcommand lives in its own module, which exposes ``register(subparsers)``; the module
adds its parser and sets ``func`` to a callable ``(args) -> int`` (an exit code). With no
subcommand, ``fp4moe-gate`` runs ``selfcheck``, the CPU tier's main job.

Exit codes (``fp4moe.infra.errors``), enforced here and only here: 0 pass, 1 a regression the gate
measured (a subcommand returns it), 2 the gate could not run. Every exception that escapes a
subcommand -- ``GateCannotRun``, bad input, an OS error, a bug, ``SystemExit`` raised by code
under test, ``KeyboardInterrupt``/SIGTERM -- ends in exit 2 with one line naming the cause;
the traceback is printed only with ``--debug``. A subcommand can never exit 1 by crashing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import traceback

from fp4moe.infra.childproc import install_signal_cleanup, kill_all_children
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun
from fp4moe.infra.oneline_parser import OneLineParser

# (module, one-line summary); the module's register() names its own subcommand(s).
SUBCOMMAND_MODULES = (
    "fp4moe.gates.selfcheck",
    "fp4moe.commands.footprint",
    "fp4moe.gates.zoo.runner",
    "fp4moe.gates.aiter_check",
    "fp4moe.commands.perf",
    "fp4moe.commands.gsm8k",
    "fp4moe.commands.sglang_check",
    "fp4moe.commands.serve_bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="fp4moe-gate",
        description="Regression gate for the MXFP4 MoE weight path (SGLang + aiter, DeepSeek-V4, gfx950).",
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error that ends the gate")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue  # tests/commands/test_cli.py asserts every listed module exists
        importlib.import_module(name).register(sub)
    return parser


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, (GateCannotRun, ValueError)) else f"{type(e).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("fp4moe-gate: cannot run: interrupted while starting", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_CANNOT_RUN
    install_signal_cleanup()
    cmd = f"fp4moe-gate {args.command}"
    try:
        rc = args.func(args)
    except BaseException as e:  # noqa: BLE001 -- the one place the exit-code contract is enforced
        kill_all_children()
        if args.debug:
            traceback.print_exc()
        if isinstance(e, GateCannotRun):
            print(f"{cmd}: cannot run: {_one_line(e)}", file=sys.stderr)
        elif isinstance(e, KeyboardInterrupt):
            print(f"{cmd}: cannot run: interrupted ({_one_line(e)})", file=sys.stderr)
        elif isinstance(e, SystemExit):
            print(f"{cmd}: cannot run: code under test called sys.exit({e.code!r})", file=sys.stderr)
        elif isinstance(e, (ValueError, TypeError, OSError, LookupError)):
            print(f"{cmd}: error: {_one_line(e)}", file=sys.stderr)
        else:
            print(f"{cmd}: cannot run: internal error: {_one_line(e)} (rerun with --debug for the traceback)",
                  file=sys.stderr)
        return EXIT_CANNOT_RUN
    if isinstance(rc, bool) or rc not in (EXIT_OK, EXIT_REGRESSION, EXIT_CANNOT_RUN):
        print(f"{cmd}: cannot run: internal error: the gate returned {rc!r}, not 0/1/2", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return rc

if __name__ == "__main__":
    sys.exit(main())
