"""The process entry of ``fp4moe-gate`` (the console script) and of ``python -m fp4moe.commands``.

Ctrl-C is one line from this module's first statement on, never a traceback. Python turns
SIGINT into ``KeyboardInterrupt`` from its start; raised while the command line's modules are
still being imported, it used to print a traceback of the import machinery and exit 130
(Ctrl-C in the first second). :func:`run` imports only ``signal`` and ``sys``
before it wraps the import of :mod:`fp4moe.commands.main`, whose ``main`` then owns the
exit-code contract (an interrupt while a gate runs: its children killed, exit 2, one line).
Once ``main`` has returned, the verdict is on the terminal: a late SIGINT changes nothing (it
is ignored for the interpreter's last steps) and the exit status is the verdict's. What this
cannot cover: a SIGINT during the interpreter's own start, before any line of this package runs.
A SIGINT inherited *ignored* (a script's background job) stays ignored throughout (POSIX;
``fp4moe.infra.childproc``).
"""

import signal
import sys

EXIT_CANNOT_RUN = 2  # fp4moe.infra.errors.EXIT_CANNOT_RUN, not imported: nothing before the guard
STARTING = "fp4moe-gate: cannot run: interrupted while starting"


def run() -> None:
    rc = None
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
