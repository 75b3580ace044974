"""``aiter-check`` on a tree whose tuned CSV cannot be read to its end (issue #48 item 2): a FIFO
hung the gate past ``--timeout 30``, a link to /dev/zero grew past 3 GB RSS (aiter's pandas in
the dispatch child; the gate's own index of the CSVs). Each is exit 2 at once, before any child,
naming the CSV and what it is. The tree is e4048607 from ``../shared`` as links, one CSV spoiled
(the FIFO in the CPU tier: each run scans the tree's sources, ~0.5 s; the others in the slow step)."""

from __future__ import annotations

import os
import time

import pytest

from fp4moe.infra.paths import shared_dir
from fp4moe.targets.aiter.dispatch import loader

pytestmark = pytest.mark.reliability

TREE = (shared_dir() / "aiter" / "e4048607") if shared_dir() else None
CSV = "aiter/configs/tuned_fmoe.csv"


def _linked_tree(dst, src):
    """``src`` as a tree of links, the folders on the way to the tuned CSV real (so it can be replaced)."""
    dst.mkdir()
    for name in os.listdir(src):
        (dst / name).symlink_to(src / name)
    for part in ("aiter", "aiter/configs"):
        (dst / part).unlink()
        (dst / part).mkdir()
        for name in os.listdir(src / part):
            (dst / part / name).symlink_to(src / part / name)
    (dst / CSV).unlink()
    return dst


SPOILS = {"a FIFO": "is a FIFO, not a regular file", "/dev/zero": "is a character device (/dev/zero)",
          "a sparse giant": f"more than the {loader.TUNED_CSV_MAX_BYTES}"}


@pytest.mark.skipif(TREE is None or not (TREE / CSV).is_file(), reason="../shared/aiter/e4048607 absent")
@pytest.mark.parametrize("how", ["a FIFO", *(pytest.param(h, marks=pytest.mark.slow) for h in SPOILS if h != "a FIFO")])
def test_a_tuned_csv_that_reads_without_end_is_exit_2_naming_it(tmp_path, gate, how):
    root = _linked_tree(tmp_path / "t", TREE)
    csv = root / CSV
    if how == "a FIFO":
        os.mkfifo(csv)
    elif how == "/dev/zero":
        csv.symlink_to("/dev/zero")
    else:
        csv.write_bytes((TREE / CSV).read_bytes())
        os.truncate(csv, 3 << 30)
    t0 = time.monotonic()
    gate("aiter-check", "--aiter-src", root, "--no-kernels", "--no-differential", "--timeout", "30", "--json", tmp_path / "r.json"
         ).cannot_run(f"tuned CSV {csv}", SPOILS[how])
    assert time.monotonic() - t0 < 30
