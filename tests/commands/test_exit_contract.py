"""The exit-code contract of ``fp4moe.commands.main``, and a fault table over every subcommand.

0 pass, 1 a regression the gate measured, 2 could not run. Any exception escaping a gate --
``GateCannotRun``, bad input, an OS error, a bug, ``SystemExit`` raised by code under test,
``KeyboardInterrupt`` -- is exit 2 with one line on stderr; the traceback only with
``--debug``. The issue's defect: any exception other than ValueError ended with a traceback
and exit 1, the code that means "ran and found a regression".

Each row of the fault table runs one subcommand in-process on a fault and checks exit code,
the one-line message and that no input file changed. Deeper cases per gate live in
test_zoo_faults, test_perf_faults, test_gsm8k_faults, test_data_faults and (aiter-check)
test_aiter_check_faults.
"""

from __future__ import annotations

import errno
import importlib.machinery
import json
import sys
import types
from pathlib import Path

import pytest

from fp4moe.commands import main as cli
from fp4moe.completions.data import MINI_DATA_DIR
from fp4moe.infra.errors import GateCannotRun

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"  # the tests' own fixtures (checkout)

pytestmark = pytest.mark.reliability  # a fault table: `pytest -m reliability` selects every one


def _fake_gate(monkeypatch, behave):
    """Register a throwaway subcommand 'boom' whose func is ``behave(args)``."""
    mod = types.ModuleType("fp4moe_reliability_fake_gate")
    mod.__spec__ = importlib.machinery.ModuleSpec(mod.__name__, None)
    mod.register = lambda sub: sub.add_parser("boom").set_defaults(func=behave)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ("fp4moe.commands.selfcheck", mod.__name__))


def _raise(e):
    def behave(args):
        raise e
    return behave


CONTRACT = {
    "cannot-run": (_raise(GateCannotRun("server http://x is down")), "boom: cannot run: server http://x is down"),
    "value-error": (_raise(ValueError("--tp 5: not in the catalogue")), "boom: error: --tp 5: not in the catalogue"),
    "type-error": (_raise(TypeError("machine_info is a list")), "boom: error: TypeError: machine_info is a list"),
    "os-error": (_raise(PermissionError(errno.EACCES, "Permission denied", "/ro/out.md")),
                 "boom: error: PermissionError: [Errno 13] Permission denied: '/ro/out.md'"),
    "key-error": (_raise(KeyError("layers.0.w1")), "boom: error: KeyError: 'layers.0.w1'"),
    "bug": (_raise(ZeroDivisionError("division by zero")),
            "boom: cannot run: internal error: ZeroDivisionError: division by zero (rerun with --debug"),
    "sys-exit-0-from-code-under-test": (_raise(SystemExit(0)), "boom: cannot run: code under test called sys.exit(0)"),
    "sys-exit-1": (_raise(SystemExit(1)), "boom: cannot run: code under test called sys.exit(1)"),
    "keyboard-interrupt": (_raise(KeyboardInterrupt()), "boom: cannot run: interrupted"),
    "recursion": (_raise(RecursionError("maximum recursion depth exceeded")), "boom: cannot run: internal error"),
    "returns-none": (lambda args: None, "boom: cannot run: internal error: the gate returned None"),
    "returns-true": (lambda args: True, "boom: cannot run: internal error: the gate returned True"),
    "returns-3": (lambda args: 3, "boom: cannot run: internal error: the gate returned 3"),
}


@pytest.mark.parametrize("case", CONTRACT)
def test_every_escape_is_exit_2_in_one_line_without_traceback(gate, monkeypatch, case):
    behave, line = CONTRACT[case]
    _fake_gate(monkeypatch, behave)
    r = gate("boom").cannot_run(line)
    assert r.err.startswith("fp4moe-gate boom: ")


def test_a_subcommand_module_that_fails_to_import_is_exit_2(gate, monkeypatch):
    mod = types.ModuleType("fp4moe_reliability_broken_gate")
    mod.__spec__ = importlib.machinery.ModuleSpec(mod.__name__, None)

    def register(sub):
        raise ImportError("No module named 'jsonschema'")

    mod.register = register
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ("fp4moe.commands.selfcheck", mod.__name__))
    gate("selfcheck").cannot_run("fp4moe-gate: cannot run: internal error while loading the subcommands",
                                 "No module named 'jsonschema'")


def test_debug_prints_the_traceback_and_keeps_exit_2(gate, monkeypatch):
    _fake_gate(monkeypatch, _raise(ZeroDivisionError("division by zero")))
    r = gate("--debug", "boom")
    assert r.rc == 2 and "Traceback (most recent call last)" in r.err and "ZeroDivisionError" in r.err


@pytest.mark.parametrize("rc", [0, 1, 2])
def test_a_gates_own_exit_code_passes_through(gate, monkeypatch, rc):
    _fake_gate(monkeypatch, lambda args: rc)
    assert gate("boom").rc == rc


