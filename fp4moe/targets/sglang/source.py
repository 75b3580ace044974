"""Where the SGLang under test lives: the installed package, a wheel, or a PyPI release.

Nothing here imports SGLang. An installed SGLang is located with
``importlib.util.find_spec("sglang")`` (which does not execute ``sglang/__init__.py``); a
wheel is judged by its bytes (SHA-256, its own METADATA name and version) and unpacked once
(its ``sglang/`` files only, atomically) into ``unpacked/<sha256>`` of the wheel cache
(``fp4moe.infra.paths.wheel_dir()``: ``$XDG_CACHE_HOME/fp4moe/wheels``, outside the checkout);
``--sglang-version V`` downloads the wheel there with ``pip download --no-deps`` (the only
network access of the gate), announced on stderr with its size. Wheels are never committed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import check_regular_file, read_text_bounded
from fp4moe.infra.paths import wheel_dir
from fp4moe.infra.progress import progress

WHEEL_DIR = wheel_dir()
FP8_FILE = "sglang/srt/layers/quantization/fp8.py"
RUNNER_FILE = "sglang/srt/layers/moe/moe_runner/aiter.py"
#: What the child needs really installed (beside torch), as import name -> the pip name that
#: provides it (all in the ``sglang`` extra); everything else is stubbed. pydantic_core: SGLang
#: 0.5.23's srt/utils/msgspec_utils.py imports it at module level (pydantic itself is stubbed).
REAL_DEPS = {"numpy": "numpy", "msgspec": "msgspec", "regex": "regex", "packaging": "packaging", "dill": "dill",
             "safetensors": "safetensors", "pydantic_core": "pydantic-core"}


def has_fp4_aiter_branch(fp8_text: str) -> bool:
    """fp8.py has an ``if`` testing both ``_use_aiter`` and ``is_fp4_expert`` (the DeepSeek-V4
    FP4 aiter branch of ``process_weights_after_loading_block_quant``), read from its syntax tree."""
    import ast

    for node in ast.walk(ast.parse(fp8_text, filename=FP8_FILE)):
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "_use_aiter" in test and "is_fp4_expert" in test:
                return True
    return False


@dataclass(frozen=True)
class SGLangSource:
    root: Path  # holds sglang/
    origin: str
    version: str

    @property
    def fp8_text(self) -> str:
        return read_text_bounded(self.root / FP8_FILE)


def _version_of(root: Path) -> str:
    for rel in ("sglang/_version.py", "sglang/version.py"):
        f = root / rel
        if f.is_file():
            m = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", read_text_bounded(f), re.M)
            if m:
                return m.group(1)
    pyproject = root / "pyproject.toml"  # a source checkout's python/ (no generated _version.py)
    if pyproject.is_file():
        m = re.search(r'^version\s*=\s*"([^"]+)"', read_text_bounded(pyproject), re.M)
        if m:
            return m.group(1) + " (source tree)"
    m = re.search(r"sglang-([0-9][^/-]*)", str(root))
    return m.group(1) if m else "unknown"


def _checked(root: Path, origin: str) -> SGLangSource:
    for rel in (FP8_FILE, RUNNER_FILE):
        if not (root / rel).is_file():
            raise GateCannotRun(f"{origin}: {rel} is missing (not an SGLang with the aiter MoE runner)")
    return SGLangSource(root=root, origin=origin, version=_version_of(root))


def installed() -> SGLangSource | None:
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    root = Path(spec.origin).parent.parent
    if not (root / FP8_FILE).is_file():
        return None
    return SGLangSource(root=root, origin=f"installed sglang at {root / 'sglang'}", version=_installed_version(root))


def _installed_version(root: Path) -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return _version_of(root)


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_metadata(z: zipfile.ZipFile, label: str) -> tuple[str, str]:
    """(Name, Version) from the wheel's own ``*.dist-info/METADATA`` (never from its file name)."""
    metas = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(metas) != 1:
        raise ValueError(f"--sglang-wheel {label}: {len(metas)} *.dist-info/METADATA files in it (a wheel has one)")
    text = z.read(metas[0]).decode("utf-8", errors="replace")
    head = text.split("\n\n", 1)[0]
    fields = dict(m.groups() for m in re.finditer(r"^(Name|Version):\s*(\S+)\s*$", head, re.M))
    if "Name" not in fields or "Version" not in fields:
        raise ValueError(f"--sglang-wheel {label}: {metas[0]} has no Name/Version")
    return fields["Name"], fields["Version"]


