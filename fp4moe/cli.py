"""``fp4moe-gate``: one entry point, one subcommand per gate.

Each subcommand lives in its own module, which exposes ``register(subparsers)``; the module
adds its parser and sets ``func`` to a callable ``(args) -> int`` (an exit code). With no
subcommand, ``fp4moe-gate`` runs ``selfcheck``, the CPU tier's main job.

Exit codes (``fp4moe.errors``): 0 pass, 1 a regression was found, 2 the gate could not run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from fp4moe.errors import EXIT_CANNOT_RUN, GateCannotRun

# (module, one-line summary); the module's register() names its own subcommand(s).
SUBCOMMAND_MODULES = (
    "fp4moe.selfcheck",
    "fp4moe.footprint_cli",
    "fp4moe.zoo",
    "fp4moe.aiter_check",
    "fp4moe.perf.cli",
    "fp4moe.accuracy.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fp4moe-gate",
        description="Regression gate for the MXFP4 MoE weight path (SGLang + aiter, DeepSeek-V4, gfx950).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue  # tests/test_cli.py asserts every listed module exists
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        argv = ["selfcheck"]
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_CANNOT_RUN
    try:
        return int(args.func(args))
    except GateCannotRun as e:
        print(f"fp4moe-gate {args.command}: cannot run: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except ValueError as e:  # bad options / inputs: named in the message
        print(f"fp4moe-gate {args.command}: error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
