"""aiter's tuned CSVs are read bounded (issue #48 item 2): aiter's own pandas reads each whole in
the dispatch child (a tree's CSV that was a link to /dev/zero grew past 3 GB RSS, a FIFO hung it),
and the gate indexes them. Each CSV the tree's ``fused_moe`` merges must be a regular file within
``loader.TUNED_CSV_MAX_BYTES``, checked by ``stat`` before any child starts and in the child before
aiter's merge; the gate's own reads are bounded. CPU tier."""

from __future__ import annotations

import os

import pytest

from fp4moe.targets.aiter.dispatch import loader, table

pytestmark = pytest.mark.reliability


def test_the_tuned_csvs_of_a_tree_are_checked_before_aiter_reads_them(tmp_path):
    """aiter's pandas reads each tuned CSV whole in the dispatch child: a link to /dev/zero grew
    past 3 GB RSS, a FIFO hung it. The gate (and the child, before aiter's merge) checks each."""
    root = tmp_path / "t"
    (root / "aiter/configs/model_configs").mkdir(parents=True)
    (root / "aiter/configs/tuned_fmoe.csv").write_text("token,model_dim\n1,7168\n")
    bad = root / "aiter/configs/model_configs/dsv4_tuned_fmoe.csv"
    os.mkfifo(bad)
    (root / "aiter/configs/model_configs/a_untuned_fmoe.csv").symlink_to("/dev/zero")  # not merged: not read
    srcs = loader.tuned_csvs(root)
    assert srcs == [root / "aiter/configs/tuned_fmoe.csv", bad]
    with pytest.raises(loader.DispatchTreeError, match=rf"tuned CSV {bad}: is a FIFO, not a regular file"):
        loader.check_tuned_csvs(srcs)
    with pytest.raises(OSError, match="is a FIFO"):
        list(table.read_csv_rows(bad))
    bad.unlink()
    bad.write_text("token,model_dim\n2,4096\n")
    os.truncate(bad, loader.TUNED_CSV_MAX_BYTES + 1)
    with pytest.raises(loader.DispatchTreeError, match=rf"{bad}: {loader.TUNED_CSV_MAX_BYTES + 1} bytes, more than"):
        loader.check_tuned_csvs(srcs)
    loader.check_tuned_csvs(srcs[:1])
    assert [(n, r["model_dim"]) for n, r in table.read_csv_rows(srcs[0])] == [(2, "7168")]
