"""Bytecode outside the checkout, for the test suite's own processes (the root ``conftest.py``
imports this module first, before any test module is assertion-rewritten: a rewrite is cached
only where bytecode may be written).

Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's CPU images set it, to keep checkouts
clean), every run would recompile the package and re-rewrite every test module's asserts and
the plugins' loaded after it. The process then caches bytecode
under ``${XDG_CACHE_HOME:-~/.cache}/fp4moe/pycache`` (``sys.pycache_prefix``; nothing is written
into the checkout or any tree under test, whose children keep the environment as it is).
``FP4MOE_PYCACHE=0`` keeps the setting as inherited.
"""

from __future__ import annotations

import os
import sys


def outside_the_checkout() -> None:
    if not sys.dont_write_bytecode or sys.pycache_prefix or os.environ.get("FP4MOE_PYCACHE", "1") == "0":
        return
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(cache, "fp4moe", "pycache")
    sys.dont_write_bytecode = False


outside_the_checkout()
