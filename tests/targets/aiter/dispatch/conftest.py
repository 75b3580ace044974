"""One run of aiter e4048607's dispatch for every row the fast tests of this folder read (one
child: the CPU tier pays the import of fused_moe once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dispatch_rows import HAVE_TREE, TREE, fast_rows, run

#: the xdist group of every test that takes ``executed``: ``--dist loadgroup`` keeps them on one worker, where the
#: run happens once (test_dispatch.py's and test_pinned_facts.py's, spread over the slow step's workers, ran it on each)
EXECUTED_GROUP = "aiter-e4048607-executed-fast-rows"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "executed" in getattr(item, "fixturenames", ()) and item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.xdist_group(EXECUTED_GROUP))


@pytest.fixture(scope="session")
def executed():
    if not HAVE_TREE:
        pytest.skip(f"{TREE} absent")
    pytest.importorskip("pandas", reason="pandas not installed: aiter's fused_moe.py and ops/opus/common.py import it")
    return run(TREE, fast_rows())