def _subcommands() -> list[str]:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("name", _subcommands())
def test_every_subcommand_usage_error_is_one_line_and_help_is_0(gate, name):
    """Unknown option (or, first, a missing required one): exit 2, one line."""
    gate(name, "--no-such-option").cannot_run("error:")
    r = gate(name, "--help")
    assert r.rc == 0 and "usage:" in r.out


def test_top_level_usage_errors_are_one_line(gate):
    gate("no-such-command").cannot_run("invalid choice")


# ------------------------------------------------------------------ the fault table


def _bench(path, **top):
    doc = json.loads((FIXTURES / "perf" / "example-pytest-benchmark.json").read_text())
    doc.update(top)
    path.write_text(json.dumps(doc))
    return path


def _rows(tmp):
    """(id, argv, input files, expected rc, words in the one line)."""
    good = _bench(tmp / "good.json")
    notjson = tmp / "notjson.json"
    notjson.write_text("{")
    latin = tmp / "latin1.json"
    latin.write_bytes(b'{"benchmarks": "caf\xe9"}')
    listinfo = _bench(tmp / "listinfo.json", machine_info=[1, 2])
    empty = tmp / "empty.json"
    empty.write_text('{"benchmarks": []}')
    strdata = tmp / "strdata.json"
    doc = json.loads(good.read_text())
    doc["benchmarks"][0]["stats"]["data"] = [str(v) for v in doc["benchmarks"][0]["stats"]["data"]]
    strdata.write_text(json.dumps(doc))
    deep = tmp / "deep.json"
    deep.write_text("[" * 100_000)
    infdata = tmp / "infdata.json"
    doc = json.loads(good.read_text())
    doc["benchmarks"][0]["stats"]["data"][3] = 1e400  # json.dumps writes Infinity
    infdata.write_text(json.dumps(doc))
    datadir = tmp / "gsm"
    datadir.mkdir()
    for name in ("test.jsonl", "train.jsonl"):
        (datadir / name).write_bytes((MINI_DATA_DIR / name).read_bytes())
    mutfile = tmp / "mut.py"
    mutfile.write_text("MUTANTS = [\n")
    return [
        ("selfcheck-extra-arg", ["selfcheck", "extra"], [], 2, ["unrecognized arguments: extra"]),
        ("footprint-bad-tp", ["footprint", "--model", "dsv4-pro", "--tp", "5"], [], 2, ["--tp 5", "does not divide"]),
        ("footprint-tp-0", ["footprint", "--model", "dsv4-pro", "--tp", "0"], [], 2, ["--tp and --ep must be >= 1"]),
        ("footprint-bad-align", ["footprint", "--align", "100"], [], 2, ["--align 100"]),
        ("footprint-bad-model", ["footprint", "--model", "nosuch"], [], 2, ["nosuch"]),
        ("footprint-bad-ep", ["footprint", "--model", "dsv4-pro", "--tp", "8", "--ep", "x"], [], 2, ["--ep 'x'"]),
        ("zoo-syntax-error", ["zoo", "--mutant-file", mutfile], [mutfile], 2, ["mut.py:", "syntax error"]),
        ("zoo-jobs", ["zoo", "--jobs", "-1"], [], 2, ["--jobs -1"]),
        ("perf-missing", ["perf", "compare", good, tmp / "nope.json"], [good], 2, ["nope.json", "does not exist"]),
        ("perf-not-json", ["perf", "compare", good, notjson], [good, notjson], 2, ["notjson.json", "not valid JSON"]),
        ("perf-not-utf8", ["perf", "compare", good, latin], [good, latin], 2, ["latin1.json"]),
        ("perf-machine-info-list", ["perf", "compare", good, listinfo], [good, listinfo], 2, ["listinfo.json", "machine_info"]),
        ("perf-data-as-strings", ["perf", "compare", good, strdata], [good, strdata], 2,
         ["strdata.json", "not a list of numbers"]),
        ("perf-deep-json", ["perf", "compare", good, deep], [good, deep], 2, ["deep.json", "nested too deeply"]),
        ("perf-same-file", ["perf", "compare", good, tmp / "." / "good.json"], [good], 2, ["same file"]),
        ("perf-accept-inf-rounds", ["perf", "accept", infdata, "--runner", "r", "--baseline-dir", tmp / "bl"],
         [infdata], 2, ["infdata.json", "not stored as a baseline", "Infinity"]),
        ("perf-json-over-head", ["perf", "compare", good, infdata, "--json", infdata], [good, infdata], 2,
         ["--json", "would overwrite the input"]),
        ("perf-markdown-into-baselines", ["perf", "compare", good, "--runner", "r", "--baseline-dir", tmp,
                                          "--markdown", tmp / "r" / "x.md"], [good], 2, ["would overwrite the input"]),
        ("perf-same-output-twice", ["perf", "compare", good, infdata, "--json", tmp / "o", "--markdown", tmp / "o"],
         [good], 2, ["--json and --markdown name the same file"]),
        ("perf-no-benchmarks", ["perf", "compare", good, empty], [good, empty], 2, ["empty.json", "no benchmarks"]),
        ("perf-threshold", ["perf", "compare", good, good, "--threshold", "abc"], [good], 2, ["--threshold"]),
        ("perf-alpha", ["perf", "compare", good, good, "--alpha", "abc"], [good], 2, ["--alpha"]),
        ("perf-min-samples", ["perf", "compare", good, good, "--min-samples", "-1"], [good], 2, ["--min-samples -1"]),
        ("perf-three-files", ["perf", "compare", good, good, good], [good], 2, ["3"]),
        ("perf-markdown-dir", ["perf", "compare", good, good, "--markdown", tmp], [good], 2, ["--markdown", "is a folder"]),
        ("perf-no-runner-baseline", ["perf", "compare", good, "--runner", "r", "--baseline-dir", tmp / "bl"], [good], 2,
         ["no baseline"]),
        ("perf-accept-bad-runner", ["perf", "accept", good, "--runner", "///", "--baseline-dir", tmp / "bl"], [good], 2,
         ["--runner"]),
        ("perf-accept-not-json", ["perf", "accept", notjson, "--runner", "r", "--baseline-dir", tmp / "bl"], [notjson], 2,
         ["notjson.json"]),
        ("gsm8k-no-reference", ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--json", tmp / "g.json"],
         [], 2, ["--threshold X, --baseline X, or --model-key"]),
        ("gsm8k-bad-url", ["gsm8k", "--base-url", "ftp://x", "--model", "m", "--threshold", "0.9", "--json",
                           tmp / "g.json"], [], 2, ["--base-url 'ftp://x'"]),
        ("gsm8k-url-with-space", ["gsm8k", "--base-url", "http://a b", "--model", "m", "--threshold", "0.9", "--json",
                                  tmp / "g.json"], [], 2, ["--base-url 'http://a b'"]),
        ("gsm8k-url-bad-port", ["gsm8k", "--base-url", "http://127.0.0.1:99999", "--model", "m", "--threshold", "0.9",
                                "--json", tmp / "g.json"], [], 2, ["--base-url", "99999"]),
        ("gsm8k-output-over-data", ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9",
                                    "--data-dir", datadir, "--json", datadir / "test.json"], [datadir], 2,
         ["would overwrite the input"]),
        ("gsm8k-output-not-json", ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9",
                                   "--json", tmp / "test.jsonl"], [], 2, ["must end in .json"]),
        ("gsm8k-unknown-model-key", ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--model-key", "x",
                                     "--json", tmp / "g.json"], [], 2, ["--model-key 'x'"]),
        ("gsm8k-bad-data-dir", ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9",
                                "--data-dir", tmp / "nodata", "--json", tmp / "g.json"], [], 2, ["nodata"]),
    ]


