"""The options every gate shares, declared once: each subcommand's ``--help`` page
(:func:`add_command`: what it judges, its inputs, its exit codes), the output files (``--json``,
``--markdown``, ``--plot``), the statistical rule (``--threshold``, ``--alpha``,
``--min-samples``) and how a subcommand binds its function.

The convention (README "Commands"): ``--json PATH`` writes the result record (``--json -``:
the record alone on stdout, the text report dropped), ``--markdown PATH`` the tables,
``--plot PATH`` the PNG. Every record carries ``status``, one of :data:`STATUSES`. The output
paths are checked against the inputs before any work, and on exit 2 each one asked for is
replaced by a cannot-run record (``fp4moe.commands.output``, called from ``main``).

Nothing here imports numpy, scipy or torch: ``--help`` must stay instant.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path
from typing import Callable, Iterable

from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, exit_code_of
from fp4moe.stats.defaults import DEFAULT_ALPHA, DEFAULT_MIN_SAMPLES

#: the one status vocabulary of every result record
PASS, REGRESSION, CANNOT_RUN = "pass", "regression", "cannot-run"
STATUSES = (PASS, REGRESSION, CANNOT_RUN)
#: a record's status is its exit code's word
STATUS_BY_EXIT = {EXIT_OK: PASS, EXIT_REGRESSION: REGRESSION, EXIT_CANNOT_RUN: CANNOT_RUN}


def status_of(*, regressed: bool, unjudged: bool = False) -> str:
    """The record's status by the exit-code priority (``fp4moe.infra.errors.exit_code_of``)."""
    return STATUS_BY_EXIT[exit_code_of(regressed=regressed, unjudged=unjudged)]
#: ``--json -``: the record on stdout
STDOUT = "-"
#: output options main knows how to check and replace, in the order they are checked
OUTPUT_OPTIONS = ("json", "markdown", "plot")


#: the width the --help pages are wrapped to
HELP_WIDTH = 92
#: what every exit 2 prints, whatever the subcommand
CANNOT_RUN_LINE = "one line on stderr names the file, option or tensor"


def _para(text: str, indent: str = "") -> str:
    return textwrap.fill(" ".join(text.split()), HELP_WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def add_command(subparsers, name: str, page: str) -> argparse.ArgumentParser:
    """One subcommand's parser with its ``--help`` page in user terms, written as the docstring
    ``page`` of the command (its module or its run function): a first paragraph
    ``fp4moe-gate NAME: summary``; paragraphs of what it judges; ``Inputs: ...``; then one
    paragraph ``Exit 0: ...``, ``Exit 1: ...`` (absent where it never exits 1), ``Exit 2: ...``."""
    paras = [" ".join(p.split()) for p in textwrap.dedent(page).strip().split("\n\n")]
    summary = paras[0].split(": ", 1)[1].rstrip(".")
    exits = [m for p in paras[1:] for m in re.findall(r"Exit ([012]): (.*?)(?= Exit [012]: |$)", p)]
    if not exits or exits[0][0] != "0" or exits[-1][0] != "2":
        raise ValueError(f"{name}: its help page names no 'Exit 0: ... Exit 2: ...' paragraph")
    desc = "\n\n".join(_para(p) for p in paras[1:] if not p.startswith("Exit "))
    exits[-1] = ("2", f"{exits[-1][1].rstrip('.')}; {CANNOT_RUN_LINE}.")
    epilog = "exit codes:\n" + "\n".join(textwrap.fill(f"{code}  {what}", HELP_WIDTH, initial_indent="  ", subsequent_indent="     ",
                                                       break_on_hyphens=False) for code, what in exits)
    return subparsers.add_parser(name, help=summary, description=desc, epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def json_path(text: str):
    """``--json`` value: ``-`` (stdout) or a path."""
    if text == STDOUT:
        return STDOUT
    if not text:
        raise argparse.ArgumentTypeError("an empty path; give a file name, or - for stdout")
    return Path(text)


def file_path(text: str) -> Path:
    if not text or text == STDOUT:
        raise argparse.ArgumentTypeError(f"{text!r}: give a file name (only --json takes - for stdout)")
    return Path(text)


def add_outputs(p: argparse.ArgumentParser, *, json: str, markdown: str | None = None, plot: str | None = None) -> None:
    """Declare the output options this subcommand writes; each help names what goes there."""
    p.add_argument("--json", type=json_path, metavar="PATH",
                   help=f"write the result record here ({json}; with status pass/regression/cannot-run), "
                        "atomically; '-' prints the record alone on stdout")
    if markdown:
        p.add_argument("--markdown", type=file_path, metavar="PATH", help=f"write {markdown} here (e.g. $GITHUB_STEP_SUMMARY)")
    if plot:
        p.add_argument("--plot", type=file_path, metavar="PATH", help=f"write {plot} here (PNG)")


def add_stat_options(p: argparse.ArgumentParser, *, threshold: str, alpha_help: str | None = None,
                     min_samples_help: str | None = None) -> None:
    """``--threshold`` / ``--alpha`` / ``--min-samples``, parsed by ``fp4moe.stats.compare``
    (``parse_threshold``, ``parse_alpha``, ``check_min_samples``) inside the gate;
    ``--min-samples`` only where ``min_samples_help`` says what it counts."""
    p.add_argument("--threshold", default=threshold,
                   help=f"regression threshold: 5%%, 5 (percent) or 0.05 (fraction); default {threshold.replace('%', '%%')}")
    p.add_argument("--alpha", default=DEFAULT_ALPHA,
                   help=alpha_help or f"one-sided significance level (default {DEFAULT_ALPHA})")
    if min_samples_help:  # perf ab has none: its sequential design sets the rounds
        p.add_argument("--min-samples", type=int, default=DEFAULT_MIN_SAMPLES,
                       help=f"{min_samples_help} (default %(default)s)")


def bind(p: argparse.ArgumentParser, func: Callable, *, inputs: Callable[[argparse.Namespace], Iterable] = lambda a: ()) -> None:
    """Set the subcommand's function, its full name (for messages and records), the parser (for
    usage errors) and the files/folders its outputs must never overwrite."""
    p.set_defaults(func=func, prog=p.prog, subparser=p, output_inputs=inputs)


def gate_name(args) -> str:
    """'perf compare' for ``fp4moe-gate perf compare``."""
    prog = getattr(args, "prog", None) or f"fp4moe-gate {getattr(args, 'command', '')}"
    return prog.split(" ", 1)[1] if " " in prog else prog
