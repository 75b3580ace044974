"""The process entry of ``fp4moe-gate`` (the console script) and of ``python -m fp4moe.commands``.

Ctrl-C is one line from this module's first statement on, never a traceback. Python turns
SIGINT into ``KeyboardInterrupt`` from its start; raised while the command line's modules are
still being imported, it used to print a traceback of the import machinery and exit 130
(Ctrl-C in the first second). :func:`run` imports only ``signal`` and ``sys``
before it wraps the import of :mod:`fp4moe.commands.main`, whose ``main`` then owns the
exit-code contract (an interrupt while a gate runs: its children killed, exit 2, one line).
Once ``main`` has returned, the verdict is on the terminal: a late SIGINT changes nothing (it
is ignored for the interpreter's last steps) and the exit status is the verdict's. torch's import
is not interruptible: its C++ calls back into Python while it loads, and a ``KeyboardInterrupt``
raised there is a C++ exception nobody catches (``std::terminate``: SIGABRT and pybind11's
frames on stderr: CI's slow tier once, 1 of 120 timed Ctrl-Cs beside two busy loops). :func:`run` puts
:class:`_SigintAfterImport` first on ``sys.meta_path``: while a package in
:data:`HELD_IMPORTS` loads, SIGINT is only noted, and acted on (the handler that was in place
is called) once its import has returned. What this cannot cover: a SIGINT during the
interpreter's own start, before any line of this package runs.
A SIGINT inherited *ignored* (a script's background job) stays ignored throughout (POSIX;
``fp4moe.infra.childproc``).
"""

import signal
import sys

EXIT_CANNOT_RUN = 2  # fp4moe.infra.errors.EXIT_CANNOT_RUN, not imported: nothing before the guard
STARTING = "fp4moe-gate: cannot run: interrupted while starting"
#: Packages whose import runs with SIGINT held (noted, acted on when the import returns).
HELD_IMPORTS = frozenset({"torch"})


class _SigintAfterImport:
    """``sys.meta_path`` finder: the spec of a :data:`HELD_IMPORTS` package as the other
    finders give it, its loader's ``exec_module`` (that one module's, for that one import)
    wrapped by :class:`_Held`. Any other name: not this finder's business."""

    def __init__(self):
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name not in HELD_IMPORTS or self._finding:
            return None
        self._finding = True
        try:
            spec = next((s for s in (f.find_spec(name, path, target) for f in sys.meta_path
                                     if f is not self and hasattr(f, "find_spec")) if s is not None), None)
        finally:
            self._finding = False
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            loader.exec_module = _Held(loader, loader.exec_module)
        return spec


class _Held:
    """One held import: runs the loader's own ``exec_module`` with SIGINT noted, not raised,
    then takes itself off the loader (a later import of the name is the loader's own)."""

    def __init__(self, loader, exec_module):
        self._loader, self._exec_module, self._noted = loader, exec_module, []

    def _note(self, signum, frame):
        self._noted.append(signum)

    def __call__(self, module):
        del self._loader.exec_module
        try:
            outer = signal.getsignal(signal.SIGINT)
            if not callable(outer):  # ignored or the OS default: nothing raises inside the import
                return self._exec_module(module)
            signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main thread: a SIGINT's handler runs on the main thread anyway
            return self._exec_module(module)
        try:
            return self._exec_module(module)
        finally:
            signal.signal(signal.SIGINT, outer)
            if self._noted:
                outer(signal.SIGINT, None)  # the handler that was in place: KeyboardInterrupt, here


def run() -> None:
    rc = None
    sys.meta_path.insert(0, _SigintAfterImport())
    try:
        from fp4moe.commands.main import main

        rc = main()
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the verdict is out
    except KeyboardInterrupt:
        if rc is None:  # interrupted before main could answer (importing it, or in its first steps)
            print(STARTING, file=sys.stderr)
            rc = EXIT_CANNOT_RUN
    sys.exit(rc)


if __name__ == "__main__":
    run()
