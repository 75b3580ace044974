"""The one child harness: code under test computes in a child, the parent judges what comes back.

Every gate that runs someone else's code (aiter's Python and kernels, SGLang's code, a mutant)
starts it here, and only here, so that a tree which patches the checker, the reference or the row
writer cannot change a verdict: those never exist in the process the tree runs in.

Index:

- :class:`Deadline` -- ONE total time limit (``--timeout``) shared by every child of a gate run;
  each child gets what is left, and a spent deadline is a cannot-run naming the option.
- :class:`RecordSchema` -- the typed schema of one child's record (name, version, fields): the
  child that writes it, the judge that reads it and the command that summarises it use the same
  one; an unknown or missing key is a named cannot-run, not a ``KeyError``.
- :func:`scratch_env` -- the child's environment: its working folder, TMPDIR, HOME and every
  compiler cache inside a scratch folder, writes confined there (``fp4moe.infra.confine``).
- :func:`run_judged` -- parent side: inputs written as safetensors files the child can read but not
  write, the child run time-limited and swept (``fp4moe.infra.childproc``), its authenticated record
  validated, its output files read back bounded (regular files only, size-capped, sha256 as the
  authenticated record states, safetensors -- never pickle) into a :class:`ChildOutputs`.
- :func:`child_session` -- child side: taken **before any code under test runs** (the record key,
  the confinement); ``put_tensors``/``put_json`` write outputs, ``stage`` says where the child is
  (named in the cannot-run line when the code under test exits, raises or hangs), ``finish`` writes
  the record. An exception or ``sys.exit`` from the code under test becomes a cannot-run record.

What this defends against, and what not: the code under test can compute anything and write its own
outputs (that is what is judged); it cannot write the verdict (no verdict is made in its process),
nor a record the parent accepts without the per-run key (``childproc.record_writer``), nor files
outside its scratch folder where Landlock exists, nor make the parent read a FIFO, a device or an
unbounded file. Code that digs the record key out of the harness's own frames can write a record:
it then still only reports outputs, which the parent judges.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fp4moe.infra import childproc
from fp4moe.infra.confine import WRITABLE_ENV, confine_from_env
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_regular_bytes
from fp4moe.infra.paths import REPO_ROOT

#: Environment variables the parent sets for a harness child.
OUTPUT_DIR_ENV = "FP4MOE_CHILD_OUTPUTS"
INPUT_DIR_ENV = "FP4MOE_CHILD_INPUTS"
STAGE_ENV = "FP4MOE_CHILD_STAGE"
#: Bytes the parent reads at most: the record, one output file, all output files together.
MAX_RECORD_BYTES = 8 * 1024 * 1024
MAX_OUTPUT_BYTES = 512 * 1024 * 1024
MAX_TOTAL_OUTPUT_BYTES = 2 * 1024 * 1024 * 1024
MAX_STAGE_BYTES = 4096
#: Longest line a cannot-run reason may have; text of the code under test is cut to QUOTE_CHARS.
MAX_LINE_CHARS = 400
QUOTE_CHARS = 200
#: Output names: a plain file name, no folders.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: Compiler and tool caches the code under test may write: sent into the scratch folder.
CACHE_VARS = ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME")


def quote(text: str, n: int = QUOTE_CHARS) -> str:
    """Text from the code under test, folded to one line, cut to ``n`` characters and quoted."""
    s = " ".join(str(text).split())
    return json.dumps(s if len(s) <= n else s[: n - 3] + "...")


def one_line(text: str, n: int = MAX_LINE_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def exception_line(e: BaseException, n: int = MAX_LINE_CHARS) -> str:
    """``Type: message`` of an exception, folded to one line of at most ``n`` characters."""
    return one_line(f"{type(e).__name__}: {e}", n)


# --------------------------------------------------------------------------- one deadline


class Deadline:
    """One total time limit for a gate run (``option``, e.g. ``--timeout``): every child is given
    :meth:`remaining` and so all of them together never outrun it."""

    def __init__(self, total_s: float, option: str = "--timeout"):
        childproc.check_timeout(option, total_s, allow_none=False)
        self.total_s, self.option = float(total_s), option
        self._end = time.monotonic() + self.total_s

    def remaining(self, what: str) -> float:
        left = self._end - time.monotonic()
        if left <= 0.05:
            raise GateCannotRun(f"{self.option} {self.total_s:g}: spent before {what} could start")
        return left

    def spent_line(self, what: str) -> str:
        return f"{what}: timed out, killed at the deadline ({self.option} {self.total_s:g} s, for the whole run)"


# --------------------------------------------------------------------------- record schema


@dataclass(frozen=True)
class RecordSchema:
    """A child's record: ``{"schema": name, "schema_version": version, **fields}``. ``fields`` maps each
    key to its type (or a tuple of types); keys in ``optional`` may be absent."""

    name: str
    version: int
    fields: dict
    optional: frozenset = frozenset()

    def validate(self, record: dict, label: str) -> dict:
        if record.get("schema") != self.name or record.get("schema_version") != self.version:
            raise GateCannotRun(f"{label}: the child's record is schema {record.get('schema')!r} version "
                                f"{record.get('schema_version')!r}, the judge reads {self.name!r} version {self.version}")
        body = {k: v for k, v in record.items() if k not in ("schema", "schema_version", "outputs")}
        unknown = sorted(set(body) - set(self.fields))
        missing = sorted(set(self.fields) - set(body) - set(self.optional))
        if unknown or missing:
            raise GateCannotRun(one_line(f"{label}: record {self.name} v{self.version}: "
                                         + (f"unknown key(s) {unknown} " if unknown else "")
                                         + (f"missing key(s) {missing}" if missing else "")))
        for k, v in body.items():
            if not isinstance(v, self.fields[k]) or (isinstance(v, bool) and bool not in _types(self.fields[k])):
                raise GateCannotRun(f"{label}: record {self.name}: {k!r} is {type(v).__name__}, "
                                    f"not {'/'.join(t.__name__ for t in _types(self.fields[k]))}")
        return body


def _types(t) -> tuple:
    return t if isinstance(t, tuple) else (t,)


# --------------------------------------------------------------------------- parent side


def scratch_env(scratch: Path, *, writable=(), confine: bool = True, environ=None, extra=None) -> dict:
    """The environment of a child whose working folder is ``scratch``: TMPDIR, HOME and every
    cache inside it; ``PYTHONPATH`` leads with this checkout (the child imports this ``fp4moe``);
    writes confined to ``scratch`` and ``writable`` when ``confine``."""
    env = dict(os.environ if environ is None else environ)
    pypath = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    home = scratch / ".home"
    home.mkdir(exist_ok=True)
    env.update({"PYTHONPATH": pypath, "TMPDIR": str(scratch), "HOME": str(home),
                **{k: str(scratch / ".cache" / k.lower()) for k in CACHE_VARS}})
    env.pop(WRITABLE_ENV, None)
    if confine:
        env[WRITABLE_ENV] = os.pathsep.join([str(scratch), *map(str, writable)])
    env.update(extra or {})
    return env


@dataclass
class ChildOutputs:
    """What a harness child returned, validated: its record body and its output files (bytes,
    or -- ``run_judged(keep_files=True)`` -- verified files in a folder this object owns: use it
    as a context manager, or call :meth:`close`)."""

    record: dict
    result: childproc.ChildResult
    files: dict = field(default_factory=dict)  # name -> bytes | Path
    folder: Path | None = None

    def names(self) -> list[str]:
        return sorted(self.files)

    def _get(self, name: str):
        if name not in self.files:
            raise GateCannotRun(f"the child returned no output {name!r} (it returned {self.names()})")
        return self.files[name]

    def _bytes(self, name: str) -> bytes:
        v = self._get(name)
        return v.read_bytes() if isinstance(v, Path) else v

    def json(self, name: str):
        try:
            return json.loads(self._bytes(name))
        except ValueError as e:
            raise GateCannotRun(f"the child's output {name!r} is not JSON: {e}") from e

    def tensors(self, name: str):
        """The tensors of output ``name``: a dict (bytes kept) or a lazy read-only mapping over
        the verified file (each tensor read when asked for; memory stays one tensor deep)."""
        v = self._get(name)
        try:
            if isinstance(v, Path):
                return LazyTensors(v)
            from safetensors.torch import load

            return load(v)
        except Exception as e:  # noqa: BLE001 -- a malformed file is a cannot-run naming it
            raise GateCannotRun(one_line(f"the child's output {name!r} is not a safetensors file: {e}")) from e

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LazyTensors(Mapping):
    """A safetensors file as a read-only mapping: ``m[key]`` reads that tensor only."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self._f = safe_open(str(path), framework="pt")
        self._keys = list(self._f.keys())

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return self._f.get_tensor(key)

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)


