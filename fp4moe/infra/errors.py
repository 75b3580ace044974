"""Exceptions and exit codes shared by every gate.

A gate that ran and found a regression exits ``EXIT_REGRESSION`` (1); a gate that could not
run (missing input, server down, wrong hardware) exits ``EXIT_CANNOT_RUN`` (2). Nothing that
could not run is ever reported as a pass.
"""

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_CANNOT_RUN = 2


class GateCannotRun(RuntimeError):
    """The gate could not produce a verdict. The CLI turns it into exit code 2."""
