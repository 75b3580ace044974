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

Command line: ``WORKLOAD_MODULE GATE_TIMER_PY FD_ENV``. Protocol: one JSON request per stdin line,
one reply per request on the pipe in ``$FD_ENV``. Requests: ``hello``; ``setup`` {device,
patterns}; ``run`` {name, index}; ``quit``. Errors are replied as {"error": message}.
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


def main(argv: list[str]) -> int:
    workload_module, timer_path, fd_env = argv
    state = {"benches": {}, "timer": None}

    def reply(obj):
        _reply(fd_env, obj)

    for line in sys.stdin:
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "hello":
                import fp4moe

                reply({"fp4moe": os.path.dirname(os.path.abspath(fp4moe.__file__)), "python": sys.version.split()[0],
                       "executable": sys.executable})
            elif op == "setup":
                device = req["device"]
                reg = importlib.import_module(workload_module).registry(device)
                torch = sys.modules.get("torch")
                if torch is not None and str(device).split(":")[0] == "cpu":  # host timing: no intra-op pool stalls
                    torch.set_num_threads(int(os.environ.get("FP4MOE_TORCH_THREADS", "1")))
                timer = state["timer"] = _gate_timer(timer_path).DeviceTimer(device)
                patterns = req.get("patterns") or []
                names = [n for n in reg if not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns)]
                metas = {}
                for name in names:
                    fn, inputs, meta = reg[name]()
                    for i in range(WARMUP):
                        fn(inputs[i % len(inputs)])
                    timer.synchronize()
                    state["benches"][name] = (fn, inputs)
                    metas[name] = _jsonable({**meta, **timer.metadata()})
                reply({"benchmarks": metas, "available": sorted(reg), "loaded": loaded_files()})
            elif op == "run":
                fn, inputs = state["benches"][req["name"]]
                reply({"seconds": state["timer"].time_call(fn, inputs[int(req["index"]) % len(inputs)])})
            elif op == "quit":
                reply({"bye": True, "loaded": loaded_files()})
                return 0
            else:
                reply({"error": f"unknown request {op!r}"})
        except Exception as e:  # noqa: BLE001 -- reported to the gate, which exits 2
            where = traceback.format_exc().strip().splitlines()
            reply({"error": f"{type(e).__name__}: {e} [{where[-2].strip() if len(where) > 1 else ''}]"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
