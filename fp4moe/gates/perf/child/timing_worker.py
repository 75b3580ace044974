"""The gate's own worker for ``fp4moe-gate perf ab``: the side's checkout gives the workload,
this file times it.

The gate runs THIS file (by path, from the gate's package) for both sides, in the side's
interpreter, through ``fp4moe.gates.perf.ab.BOOTSTRAP``: ``fp4moe`` is then the side's checkout
(or its environment's install). The side provides only its workload registry: the module named
on the command line (``fp4moe.gates.perf.child.ab_worker`` and its older homes), whose
``registry(device)`` maps benchmark names to builders returning ``(fn, inputs, meta)``. Warm-up,
synchronisation and the clock are the gate's: ``fp4moe/gates/perf/timer.py`` of the GATE, loaded
by path under a private name, so a side whose own timer is changed (units, warm-up, sync) times
exactly as any other. Nothing here imports the gate's ``fp4moe``; the reply pipe's variable is
given by the gate.

One worker may serve BOTH sides (``perf ab --workers shared``, the default on a CPU for two
checkouts): each side's ``fp4moe`` modules are imported from its own checkout and kept in a
table of their own; before any request for a side, its table is put into ``sys.modules`` (the
other's taken out) and its checkout into ``sys.path[0]``, so a function of the side that imports
lazily still finds its own code. Base and head then run in ONE process: no per-process bias
(memory placement, scheduling) can tell them apart, which two workers of one checkout on a busy
CPU could not avoid (A/As read 0.91-1.08). Everything else (torch, numpy) is shared, so a side
that patches a shared library at import changes both sides: ``--workers separate`` then.

Command line: ``GATE_TIMER_PY FD_ENV SIDES_JSON`` (a list of [label, checkout root or "",
workload module]). Protocol: one JSON request per stdin line, one reply per request on the pipe
in ``$FD_ENV``; a request names its ``side`` (default: the first). Requests: ``hello``;
``setup`` {device, patterns}; ``run`` {name, index}; ``quit`` (with a side: that side's loaded
files, the worker goes on; without: the worker ends). Errors are replied as {"error": message}.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import json
import os
import sys
import traceback

#: untimed calls per benchmark before its first timed one (the gate's, not the side's)
WARMUP = 3


def _reply(fd_env: str, obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    fd = int(os.environ[fd_env])
    while data:
        data = data[os.write(fd, data):]


def _gate_timer(path: str):
    spec = importlib.util.spec_from_file_location("_fp4moe_gate_timer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _jsonable(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool, type(None), list))}


def loaded_files() -> list[str]:
    """Every ``fp4moe`` module file this worker has imported (the gate checks they are its side's)."""
    def name(n, m):
        return getattr(getattr(m, "__spec__", None), "name", None) or n

    return sorted({os.path.abspath(m.__file__) for n, m in list(sys.modules.items())
                   if name(n, m).split(".")[0] == "fp4moe" and getattr(m, "__file__", None)})


def _ours(name: str) -> bool:
    return name == "fp4moe" or name.startswith("fp4moe.")


class Sides:
    """Each side's ``fp4moe`` module table, swapped into ``sys.modules`` on :meth:`enter`."""

    def __init__(self, specs: list):
        self.roots = {label: root for label, root, _ in specs}
        self.modules = {label: module for label, _, module in specs}
        self.first = specs[0][0]
        self.tables: dict = {}
        self.current = None

    def enter(self, label) -> None:
        label = label or self.first
        if label not in self.roots:
            raise KeyError(f"no side {label!r}")
        if label == self.current:
            return
        if self.current is not None:
            self.tables[self.current] = {k: sys.modules.pop(k) for k in [k for k in sys.modules if _ours(k)]}
        if self.roots[label]:
            sys.path[0] = self.roots[label]  # the bootstrap put the first side's checkout there
        importlib.invalidate_caches()
        sys.modules.update(self.tables.get(label, {}))
        self.current = label


def main(argv: list[str]) -> int:
    timer_path, fd_env, specs = argv[0], argv[1], json.loads(argv[2])
    sides = Sides(specs)
    benches: dict = {}
    state = {"timer": None}

    def reply(obj):
        _reply(fd_env, obj)

    for line in sys.stdin:
        try:
            req = json.loads(line)
            op = req.get("op")
            side = req.get("side") or sides.first
            if op == "quit" and "side" not in req:
                reply({"bye": True})
                return 0
            sides.enter(side)
            if op == "hello":
                import fp4moe

                reply({"fp4moe": os.path.dirname(os.path.abspath(fp4moe.__file__)), "python": sys.version.split()[0],
                       "executable": sys.executable})
            elif op == "setup":
                device = req["device"]
                reg = importlib.import_module(sides.modules[side]).registry(device)
                torch = sys.modules.get("torch")
                if torch is not None and str(device).split(":")[0] == "cpu":  # host timing: no intra-op pool stalls
                    torch.set_num_threads(int(os.environ.get("FP4MOE_TORCH_THREADS", "1")))
                if state["timer"] is None:
                    state["timer"] = _gate_timer(timer_path).DeviceTimer(device)
                timer = state["timer"]
                patterns = req.get("patterns") or []
                names = [n for n in reg if not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns)]
                metas = {}
                for name in names:
                    fn, inputs, meta = reg[name]()
                    for i in range(WARMUP):
                        fn(inputs[i % len(inputs)])
                    timer.synchronize()
                    benches[(side, name)] = (fn, inputs)
                    metas[name] = _jsonable({**meta, **timer.metadata()})
                reply({"benchmarks": metas, "available": sorted(reg), "loaded": loaded_files()})
            elif op == "run":
                fn, inputs = benches[(side, req["name"])]
                reply({"seconds": state["timer"].time_call(fn, inputs[int(req["index"]) % len(inputs)])})
            elif op == "quit":
                reply({"bye": True, "loaded": loaded_files()})
            else:
                reply({"error": f"unknown request {op!r}"})
        except Exception as e:  # noqa: BLE001 -- reported to the gate, which exits 2
            where = traceback.format_exc().strip().splitlines()
            reply({"error": f"{type(e).__name__}: {e} [{where[-2].strip() if len(where) > 1 else ''}]"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
