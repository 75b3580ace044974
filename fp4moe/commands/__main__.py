"""``python -m fp4moe.commands``: the same entry as the ``fp4moe-gate`` console script."""

from fp4moe.commands.entry import run

run()
