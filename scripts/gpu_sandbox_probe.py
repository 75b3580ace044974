"""Does GPU work run inside the children's sandbox? One child per setting, on a CUDA or ROCm GPU.

For each setting -- the PID namespace alone (how the GPU kernel child runs), and the PID
namespace with ``confine_writes`` (Landlock writes to the scratch folder, /dev limited to null,
zero, urandom and the GPU nodes, the seccomp metadata filter, signal scoping: how the SGLang
child runs) -- a child (``fp4moe.infra.childproc.run_child``) allocates on the GPU, compiles and
runs a Triton kernel (its cache in the scratch folder) and checks the sum. Prints one JSON line
per setting: ``ok``, the containment used, the confinement's reason if it was not applied, the
child's last output lines. Exit 0 when every setting ran, 1 otherwise.

    PYTHONPATH=. python3 scripts/gpu_sandbox_probe.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

CHILD = r"""
import json, os, sys
confine = sys.argv[1] == "confined"
why = None
if confine:
    from fp4moe.infra.confine import confine_writes
    why = confine_writes([os.environ["TMPDIR"]])
import torch, triton, triton.language as tl

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
ok = bool(torch.equal(y, x + 1))
print(json.dumps({"ok": ok, "unconfined": why, "gpu": torch.cuda.get_device_name(0)}))
"""


def main() -> int:
    from fp4moe.infra import childproc
    from fp4moe.infra.paths import REPO_ROOT

    failed = 0
    for setting in ("namespace", "confined"):
        with tempfile.TemporaryDirectory(prefix="fp4moe-gpu-probe-") as tmp:
            env = dict(os.environ, TMPDIR=tmp, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                       XDG_CACHE_HOME=os.path.join(tmp, "cache"), HOME=tmp,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
            env.pop("TRITON_INTERPRET", None)
            script = os.path.join(tmp, "probe_child.py")  # Triton reads a @jit function's source from its file
            with open(script, "w") as f:
                f.write(CHILD)
            res = childproc.run_child([sys.executable, script, setting], timeout_s=600, env=env, cwd=tmp,
                                      want_record=False)
        last = (res.stdout.strip().splitlines() or [""])[-1]
        try:
            got = json.loads(last)
        except ValueError:
            got = {"ok": False}
        ok = res.rc == 0 and got.get("ok") is True
        failed += not ok
        print(json.dumps({"setting": setting, "ok": ok, "rc": res.rc, "contained": res.contained, **got,
                          "tail": res.tail[-600:] if not ok else ""}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
