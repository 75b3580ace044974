"""``sglang-check --sglang-wheel W`` where W cannot be read to its end (issue #48 item 2): a FIFO,
a link to /dev/zero, a sparse giant. Each is exit 2 at once naming ``--sglang-wheel`` and what W
is, never hashed or waited on. CPU tier (refused before any unpack or child)."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.reliability

SPOILS = {"a FIFO": "is a FIFO, not a regular file", "/dev/zero": "is a character device (/dev/zero)",
          "a sparse giant": "3221225472 bytes, more than the 2147483648"}


@pytest.mark.parametrize("how", list(SPOILS))
def test_a_wheel_that_reads_without_end_is_exit_2_naming_it(tmp_path, gate, how):
    whl = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    if how == "a FIFO":
        os.mkfifo(whl)
    elif how == "/dev/zero":
        whl.symlink_to("/dev/zero")
    else:
        whl.write_bytes(b"PK")
        os.truncate(whl, 3 << 30)
    t0 = time.monotonic()
    gate("sglang-check", "--sglang-wheel", whl, "--timeout", "30", "-q").cannot_run(f"--sglang-wheel {whl}", SPOILS[how])
    assert time.monotonic() - t0 < 10
