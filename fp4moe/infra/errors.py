"""Exceptions and exit codes shared by every gate.

A gate that ran and found a regression exits ``EXIT_REGRESSION`` (1); a gate that could not
run (missing input, server down, wrong hardware) exits ``EXIT_CANNOT_RUN`` (2). Nothing that
could not run is ever reported as a pass.
"""

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_CANNOT_RUN = 2


def exit_code_of(*, regressed: bool, unjudged: bool = False) -> int:
    """The exit-code priority, one copy for every gate and command: a regression the gate
    measured (1) outranks a part it could not judge (2), which outranks a pass (0). A pass is
    only what was judged and held."""
    if not isinstance(regressed, bool) or not isinstance(unjudged, bool):
        raise TypeError(f"exit_code_of: regressed and unjudged must be bools, got {regressed!r}, {unjudged!r}")
    return EXIT_REGRESSION if regressed else EXIT_CANNOT_RUN if unjudged else EXIT_OK


class GateCannotRun(RuntimeError):
    """The gate could not produce a verdict. The CLI turns it into exit code 2."""