def test_fault_table_every_gate(gate, tmp_path):
    """All rows in one test (one tmp folder, ~1 s): each must be exit 2, one line, inputs kept."""
    failures = []
    for case, argv, inputs, rc, words in _rows(tmp_path):
        try:
            r = gate(*argv, inputs=inputs)
            assert r.rc == rc, f"rc {r.rc}: {r.err.strip()}"
            r.cannot_run(*words)
        except AssertionError as e:
            failures.append(f"{case}: {' '.join(str(e).split())[:400]}")
    assert not failures, "\n".join(failures)


#: One could-not-run case per gate, run as a real process: late output (asyncio's "never
#: retrieved", a thread's or atexit's text) comes at interpreter exit, which no in-process
#: test sees. (serve-bench's own case, a server ignoring include_usage, is in its tests.)
_REAL_EXIT_CASES = {
    "selfcheck": ["selfcheck", "--no-such-option"],
    "footprint": ["footprint", "--tp", "x"],
    "zoo": ["zoo", "--mutant", "no_such_mutant"],
    "aiter-check": ["aiter-check", "--aiter-src", "/nonexistent-aiter"],
    "aiter-bisect": ["aiter-bisect", "--aiter-git", "/nonexistent-aiter", "--good", "a", "--bad", "b"],
    "perf": ["perf", "compare", "/nonexistent/a.json", "/nonexistent/b.json"],
    "gsm8k": ["gsm8k", "--base-url", "http://127.0.0.1:9", "--model", "m", "--threshold", "0.9", "--output",
              "/nonexistent-dir/g.json"],
    "serve-bench": ["serve-bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--connect-timeout", "1"],
    "sglang-check": ["sglang-check", "--sglang-root", "/nonexistent-sglang"],
    "sglang-replay": ["sglang-replay", "--aiter", "current=e4048607a5", "--from-results", "--results", "/nonexistent/r.json"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_REAL_EXIT_CASES))
def test_a_real_gate_process_prints_one_line_on_exit_2(gate_child, name):
    """Exit 2 and exactly one line on stderr, counted after the process has exited."""
    gate_child(*_REAL_EXIT_CASES[name], timeout_s=120).cannot_run()


def test_every_gate_has_a_real_exit_case():
    assert sorted(_REAL_EXIT_CASES) == _subcommands()
