"""``python -m fp4moe``: the ``fp4moe-gate`` command line (the console script's own entry,
``fp4moe.commands.entry``: the same options, exit codes and Ctrl-C handling)."""

from fp4moe.commands.entry import run

run()
