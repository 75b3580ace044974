"""The aiter-check child (groups (a)-(d): API, layouts, capabilities, aiter's references):
``python -m fp4moe.gates.aiter_check_child``, started by ``fp4moe.gates.aiter_check.run_in_child``
and never imported by a parent. It takes the record writer and confines its writes before any
aiter code runs (``fp4moe.gates.aiter_check.child_main``)."""

from __future__ import annotations

import sys

from fp4moe.gates.aiter_check import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
