"""The one writer of result files: ``--json`` records, ``--markdown`` tables, ``--plot`` PNGs.

Every ``--json`` record carries ``fp4moe_version`` and ``fp4moe_commit`` (``fp4moe.commands.version``).
Every write goes through ``fp4moe.infra.files`` (atomic: a reader sees the old file or the new
one). ``main`` calls :func:`begin` and :func:`check` before the gate does any work -- every
output path is checked against the subcommand's inputs and against the other outputs -- and
:func:`cannot_run` on every exit 2, so that a results file asked for never outlives a run
that could not judge:

- ``--json``: the record this run wrote, with ``status: cannot-run`` and the reason (or, when
  it wrote none, ``{"gate", "status": "cannot-run", "reason"}``); a record of status
  ``cannot-run`` that the gate wrote itself is kept as it is (it says more);
- ``--markdown``: one line saying the gate could not run, after this run's tables if any;
- ``--plot`` and side files (gsm8k's samples): removed unless this run wrote them -- an
  image cannot carry the reason, and a stale one must not pass for this run's.

An output naming a device, a FIFO or a descriptor (``/dev/null``, ``/dev/stdout``) is written
in place, never replaced or removed; a folder, a block device or a socket is refused before any
work (``fp4moe.infra.files.output_target``). A write that fails part-way (``/dev/full``, a FIFO
whose reader leaves before the end, stdout closed) is an ``OSError`` naming the option or path:
exit 2, never exit 0. Two runs writing one file at once: the last writer wins, whole (a
temporary file of a unique name beside it, renamed over it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fp4moe.commands.options import CANNOT_RUN, OUTPUT_OPTIONS, STATUSES, STDOUT, gate_name
from fp4moe.infra.files import Target, atomic_write_json, atomic_write_text, check_output_path, output_target

_STATE = "_output_state"


class _State:
    def __init__(self, stdout):
        self.stdout = stdout  # the real stdout, for `--json -`
        self.written: dict[str, object] = {}  # option -> what this run wrote
        self.side: dict[str, Path] = {}  # label -> a file written beside an output (gsm8k's samples)
        self.checked = False  # paths checked: only then may cannot_run write to them


def _state(args) -> _State:
    st = getattr(args, _STATE, None)
    if st is None:  # a gate function called without main (a test): write, no bookkeeping
        st = _State(sys.stdout)
        st.checked = True
        setattr(args, _STATE, st)
    return st


def requested(args) -> list[tuple[str, object]]:
    """(``--option``, value) of every output option given."""
    return [(f"--{o}", getattr(args, o)) for o in OUTPUT_OPTIONS if getattr(args, o, None) is not None]


def begin(args) -> None:
    """Before the gate: remember the real stdout (``--json -`` drops the text report)."""
    setattr(args, _STATE, _State(sys.stdout))


def add_side_file(args, label: str, path: Path) -> None:
    """A file written beside an output (checked like one; removed on exit 2 if stale)."""
    st = _state(args)
    check_output_path(path, label, inputs=list(_inputs(args)))
    st.side[label] = Path(path)


def _inputs(args):
    fn = getattr(args, "output_inputs", None)
    return [Path(p) for p in (fn(args) if fn else ()) if p is not None]


def check(args) -> None:
    """Before any work: each output a writable file, none of the inputs, no two the same file."""
    st = _state(args)
    paths = [(o, Path(v)) for o, v in requested(args) if v != STDOUT]
    inputs = _inputs(args)
    for i, (option, path) in enumerate(paths):
        for other, q in paths[:i]:
            if path.resolve() == q.resolve():
                raise OSError(f"{other} and {option} name the same file {path}: give each output its own file")
        check_output_path(path, option, inputs=inputs)
    st.checked = True


def write_json(args, record: dict) -> None:
    """The result record: ``gate`` and ``status`` first; ``status`` must be one of STATUSES."""
    if record.get("status") not in STATUSES:
        raise ValueError(f"internal error: result status {record.get('status')!r} is none of {', '.join(STATUSES)}")
    st = _state(args)
    from fp4moe.commands.version import provenance

    doc = {"gate": gate_name(args), **record, **provenance()}
    st.written["--json"] = doc
    if args.json == STDOUT:
        try:
            st.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
            st.stdout.flush()
        except OSError as e:  # a closed pipe, a full disk behind a redirection: named, never exit 0
            raise OSError(e.errno, f"--json {STDOUT}: cannot write to stdout: {e.strerror or e}") from None
    elif args.json is not None:
        atomic_write_json(args.json, doc, indent=1, default=str)


def write_markdown(args, text: str) -> None:
    if getattr(args, "markdown", None) is not None:
        atomic_write_text(args.markdown, text)
        _state(args).written["--markdown"] = text


def write_plot(args, comparisons, **kw) -> None:
    if getattr(args, "plot", None) is not None and comparisons:
        from fp4moe.stats.report import plot_ratios

        plot_ratios(comparisons, args.plot, **kw)
        _state(args).written["--plot"] = True


def write_side_file(args, label: str, text: str) -> None:
    st = _state(args)
    atomic_write_text(st.side[label], text)
    st.written[label] = True


def cannot_run(args, reason: str) -> str | None:
    """On exit 2: replace every output asked for (module docstring). Returns a problem to add
    to the one stderr line, or None."""
    st = getattr(args, _STATE, None)
    if st is None or not st.checked:  # a path refused by check() is never written
        return None
    problems = []
    for option, value in requested(args):
        try:
            if option == "--json":
                done = st.written.get("--json")
                if value == STDOUT and done is not None:
                    continue  # stdout holds one document: the exit status says the rest
                if not (isinstance(done, dict) and done.get("status") == CANNOT_RUN):
                    earlier = {k: v for k, v in (done or {}).items() if k not in ("gate", "status", "reason")}
                    write_json(args, {"status": CANNOT_RUN, "reason": reason, **earlier})
            elif option == "--markdown":
                from fp4moe.stats.report import md_text

                text = str(st.written.get("--markdown") or "")
                atomic_write_text(value, (text + "\n" if text else "")
                                  + f"**{gate_name(args)} could not run**: {md_text(reason)}\n")
            elif option == "--plot" and "--plot" not in st.written:
                _remove(value)
        except OSError as e:
            problems.append(f"{option} {value}: {e.strerror or e}")
    for label, path in st.side.items():
        if label not in st.written:
            try:
                _remove(path)
            except OSError as e:
                problems.append(f"{label} {path}: {e.strerror or e}")
    return "; ".join(problems) or None


def _remove(path) -> None:
    """A stale output: only a regular file is removed (a symlink's target, the link kept); a
    device, a FIFO or a descriptor is left alone; absent is fine."""
    try:
        kind, where = output_target(path)
    except OSError:
        return
    if kind is Target.FILE:
        where.unlink(missing_ok=True)