def _write_inputs(folder: Path, inputs: dict) -> None:
    from safetensors.torch import save_file

    folder.mkdir()
    for name, tensors in inputs.items():
        if not NAME_RE.match(name):
            raise ValueError(f"input name {name!r}: letters, digits, '_', '.', '-' only")
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(folder / f"{name}.safetensors"))
        os.chmod(folder / f"{name}.safetensors", 0o444)


def _sha256_of_regular(path: Path, limit: int) -> tuple[str, int]:
    """sha256 and size of ``path``, read in chunks; a link, FIFO, device or folder (or a file
    over ``limit``) is an OSError saying what it is, without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise OSError(f"{path}: {st.st_size} bytes, more than the {limit} an output may hold")
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 22):
            h.update(chunk)
        return h.hexdigest(), st.st_size
    finally:
        os.close(fd)


def _read_outputs(outdir: Path, listed, label: str, keep: bool = False) -> dict:
    if not isinstance(listed, dict):
        raise GateCannotRun(f"{label}: the record's 'outputs' is {type(listed).__name__}, not an object")
    files, total = {}, 0
    for name, meta in listed.items():
        if not (isinstance(name, str) and NAME_RE.match(name)) or not isinstance(meta, dict) \
                or not isinstance(meta.get("sha256"), str):
            raise GateCannotRun(one_line(f"{label}: the record lists an output {name!r} the harness never writes"))
        path = outdir / name
        if path.is_symlink():
            raise GateCannotRun(f"{label}: output {name!r} is a symbolic link, not a file the harness wrote")
        limit = min(MAX_OUTPUT_BYTES, MAX_TOTAL_OUTPUT_BYTES - total)
        try:
            if keep:
                sha, size = _sha256_of_regular(path, limit)
                data = path
            else:
                data = read_regular_bytes(path, limit=limit)
                sha, size = hashlib.sha256(data).hexdigest(), len(data)
        except OSError as e:
            raise GateCannotRun(one_line(f"{label}: output {name!r}: {e}")) from e
        if sha != meta["sha256"]:
            raise GateCannotRun(f"{label}: output {name!r} was changed after the harness wrote it")
        files[name], total = data, total + size
    return files


def _last_stage(path: Path) -> str | None:
    try:
        return read_regular_bytes(path, limit=MAX_STAGE_BYTES).decode("utf-8", "replace").strip() or None
    except OSError:
        return None


#: the key every harness record carries: why the child's writes are not confined ("" when they are)
CONFINE_KEY = "confine_why"


def _take_confine_report(res: childproc.ChildResult) -> None:
    """The child's own word on its confinement (the record's :data:`CONFINE_KEY`), into
    ``res.contained``; the key leaves the record."""
    rec = res.record if res.record is not None else res.partial
    if isinstance(rec, dict) and CONFINE_KEY in rec:
        childproc.take_confine_report(res, rec.pop(CONFINE_KEY))


def run_judged(module: str, args: list[str], *, label: str, timeout_s: float, schema: RecordSchema | None = None,
               inputs: dict | None = None, env: dict | None = None, confine: bool = True, writable=(),
               deadline: Deadline | None = None, timeout_option: str = "--timeout", keep_files: bool = False,
               namespace: bool = True, own_proc: bool = False, tracked: bool = True,
               environ: dict | None = None) -> ChildOutputs:
    """Run ``python -m module args`` (or ``python module args`` for a ``.py`` path) as a harness
    child and return its validated outputs.

    ``label`` opens every cannot-run line (name the tree or file under test in it). ``timeout_s``
    is this child's limit, cut to what ``deadline`` has left. ``env``: extra variables. Raises
    :class:`GateCannotRun` (one bounded line) when the child could not run, wrote no record, was
    killed for time, or returned something the schema or the output rules refuse. ``keep_files``:
    large outputs stay on disk, verified, owned by the returned object (close it). ``namespace``,
    ``own_proc``: a PID namespace where the kernel gives one (``childproc.run_child``); a GPU child
    runs without (the CUDA driver failed in one: cudaGetDeviceCount error 304, seen on the H200,
    with the host's /proc; ``fp4moe/commands/studies/gpu_sandbox_probe.py`` tells whether its own /proc helps).
    The child's own report of a confinement that failed (``child_session``) is written into
    ``result.contained``. ``tracked``: as ``childproc.run_child`` (False: a background child of the
    test suite); ``environ``: the environment to start from (default ``os.environ``; a worker
    thread passes a snapshot)."""
    if deadline is not None:
        timeout_s = min(timeout_s, deadline.remaining(label))
    tmp = tempfile.mkdtemp(prefix="fp4moe-harness-")
    kept = False
    try:
        root = Path(tmp)
        scratch, outdir, indir = root / "cwd", root / "out", root / "in"
        scratch.mkdir()
        outdir.mkdir()
        _write_inputs(indir, inputs or {})
        stage_file = scratch / ".stage"
        child_env = scratch_env(scratch, writable=[outdir, *writable], confine=confine, environ=environ,
                                extra={OUTPUT_DIR_ENV: str(outdir), INPUT_DIR_ENV: str(indir),
                                       STAGE_ENV: str(stage_file), **(env or {})})
        target = [str(Path(module).resolve())] if module.endswith(".py") else ["-m", module]
        res = childproc.run_python([*target, *args], timeout_s=timeout_s, cwd=scratch, env=child_env,
                                   namespace=namespace, own_proc=own_proc, tracked=tracked)
        stage = _last_stage(stage_file)
        rec = res.record
        _take_confine_report(res)
        if res.timed_out:
            where = f" while {stage}" if stage else ""
            what = deadline.spent_line(label) if deadline is not None and timeout_s < deadline.total_s and \
                deadline._end - time.monotonic() <= 0.1 else \
                f"{label}: timed out after {timeout_s:g} s (killed; limit {timeout_option} {timeout_s:g} s)"
            raise GateCannotRun(one_line(what + where))
        if rec is None:
            raise GateCannotRun(one_line(f"{label}: {res.why_no_record()}" + (f" while {stage}" if stage else "")))
        if "cannot_run" in rec:
            raise GateCannotRun(one_line(f"{label}: {rec['cannot_run']}"))
        files = _read_outputs(outdir, rec.get("outputs", {}), label, keep=keep_files)
        body = schema.validate(rec, label) if schema is not None else \
            {k: v for k, v in rec.items() if k not in ("outputs",)}
        kept = keep_files
        if kept:
            shutil.rmtree(scratch, ignore_errors=True)
        return ChildOutputs(body, res, files, folder=root if kept else None)
    finally:
        if not kept:
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- child side


class ChildSession:
    """The child's side of one run (see :func:`child_session`)."""

    def __init__(self, schema: RecordSchema | None, write_record, unconfined: str | None):
        self.schema, self._write = schema, write_record
        self.unconfined = unconfined  # why writes are not confined (None: confined, or not asked)
        self._outdir = Path(os.environ[OUTPUT_DIR_ENV]) if os.environ.get(OUTPUT_DIR_ENV) else None
        self._indir = Path(os.environ[INPUT_DIR_ENV]) if os.environ.get(INPUT_DIR_ENV) else None
        self._stage_file = os.environ.get(STAGE_ENV)
        self._outputs: dict = {}
        self._stage = "starting (before any code under test ran)"
        self.done = False

    @property
    def current_stage(self) -> str:
        """The last stage noted, by :meth:`stage` or by a progress hook writing the stage file
        (``$FP4MOE_CHILD_STAGE``) directly."""
        if self._stage_file:
            try:
                text = read_regular_bytes(self._stage_file, limit=MAX_STAGE_BYTES).decode("utf-8", "replace").strip()
                if text:
                    return one_line(text, 300)
            except OSError:
                pass
        return self._stage

    def stage(self, text: str) -> None:
        """Where the child is now: named if the code under test ends, raises or hangs here."""
        self._stage = one_line(text, 300)
        if self._stage_file:
            try:
                Path(self._stage_file).write_text(self._stage)
            except OSError:
                pass

    def input_tensors(self, name: str) -> dict:
        from safetensors.torch import load_file

        if self._indir is None or not (self._indir / f"{name}.safetensors").is_file():
            raise RuntimeError(f"no input {name!r} from the parent")
        return load_file(str(self._indir / f"{name}.safetensors"))

    def _put(self, name: str, data: bytes) -> None:
        if not NAME_RE.match(name) or name in self._outputs:
            raise ValueError(f"output name {name!r}: a new plain name")
        if self._outdir is None:
            raise RuntimeError("not running under fp4moe.infra.harness.run_judged (no output folder)")
        (self._outdir / name).write_bytes(data)
        self._outputs[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def put_tensors(self, name: str, tensors: dict) -> None:
        from safetensors.torch import save_file

        if not NAME_RE.match(name) or name in self._outputs:
            raise ValueError(f"output name {name!r}: a new plain name")
        if self._outdir is None:
            raise RuntimeError("not running under fp4moe.infra.harness.run_judged (no output folder)")
        path = self._outdir / name
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))
        sha, size = _sha256_of_regular(path, MAX_OUTPUT_BYTES)
        self._outputs[name] = {"sha256": sha, "bytes": size}

    def put_json(self, name: str, obj) -> None:
        self._put(name, json.dumps(obj).encode())

    def finish(self, record: dict) -> None:
        head = {"schema": self.schema.name, "schema_version": self.schema.version} if self.schema else {}
        self._write({**record, **head, "outputs": self._outputs, CONFINE_KEY: self.unconfined or ""})
        self.done = True

    def cannot_run(self, why: str) -> None:
        self._write({"cannot_run": one_line(why), CONFINE_KEY: self.unconfined or ""})
        self.done = True


