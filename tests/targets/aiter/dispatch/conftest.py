"""One run of aiter e4048607's dispatch for every row the fast tests of this folder read (one
child: the CPU tier pays the import of fused_moe once)."""

from __future__ import annotations

import pytest
from dispatch_rows import HAVE_TREE, TREE, fast_rows, run


@pytest.fixture(scope="session")
def executed():
    if not HAVE_TREE:
        pytest.skip(f"{TREE} absent")
    pytest.importorskip("pandas", reason="pandas not installed: aiter's fused_moe.py and ops/opus/common.py import it")
    return run(TREE, fast_rows())
