"""A judged child for tests/infra/test_runner.py: ``python runner_child.py MODE``.

It plays the code under test: it doubles the parent's input tensor ``x`` (mode ``ok``, the only
one that imports torch), or has one accident per mode (raises, exits, hangs, floods, daemonizes,
writes caches, returns a broken record or output)."""

import os
import subprocess
import sys
import time
from pathlib import Path

from fp4moe.infra import runner

SCHEMA = runner.RecordSchema("runner-test", 1, {"mode": str, "n": int})


def main(mode: str) -> int:
    with runner.child_session(SCHEMA) as s:
        s.stage(f"running mode {mode}")
        if mode == "raise":
            raise ValueError("boom \x1b[2J exit 0 " + "x" * 5000)
        if mode == "exit":
            sys.exit(0)
        if mode == "osexit":
            os._exit(0)
        if mode == "hang":
            time.sleep(600)
        if mode == "flood":
            os.write(1, b"\x1b[2J" + b"y" * (8 << 20))
            os._exit(0)
        if mode == "caches":  # a compiler cache and a dot-file under HOME, a temp file under TMPDIR
            for var in ("TRITON_CACHE_DIR", "HOME", "TMPDIR"):
                Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
                Path(os.environ[var], "left-by-the-child").write_text(var)
            print("wrote under", os.environ["HOME"], os.environ["TMPDIR"])
        if mode == "daemon":  # a process in a session of its own, still running when the child ends
            subprocess.Popen(["sleep", sys.argv[2]], start_new_session=True)
        if mode in ("schema", "symlink", "fifo", "no-finish", "not-a-list"):
            out = Path(os.environ[runner.OUTPUT_DIR_ENV], "out")
            if mode == "symlink":
                out.symlink_to("/dev/zero")
            if mode == "fifo":
                os.mkfifo(out)
            if mode == "no-finish":
                return 0
            if mode == "schema":
                out.write_text("1")
            s._outputs.append("out")
            if mode == "not-a-list":
                s._write({"schema": "runner-test", "schema_version": 1, "mode": mode, "n": 1, "outputs": "out"})
                s.done = True
                return 0
            s.finish({"mode": mode, "n": 1, **({"extra": True} if mode == "schema" else {})})
            return 0
        if mode == "json":
            s.put_json("meta", {"rows": [1, 2, 3]})
            s.finish({"mode": mode, "n": 3})
            return 0
        if mode == "ok":
            x = s.input_tensors("inp")["x"]
            s.put_tensors("out", {"y": x * 2})
            s.put_json("meta", {"rows": x.shape[0]})
            s.finish({"mode": mode, "n": int(x.numel())})
            return 0
        s.finish({"mode": mode, "n": 0})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