def describe_exception(e: BaseException, stage: str, trees=(), speaker: str = "it") -> str:
    """One line for an exception the code under test raised (or its ``sys.exit``): the innermost
    frame inside ``trees`` (the code under test) named, its own text quoted and labelled."""
    if isinstance(e, GateCannotRun):
        return one_line(str(e))
    from fp4moe.infra import culprit

    return culprit.describe(e, list(trees), stage=stage, speaker=speaker)


@contextmanager
def child_session(schema: RecordSchema | None = None, *, also_writable=(), trees=(), speaker: str = "it"):
    """Child side: ``with child_session(SCHEMA) as s: ...; s.finish(record)``. Takes the record key
    and confines writes (to the scratch, the output folder and ``also_writable``) before the body
    runs; a body that raises or calls ``sys.exit`` writes a cannot-run record naming the stage; a
    body that returns without ``finish`` is a cannot-run too. Never raises out."""
    write_record = childproc.record_writer()  # before any code under test runs
    record_dir = os.path.dirname(os.environ.get(childproc.RESULT_ENV, "") or ".")
    unconfined = confine_from_env(also=[record_dir, *also_writable])
    s = ChildSession(schema, write_record, unconfined)
    if trees:  # an os._exit in the code under test leaves no traceback: the record names its file
        from fp4moe.infra import culprit

        culprit.note_exits(list(trees), s.cannot_run)
    try:
        yield s
        if not s.done:
            s.cannot_run(f"the child ended without a result while {s.current_stage}")
    except BaseException as e:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt of the code under test included
        if not s.done:
            s.cannot_run(describe_exception(e, s.current_stage, trees, speaker))
    finally:
        sys.stdout.flush()