class WheelCacheError(GateCannotRun):
    """The wheel cache (not the wheel) could not be written: named, with the variable to set."""


def _unpack_into_cache(z: zipfile.ZipFile, names: list[str], dest: Path, digest: str) -> None:
    """Extract ``names`` into ``dest`` atomically. An OSError while writing (a read-only
    cache, a full disk) is the cache's fault, named as such; a CRC mismatch stays the wheel's."""
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
        z.extractall(tmp, members=names)  # reads every member: a CRC mismatch raises BadZipFile
        (tmp / ".sha256").write_text(digest + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except OSError as e:
        raise WheelCacheError(f"the wheel cache {WHEEL_DIR}: cannot write there ({e.strerror or e}); set "
                              "FP4MOE_WHEEL_DIR or XDG_CACHE_HOME to a writable folder") from e
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


#: the largest wheel read (SGLang's are tens of MB)
MAX_WHEEL_BYTES = 2 << 30


def from_wheel(path: str | Path) -> SGLangSource:
    """The SGLang in a wheel, judged by its bytes: the wheel is hashed (SHA-256), its own
    METADATA must name ``sglang`` (its version is the one reported, whatever the file is called),
    every extracted member's CRC is checked, and the unpacked copy is cached under
    ``unpacked/<sha256>`` of the wheel cache (a renamed, truncated or foreign wheel can never hit the cache
    of another)."""
    whl = Path(path)
    try:  # a FIFO, a device or a sparse giant is named, never hashed or waited on
        check_regular_file(whl, MAX_WHEEL_BYTES)
    except FileNotFoundError:
        raise ValueError(f"--sglang-wheel {whl}: no such file") from None
    except OSError as e:
        raise ValueError(f"--sglang-wheel {' '.join(str(e).split())}") from None
    digest = _sha256(whl)
    try:
        with zipfile.ZipFile(whl) as z:
            name, version = wheel_metadata(z, str(whl))
            if re.sub(r"[-_.]+", "-", name).lower() != "sglang":
                raise ValueError(f"--sglang-wheel {whl}: its METADATA names {name!r} {version}, not sglang")
            dest = WHEEL_DIR / "unpacked" / f"{digest}"
            if not (dest / ".sha256").is_file() or read_text_bounded(dest / ".sha256").strip() != digest:
                names = [n for n in z.namelist() if n.startswith("sglang/")]
                if FP8_FILE not in names:
                    raise ValueError(f"--sglang-wheel {whl}: holds no {FP8_FILE}")
                _unpack_into_cache(z, names, dest, digest)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as e:
        raise ValueError(f"--sglang-wheel {whl}: not a readable wheel (zip) file: {type(e).__name__}: {e}") from e
    src = _checked(dest, f"wheel {whl.name} (sha256 {digest[:12]})")
    claimed = re.match(r"sglang-([^-]+)-", whl.name)
    origin = src.origin if not claimed or claimed.group(1) == version else (
        f"{src.origin}; its METADATA says {version}, not the {claimed.group(1)} of its file name")
    return SGLangSource(root=src.root, origin=origin, version=version)


def download(version: str, quiet: bool = False, deadline=None) -> Path:
    """``pip download --no-deps sglang==version`` into WHEEL_DIR (reused when present); the
    download is announced on stderr, then its size (progress, not results: ``quiet`` drops it).
    pip runs as a child (``fp4moe.infra.runner``) within ``deadline`` (the run's one total,
    ``fp4moe.infra.deadline.Deadline``; without one :data:`DOWNLOAD_TIMEOUT_S`): killed when it is spent, and
    the line names ``--timeout`` and the wheel cache folder."""
    from fp4moe.infra import runner

    if not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", version):
        raise ValueError(f"--sglang-version {version!r}: not a version number")
    have = sorted(WHEEL_DIR.glob(f"sglang-{version}-*.whl"))
    if have:
        return have[0]
    try:
        WHEEL_DIR.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GateCannotRun(f"--sglang-version {version}: the wheel cache {WHEEL_DIR} cannot be made: "
                            f"{e.strerror or e} (set FP4MOE_WHEEL_DIR or XDG_CACHE_HOME to a writable folder)") from e
    what = f"--sglang-version {version}: pip download into the wheel cache {WHEEL_DIR}"
    limit = deadline.remaining(what) if deadline is not None else DOWNLOAD_TIMEOUT_S
    if not quiet:
        progress("sglang-check", f"downloading sglang=={version} (pip download --no-deps) into {WHEEL_DIR} ...")
    cmd = [*PIP_DOWNLOAD, "-d", str(WHEEL_DIR), f"sglang=={version}"]
    res = runner.run_child(cmd, timeout_s=limit, want_record=False)
    if res.timed_out:
        raise GateCannotRun(deadline.spent_line(what) if deadline is not None else
                            f"{what}: timed out after {limit:g} s (killed)")
    have = sorted(WHEEL_DIR.glob(f"sglang-{version}-*.whl"))
    if res.rc or not have:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        raise GateCannotRun(f"{what} failed: {' '.join(last.split())[:300]}")
    if not quiet:
        progress("sglang-check", f"downloaded {have[0]} ({have[0].stat().st_size / 1e6:.1f} MB)")
    return have[0]


#: a download's own limit where no run deadline is given (``resolve`` without ``deadline``)
DOWNLOAD_TIMEOUT_S = 600.0
#: the download command (``-d FOLDER sglang==V`` appended)
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "--no-deps", "-q")


