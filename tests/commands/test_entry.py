"""Ctrl-C from the entry's first statement on (fp4moe.commands.entry): one line, exit 2, never
a traceback; a SIGINT a library swallowed is still "interrupted"; one after the verdict changes
nothing. Each case is a fresh interpreter whose SIGINT is at Python's default (set for the child,
whatever this pytest inherited: ``nohup`` or a background job starts it ignored)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

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


def test_a_sigint_while_torch_loads_waits_for_its_import_to_end(default_signals, tmp_path):
    """torch's import calls Python from C++, where a KeyboardInterrupt is ``std::terminate``
    (SIGABRT): a SIGINT in it is held until the import returns, then the one line. The stand-in
    torch signals itself mid-import and goes on loading; its last statement ran only if the
    interrupt was held, the run is exit 2 with the one line only if it was then acted on."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(textwrap.dedent(f'''
        import os, signal
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10 ** 5):
            pass  # bytecodes where a raised KeyboardInterrupt would land
        open({str(tmp_path / "loaded")!r}, "w").close()
    '''))
    r = _python(f'''
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        sys.argv = ["fp4moe-gate", "selfcheck"]
        from fp4moe.commands.entry import run
        run()
    ''', default_signals)
    assert (tmp_path / "loaded").exists(), ("the interrupt was raised inside torch's import", r.stderr)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "interrupted" in r.stderr, r.stderr


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


@pytest.mark.slow
def test_real_sigint_at_many_moments_of_a_selfcheck_is_one_line_or_the_verdict(default_signals):
    """The console script's path, timed: SIGINT at moments from 0.1 s to 2.5 s after ``run()`` is
    called (the entry's imports, then the selfcheck, to its end). Each run is exit 2 with one line
    naming the interrupt, or (the signal came after the verdict) the verdict, exit 0. The moments
    count from a byte the child writes on a pipe just before it calls ``run()``: the interpreter's
    own start (site-packages' .pth files, Python's, not the gate's) takes 0.05 s on a quiet machine
    and more than 0.1 s on a loaded one, where a delay counted from the start landed in it."""
    for delay in (0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.5, 2.5):
        r, w = os.pipe()
        cmd = [sys.executable, "-c", "import os, sys; sys.argv = ['fp4moe-gate', 'selfcheck']; "
               f"from fp4moe.commands.entry import run; os.write({w}, b'.'); os.close({w}); run()"]
        p = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=default_signals, start_new_session=True, pass_fds=(w,))
        os.close(w)
        try:
            ready, _, _ = select.select([r], [], [], 120)
            assert ready and os.read(r, 1) == b".", (delay, "the child never reached run()", p.poll())
        finally:
            os.close(r)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        lines = err.splitlines()
        assert (p.returncode == 2 and len(lines) == 1 and "interrupted" in lines[0]) or \
            (p.returncode == 0 and not lines and "selfcheck: ok" in out), (delay, p.returncode, err[-2000:])
