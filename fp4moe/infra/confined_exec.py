"""Confine this process, then become the command: ``python -I -S confined_exec.py -- CMD...``.

For a child whose code the project does not own (a perf ab side's worker, which runs a checkout's
or an environment's own Python), confinement cannot be asked of that code: this launcher applies
``fp4moe/infra/confine.py``'s ``confine_from_env`` (writes beneath ``$FP4MOE_WRITABLE`` only, the
seccomp metadata filter, signal scoping, its own threads' ``/proc`` entries) and then
``execv``s the command. Landlock domains and seccomp filters survive ``execve``, and the pid
stays the same, so the command and all it starts run confined.

Executed by path by ``fp4moe.infra.childproc.Worker`` (inside ``pidns.py`` where the gate holds
its children in a namespace), never imported: standard library only, ``confine.py`` loaded by
its file path, nothing of the project's package. Where the confinement fails for any reason but
a kernel without Landlock (which ``childproc.containment_of`` already reports from the
environment) or a machine without a seccomp table (reported the same way) the launcher exits 127 with one line on stderr: a child asked to run confined
never runs unconfined.

``$FP4MOE_CPUS`` (a comma list of CPU numbers), where set: the launcher also pins itself to those
CPUs before the command starts (``os.sched_setaffinity``; inherited by every thread and process
the command starts). ``perf ab`` on a CPU pins both sides' workers to one and the same core, so
no side owns a core the other lacks (an A/A run on a loaded 2-core machine, unpinned, read the
second worker 4-7 % slower in 3 of 13 runs, 2 of them called regressed). A list that cannot be
applied exits 127 like a confinement that cannot.
"""

import importlib.util
import os
import sys

#: the exit status of a confinement that could not be applied (as a shell's "command not run")
CANNOT_CONFINE = 127
#: the CPUs to pin to, a comma list (``fp4moe.gates.perf.ab.worker_env`` sets it on a CPU run)
CPUS_ENV = "FP4MOE_CPUS"


def _confine_module():
    spec = importlib.util.spec_from_file_location("_fp4moe_confine", os.path.join(os.path.dirname(__file__), "confine.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("confined_exec: usage: confined_exec.py -- CMD...", file=sys.stderr)
        return 2
    cpus = os.environ.get(CPUS_ENV, "").strip()
    if cpus:
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except (ValueError, OSError) as e:
            print(f"confined_exec: ${CPUS_ENV}={cpus!r}: cannot pin to these CPUs: {e}", file=sys.stderr)
            return CANNOT_CONFINE
    confine = _confine_module()
    try:
        why = confine.confine_from_env()
    except OSError as e:  # a writable folder that is not there
        why = f"{e.filename}: {e.strerror}"
    no_filter_here = bool(why) and why.startswith(confine.SECCOMP_PREFIX + "not available on")
    if why and confine.landlock_abi() >= 1 and not no_filter_here:
        print(f"confined_exec: cannot confine {argv[1]}: {' '.join(why.split())[:300]}", file=sys.stderr)
        return CANNOT_CONFINE
    try:
        os.execv(argv[1], argv[1:])
    except OSError as e:
        print(f"confined_exec: cannot start {argv[1]}: {e.strerror}", file=sys.stderr)
        return CANNOT_CONFINE
    return CANNOT_CONFINE  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
