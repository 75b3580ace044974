"""Does GPU work run inside the children's sandbox? One child per setting, on a CUDA or ROCm GPU.

Settings (:data:`SETTINGS`), each a child of ``fp4moe.infra.childproc.run_child`` started the
way that setting names (``fp4moe/infra/pidns.py --how WAY``, forced, not the probe's choice):

- ``sweep``: no namespace, no confinement (how the GPU kernel child and perf ab's GPU workers run);
- ``pid``: a PID namespace with the host's /proc (where cudaGetDeviceCount failed, error 304,
  on the H200);
- ``pid+proc``: a PID and mount namespace with its own /proc (how CPU children run now);
- ``pid+proc+confined``: the same with ``confine_writes`` (Landlock writes to the scratch
  folder, /dev limited to null, zero, urandom and the GPU nodes, the seccomp metadata filter,
  signal scoping: how the SGLang child runs);
- ``sweep+confined``: no namespace, confined.

Each child initialises the driver (``torch.cuda.device_count()``, the error text kept when it
raises), allocates, compiles and runs a Triton kernel (its cache in the scratch folder) and
checks the sum bitwise. The result -- one row per setting: ``ok``, the driver's device count or
its error, the containment, the confinement's reason if it was not applied, the child's last
output when it failed -- is written as one JSON document (atomically) to ``--out`` (default
``$OUT/gpu_sandbox_probe.json``, else ``./gpu_sandbox_probe.json``) and printed. Exit 0 when
every setting ran its kernel, 1 when any failed (the rows say which: a failed ``pid`` row with
an ok ``pid+proc`` row means the private /proc is what CUDA needs), 2 when it could not probe at
all (no GPU visible to this process, the output not writable).

    python3 -m fp4moe.commands.studies.gpu_sandbox_probe --out "$OUT/gpu_sandbox_probe.json"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys
confine = sys.argv[1] == "confined"
why = None
if confine:
    from fp4moe.infra.confine import confine_writes
    why = confine_writes([os.environ["TMPDIR"]])
row = {"unconfined": why, "pid_here": os.getpid(), "proc_self": os.readlink("/proc/self")}
import torch
try:
    row["device_count"] = torch.cuda.device_count()
    torch.cuda.init()
except Exception as e:  # the driver's own words: the point of this probe
    row.update(ok=False, cuda_error=f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")
    print(json.dumps(row))
    sys.exit(0)
import triton, triton.language as tl

@triton.jit
def add_one(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y + i, tl.load(x + i, mask=m) + 1.0, mask=m)

n = 1 << 20
x = torch.arange(n, device="cuda", dtype=torch.float32)
y = torch.empty_like(x)
add_one[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
torch.cuda.synchronize()
row.update(ok=bool(torch.equal(y, x + 1)), gpu=torch.cuda.get_device_name(0))
print(json.dumps(row))
"""

#: setting -> (pidns.py way or None for no namespace, confined)
SETTINGS = {
    "sweep": (None, False),
    "pid": ("pid", False),
    "pid+proc": ("pid+proc", False),
    "pid+proc+confined": ("pid+proc", True),
    "sweep+confined": (None, True),
}
CHILD_TIMEOUT_S = 300.0


def _way(way: str | None) -> str | None:
    """The way to use for ``way`` here: as root the plain one, else its user-namespace form."""
    if way is None or os.getuid() == 0:
        return way
    return f"user+{way}"


def probe(setting: str) -> dict:
    from fp4moe.infra import childproc
    from fp4moe.infra.paths import REPO_ROOT

    way, confined = SETTINGS[setting]
    way = _way(way)
    with tempfile.TemporaryDirectory(prefix="fp4moe-gpu-probe-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                   XDG_CACHE_HOME=os.path.join(tmp, "cache"), HOME=tmp,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        env.pop("TRITON_INTERPRET", None)
        script = os.path.join(tmp, "probe_child.py")  # Triton reads a @jit function's source from its file
        with open(script, "w") as f:
            f.write(CHILD)
        cmd = [sys.executable, script, "confined" if confined else "open"]
        if way:
            cmd = [sys.executable, "-I", "-S", str(childproc.PIDNS_INIT), "--how", way, "--", *cmd]
        res = childproc.run_child(cmd, timeout_s=CHILD_TIMEOUT_S, env=env, cwd=tmp, want_record=False, namespace=False)
    last = (res.stdout.strip().splitlines() or [""])[-1]
    try:
        got = json.loads(last)
    except ValueError:
        got = {}
    ok = res.rc == 0 and got.get("ok") is True and (not confined or got.get("unconfined") is None)
    return {"setting": setting, "way": way or "none", "confined": confined, "ok": ok, "rc": res.rc,
            "timed_out": res.timed_out, "seconds": round(res.seconds, 1), **got,
            "tail": "" if ok else res.tail[-800:]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.environ["OUT"], "gpu_sandbox_probe.json") if os.environ.get("OUT") else "gpu_sandbox_probe.json"
    p.add_argument("--out", default=default, help=f"the JSON result (default {default})")
    p.add_argument("--only", choices=sorted(SETTINGS), action="append", help="only these settings (default: all)")
    a = p.parse_args(argv)
    from fp4moe.infra import childproc

    out = Path(a.out)
    if not out.parent.is_dir():
        print(f"gpu_sandbox_probe: --out {out}: its folder does not exist", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_sandbox_probe: no GPU visible to this process (torch {torch.__version__}, "
              f"cuda {torch.version.cuda}, hip {getattr(torch.version, 'hip', None)})", file=sys.stderr)
        return 2
    rows = []
    for setting in a.only or SETTINGS:
        rows.append(probe(setting))
        print(json.dumps(rows[-1]), flush=True)
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "hip": getattr(torch.version, "hip", None), "uid": os.getuid(), "probe": childproc.containment()[1],
           "ok": all(r["ok"] for r in rows), "rows": rows,
           "private_proc_fixes_cuda": _verdict(rows)}
    try:
        _write_atomically(out, json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        print(f"gpu_sandbox_probe: --out {out}: {e}", file=sys.stderr)
        return 2
    print(f"gpu_sandbox_probe: {sum(r['ok'] for r in rows)}/{len(rows)} settings ran the kernel; {out}")
    return 0 if doc["ok"] else 1


def _write_atomically(path: Path, text: str) -> None:
    """A temporary file beside ``path``, then renamed over it: a reader sees the old file or the new."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _verdict(rows: list[dict]) -> str:
    by = {r["setting"]: r["ok"] for r in rows}
    if "pid" not in by or "pid+proc" not in by:
        return "not probed (both the pid and the pid+proc settings are needed)"
    if by["pid+proc"]:
        return "CUDA works in a PID namespace with its own /proc" + ("" if by["pid"] else " (and not with the host's /proc)")
    return "CUDA fails in a PID namespace even with its own /proc: GPU children stay without one"


if __name__ == "__main__":
    sys.exit(main())