def resolve(wheel: str | None = None, version: str | None = None, root: str | None = None, *,
            quiet: bool = False, deadline=None) -> SGLangSource:
    """The SGLang to drive: ``--sglang-wheel``, ``--sglang-version``, ``FP4MOE_SGLANG_ROOT``/
    ``FP4MOE_SGLANG_WHEEL``, else the installed one. GateCannotRun names what is missing."""
    if sum(x is not None for x in (wheel, version, root)) > 1:
        raise ValueError("give at most one of --sglang-wheel, --sglang-version, --sglang-root")
    wheel = wheel or (None if (version or root) else os.environ.get("FP4MOE_SGLANG_WHEEL"))
    root = root or (None if (version or wheel) else os.environ.get("FP4MOE_SGLANG_ROOT"))
    if version:
        src = from_wheel(download(version, quiet=quiet, deadline=deadline))
        if src.version != version:
            raise GateCannotRun(f"--sglang-version {version}: the cached wheel is sglang {src.version} ({src.origin})")
        return src
    if wheel:
        return from_wheel(wheel)
    if root:  # absolute before anything else sees it: the child runs in its own work directory
        absolute = Path(root).expanduser().resolve()
        return _checked(absolute, f"sglang source tree {absolute}" + (f" (--sglang-root {root})" if str(absolute) != root else ""))
    found = installed()
    if found is None:
        from fp4moe.targets.sglang import PINNED_SGLANG

        raise GateCannotRun(
            f"no SGLang to drive: none installed (pip install --no-deps sglang=={PINNED_SGLANG} msgspec, or "
            "bash ci/install.sh), and no --sglang-wheel / --sglang-version / FP4MOE_SGLANG_ROOT given"
        )
    return found


def missing_deps() -> list[str]:
    return [d for d in REAL_DEPS if importlib.util.find_spec(d) is None]


def install_hint(deps) -> str:
    return f"pip install {' '.join(REAL_DEPS[d] for d in deps)} (or pip install 'fp4-moe-gate[sglang]')"


def missing_module_line(name: str, version: str) -> str:
    """One line for a module SGLang imports that is neither installed nor stubbed in the child:
    the package and the extra that provide it, or, for one nobody declared, that it is neither."""
    top = name.split(".")[0]
    if top in REAL_DEPS:
        return (f"sglang {version}: the SGLang child cannot import {name}: {install_hint([top])}")
    return (f"sglang {version}: the SGLang child cannot import {name}: it is neither in the sglang extra "
            f"(fp4moe.targets.sglang.source.REAL_DEPS) nor stubbed (fp4moe.targets.sglang.child.stubs.STUB_ROOTS); "
            f"pip install {top} to run, and declare it in the extra")


def probe() -> tuple[bool, str]:
    """Cheap (nothing imported): can this machine drive an SGLang? (ok, reason when not)."""
    try:
        src = resolve()
    except (GateCannotRun, ValueError) as e:
        return False, str(e)
    deps = missing_deps()
    if deps:
        return False, f"{src.origin}: the SGLang child needs {', '.join(deps)} installed: {install_hint(deps)}"
    if not has_fp4_aiter_branch(src.fp8_text):
        return False, f"sglang {src.version} ({src.origin}): fp8.py has no DeepSeek-V4 FP4 aiter branch"
    return True, ""
