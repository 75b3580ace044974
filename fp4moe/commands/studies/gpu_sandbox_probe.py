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

``--parts`` adds the confinement taken apart (:data:`PARTS`, each in ``pid+proc``): Landlock
alone, the seccomp filter alone, Landlock with ``/dev``, ``/dev/shm``, ``/proc``, ``/sys`` or ``/``
writable; ``--strace`` runs each failed setting again under strace (``strace`` on PATH) and keeps
the calls the sandbox refused. That is how the confinement's one CUDA need was found on the
H200: the driver writes ``/proc/self/task/<tid>/comm`` to name its threads
(``fp4moe.infra.confine.OWN_TASKS`` now allows exactly that).

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
import re
import shutil
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys
spec = json.loads(sys.argv[1])  # {"landlock": extra writable folders or None (no Landlock), "metadata": bool}
why = None
if spec["landlock"] is not None:
    from fp4moe.infra.confine import confine_writes
    why = confine_writes([os.environ["TMPDIR"], *spec["landlock"]], metadata=spec["metadata"])
elif spec["metadata"]:
    from fp4moe.infra.confine import refuse_metadata_changes
    why = refuse_metadata_changes()
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

#: what the child applies before CUDA starts: Landlock with these folders writable besides its
#: scratch folder (None: no Landlock), and the seccomp metadata filter
OPEN = None
CONFINED = {"landlock": [], "metadata": True}
#: setting -> (pidns.py way or None for no namespace, the confinement or None)
SETTINGS = {
    "sweep": (None, OPEN),
    "pid": ("pid", OPEN),
    "pid+proc": ("pid+proc", OPEN),
    "pid+proc+confined": ("pid+proc", CONFINED),
    "sweep+confined": (None, CONFINED),
}
#: the confinement taken apart, each in pid+proc: which part CUDA cannot run under (``--parts``)
PARTS = {
    "pid+proc+landlock": ("pid+proc", {"landlock": [], "metadata": False}),
    "pid+proc+seccomp": ("pid+proc", {"landlock": None, "metadata": True}),
    "pid+proc+landlock+dev": ("pid+proc", {"landlock": ["/dev"], "metadata": False}),
    "pid+proc+landlock+shm": ("pid+proc", {"landlock": ["/dev/shm"], "metadata": False}),
    "pid+proc+landlock+proc": ("pid+proc", {"landlock": ["/proc"], "metadata": False}),
    "pid+proc+landlock+sys": ("pid+proc", {"landlock": ["/sys"], "metadata": False}),
    "pid+proc+landlock+root": ("pid+proc", {"landlock": ["/"], "metadata": False}),
}
#: strace's line for a call the sandbox refused
DENIED = re.compile(r"= -1 (EACCES|EPERM|EROFS|EXDEV)")
CHILD_TIMEOUT_S = 300.0


def _way(way: str | None) -> str | None:
    """The way to use for ``way`` here: as root the plain one, else its user-namespace form."""
    if way is None or os.getuid() == 0:
        return way
    return f"user+{way}"


def probe(setting: str, *, strace: bool = False) -> dict:
    """One child started the way ``setting`` names; with ``strace`` (and strace on PATH) the
    child runs traced and the row keeps the calls the sandbox refused (``denied``)."""
    from fp4moe.infra import childproc
    from fp4moe.infra.paths import REPO_ROOT

    way, confinement = {**SETTINGS, **PARTS}[setting]
    way = _way(way)
    spec = confinement or {"landlock": None, "metadata": False}
    with tempfile.TemporaryDirectory(prefix="fp4moe-gpu-probe-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                   XDG_CACHE_HOME=os.path.join(tmp, "cache"), HOME=tmp,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        env.pop("TRITON_INTERPRET", None)
        script = os.path.join(tmp, "probe_child.py")  # Triton reads a @jit function's source from its file
        with open(script, "w") as f:
            f.write(CHILD)
        cmd = [sys.executable, script, json.dumps(spec)]
        trace = os.path.join(tmp, "strace.txt") if strace and shutil.which("strace") else None
        if trace:
            cmd = [shutil.which("strace"), "-f", "-qq", "-o", trace, "-e", "trace=file,desc,network,ipc", *cmd]
        if way:
            cmd = [sys.executable, "-I", "-S", str(childproc.PIDNS_INIT), "--how", way, "--", *cmd]
        res = childproc.run_child(cmd, timeout_s=CHILD_TIMEOUT_S, env=env, cwd=tmp, want_record=False, namespace=False)
        denied = _denied(trace) if trace else None
    last = (res.stdout.strip().splitlines() or [""])[-1]
    try:
        got = json.loads(last)
    except ValueError:
        got = {}
    confined = confinement is not None
    ok = res.rc == 0 and got.get("ok") is True and (not confined or got.get("unconfined") is None)
    row = {"setting": setting, "way": way or "none", "confined": confined, "spec": spec, "ok": ok, "rc": res.rc,
           "timed_out": res.timed_out, "seconds": round(res.seconds, 1), **got,
           "tail": "" if ok else res.tail[-800:]}
    if denied is not None:
        row["denied"] = denied
    return row


def _denied(trace: str, limit: int = 60) -> list[str]:
    """strace's lines (every process of the child) for the calls that were refused, the first
    ``limit``; a call strace split between threads (``<unfinished ...>``, then ``<... resumed>``)
    is joined again, so the line keeps its path."""
    try:
        lines = Path(trace).read_text(errors="replace").splitlines()
    except OSError as e:
        return [f"(no strace output: {e})"]
    pending, whole = {}, []
    for ln in lines:
        pid, _, rest = ln.partition(" ")
        if ln.endswith("<unfinished ...>"):
            pending[pid] = ln[: -len("<unfinished ...>")].rstrip()
        elif rest.lstrip().startswith("<... ") and pid in pending:
            whole.append(pending.pop(pid) + rest.lstrip().split(" resumed>", 1)[-1])
        else:
            whole.append(ln)
    return [ln[:300] for ln in whole if DENIED.search(ln)][:limit]


def _machine() -> dict:
    """The kernel, its Landlock ABI and the device nodes: what a failed row is read against."""
    from fp4moe.infra import confine

    dev = sorted(os.listdir("/dev")) if os.path.isdir("/dev") else []
    return {"kernel": os.uname().release, "landlock_abi": confine.landlock_abi(), "strace": shutil.which("strace"),
            "dev": [d for d in dev if d.startswith(("nvidia", "dri", "kfd", "shm"))]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.environ["OUT"], "gpu_sandbox_probe.json") if os.environ.get("OUT") else "gpu_sandbox_probe.json"
    p.add_argument("--out", default=default, help=f"the JSON result (default {default})")
    p.add_argument("--only", choices=sorted({**SETTINGS, **PARTS}), action="append",
                   help="only these settings (default: all of SETTINGS, and PARTS with --parts)")
    p.add_argument("--parts", action="store_true",
                   help="also the confinement taken apart (Landlock alone, seccomp alone, Landlock with /dev, /dev/shm, "
                        "/proc, /sys or / writable): which part a failed confined row needs")
    p.add_argument("--strace", action="store_true", help="trace each failed setting again with strace (where on PATH)")
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
    for setting in a.only or [*SETTINGS, *(PARTS if a.parts else ())]:
        rows.append(probe(setting))
        if not rows[-1]["ok"] and a.strace:
            rows[-1]["denied"] = probe(setting, strace=True).get("denied")
        print(json.dumps(rows[-1]), flush=True)
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "hip": getattr(torch.version, "hip", None), "uid": os.getuid(), "machine": _machine(), "probe": childproc.containment()[1],
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
