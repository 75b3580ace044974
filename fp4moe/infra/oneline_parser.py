"""An argparse parser whose usage error is one line naming the option (exit status 2 kept)."""

from __future__ import annotations

import argparse

from fp4moe.infra.errors import EXIT_CANNOT_RUN


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line naming the option (argparse's own exit status 2 is kept)."""

    def error(self, message):
        self.exit(EXIT_CANNOT_RUN, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")
