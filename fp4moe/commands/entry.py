"""The process entry of ``fp4moe-gate`` (the console script) and of ``python -m fp4moe.commands``.

Ctrl-C is one line, never a traceback: :func:`run` imports only ``signal`` and ``sys`` before it
imports :mod:`fp4moe.commands.main` (whose ``main`` owns the exit-code contract: an interrupt
while a gate runs kills its children, exit 2, one line); an interrupt before ``main`` answers is
the same one line. Once ``main`` has returned, a late SIGINT changes nothing.
"""

import signal
import sys

EXIT_CANNOT_RUN = 2  # fp4moe.infra.errors.EXIT_CANNOT_RUN, not imported: nothing before the guard
STARTING = "fp4moe-gate: cannot run: interrupted while starting"


def run() -> None:
    rc = None
    try:
        from fp4moe.commands.main import main
        from fp4moe.infra.deadline import anchor_to_process_start

        anchor_to_process_start()  # --timeout bounds the whole process, its imports included
        rc = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the verdict is out
    except KeyboardInterrupt:
        if rc is None:  # interrupted before main could answer (importing it, or in its first steps)
            print(STARTING, file=sys.stderr)
            rc = EXIT_CANNOT_RUN
    sys.exit(rc)


if __name__ == "__main__":
    run()
