"""A harness child for tests/infra/test_harness.py: ``python harness_child.py MODE``.

It plays the code under test: it doubles the parent's input tensor ``x`` (mode ``ok``), or
misbehaves in one way per mode (raises, exits, hangs, tampers with its outputs, writes a record
of its own, breaks the schema)."""

import os
import sys
import time
from pathlib import Path

from fp4moe.infra import childproc, harness

SCHEMA = harness.RecordSchema("harness-test", 1, {"mode": str, "n": int})


def main(mode: str) -> int:
    with harness.child_session(SCHEMA) as s:
        s.stage(f"running mode {mode}")
        x = s.input_tensors("inp")["x"]
        if mode == "raise":
            raise ValueError("boom " + "x" * 5000)
        if mode == "exit":
            sys.exit(0)
        if mode == "osexit":
            os._exit(0)
        if mode == "hang":
            time.sleep(600)
        if mode == "write-input":
            Path(os.environ[harness.INPUT_DIR_ENV], "inp.safetensors").write_bytes(b"changed")
        s.put_tensors("out", {"y": x * 2})
        s.put_json("meta", {"rows": x.shape[0]})
        if mode == "tamper":
            Path(os.environ[harness.OUTPUT_DIR_ENV], "out").write_bytes(b"not what the harness wrote")
        if mode == "symlink":
            out = Path(os.environ[harness.OUTPUT_DIR_ENV], "out")
            out.unlink()
            out.symlink_to("/etc/passwd")
        if mode == "forge":  # a record of its own, without the key
            Path(os.environ[childproc.RESULT_ENV]).write_text('{"body": "{}", "hmac": "00"}')
            os._exit(0)
        if mode == "schema":
            s.finish({"mode": mode, "n": 1, "extra": True})
            return 0
        if mode == "no-finish":
            return 0
        s.finish({"mode": mode, "n": int(x.numel())})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
