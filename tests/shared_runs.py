"""One child run shared by the tests that assert on it: :class:`SharedRuns` calls a function whose
work is a child process once per distinct key for the whole session, and hands every caller a
deep copy. The fixtures that hold one live in ``tests/conftest.py`` (``aiter_api_runs``) and in the
test module that alone uses it (``kernel_runs``); a test that reads one
carries ``pytest.mark.xdist_group(SHARED_GROUP)`` so pytest-xdist (``--dist loadgroup``) runs
them on one worker, where the run happens once (on pytest >= 9.2 through the root conftest's
``_XdistGroupIds``, tests/ci/test_xdist_groups.py). The dispatch numerics children
(``tests/targets/aiter/dispatch/test_compute_dispatch.py``, ``DISPATCH_RUNS``) are keyed by a
digest of their inputs; the tests that run one case alike carry :data:`DISPATCH_GROUP`.

Sharing is sound only where what comes back is a function of the key: the trees keyed here are
never written after they are made (the e4048607 snapshot beside the checkout is read-only, a
test's planted copy is written once, in its fixture, before any run), and the children compute
deterministically (the kernel child's ``bitwise repeat`` rows check it).
"""

from __future__ import annotations

import copy
from pathlib import Path

#: the xdist group of every test that reads an aiter tree's shared child runs
SHARED_GROUP = "aiter-e4048607-children"
#: the xdist group of the tests that run one dispatch numerics case on the unmutated tree alike
DISPATCH_GROUP = "aiter-e4048607-dispatch-cases"


def tree_key(tree) -> Path:
    """The folder holding ``aiter/``, whichever of the two the caller named."""
    p = Path(tree).resolve()
    return p.parent if p.name == "aiter" and not (p / "aiter").is_dir() else p


class SharedRuns:
    """``fn`` called once per ``key(*args, **kw)``; ``children`` counts the calls that ran it,
    ``shared`` those answered from an earlier one. Every caller still judges what it gets; a
    gate run through it still applies its own registry, verdict, table and exit code."""

    def __init__(self, fn, key):
        self._fn, self._key, self._memo, self.children, self.shared = fn, key, {}, 0, 0

    def __call__(self, *args, **kw):
        key = self._key(*args, **kw)
        if key not in self._memo:
            self._memo[key] = self._fn(*args, **kw)
            self.children += 1
        else:
            self.shared += 1
        return copy.deepcopy(self._memo[key])


def kernel_key(tree, *, arch, timeout_s, device="cpu", shapes="tiny", extra_args=(), deadline=None, label=None):
    """``aiter_check.run_kernel_child``'s arguments that decide its record."""
    return tree_key(tree), arch, device, shapes, tuple(extra_args)


def api_key(src_kind, path, *, timeout_s, differential, allow_kwargs, deadline=None, layout_grid="dsv4"):
    """``aiter_check.run_in_child``'s (groups (a)-(d)) arguments that decide its record."""
    return src_kind, tree_key(path), differential, allow_kwargs, layout_grid
