"""Ctrl-C from the entry's first statement on (fp4moe.commands.entry): one line, exit 2, never
a traceback; a SIGINT a library swallowed is still "interrupted"; one after the verdict changes
nothing. Each case is a fresh interpreter whose SIGINT is at Python's default (set for the child,
whatever this pytest inherited: ``nohup`` or a background job starts it ignored)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from fp4moe.infra.paths import REPO_ROOT


def _python(code: str, default_signals, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=default_signals)


def test_sigint_while_the_command_line_is_imported_is_one_line(default_signals):
    """Ctrl-C in the first second: a KeyboardInterrupt raised while
    fp4moe.commands.main is being imported (where the signal lands in the first ~0.2 s)."""
    r = _python('''
        import sys
        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "fp4moe.commands.main":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, Interrupt())
        sys.argv = ["fp4moe-gate", "selfcheck"]
        from fp4moe.commands.entry import run
        run()
    ''', default_signals)
    assert r.returncode == 2 and r.stderr == "fp4moe-gate: cannot run: interrupted while starting\n", r.stderr


def test_a_sigint_a_library_swallowed_is_still_interrupted(default_signals):
    """torch's C-level ``import numpy`` swallows a KeyboardInterrupt (torch then runs without
    numpy and the gate may even finish): the SIGINT was seen, so the run is no verdict."""
    r = _python('''
        import os, signal, sys
        import fp4moe.commands.selfcheck as command
        def swallowing(args):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10 ** 6):
                    pass
            except KeyboardInterrupt:
                pass  # what a library's broad except does
            print("selfcheck: ok")
            return 0  # the gate "passed"
        command.run = swallowing
        sys.argv = ["fp4moe-gate", "selfcheck"]
        from fp4moe.commands.entry import run
        run()
    ''', default_signals)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [
        "fp4moe-gate selfcheck: cannot run: interrupted (SIGINT arrived while the gate ran; its result is not a verdict)"]


def test_a_sigint_after_the_verdict_changes_nothing(default_signals):
    r = _python('''
        import atexit, os, signal, sys
        import fp4moe.commands.main as m
        m.main = lambda: 1  # a verdict: a measured regression
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C as the interpreter ends
        from fp4moe.commands.entry import run
        run()
    ''', default_signals)
    assert r.returncode == 1 and r.stderr == "", (r.returncode, r.stderr)
