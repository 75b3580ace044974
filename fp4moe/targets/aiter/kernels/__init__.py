"""aiter's Triton MXFP4 MoE kernels, executed under the gate (CPU interpreter or a GPU).

These are aiter's *Triton* kernels (``aiter/ops/triton/moe/moe_op_gemm_a16w4.py``,
``moe_op_gemm_a8w4.py``, ``moe_op_gemm_a4w4.py`` for its told pad alone, the Triton routing and
``reduce_grouped``): the path vLLM's aiter
Triton MoE backend runs. They are NOT the CK/asm/FlyDSL kernels SGLang's DeepSeek-V4 path runs
through ``aiter.fused_moe`` (those need a gfx950 and stay in the gfx950 tier).

- ``loader``: imports the modules from a tree without running ``aiter/__init__.py`` (one table
  of stubs and patches, ``loader.PATCHES``);
- ``shims``: the Triton interpreter's float-cast gaps closed (only under ``TRITON_INTERPRET=1``);
- ``layout``: a ``fp4moe.reference.weight_path`` layer -> the Triton kernels' layout;
- ``drive``: routing, GEMM1 + SwiGLU, the a8w4 MXFP8 quants (a4w4: the gate's MXFP4), GEMM2 with the top-k weights, the
  reduce; and the gate's own routing (so GEMMs are judged apart from aiter's routing);
- ``checks``: the kernel checks (run in a child: ``fp4moe.targets.aiter.child.kernel_checks``);
- ``defects``: the known-upstream-defects registry (``fp4moe/data/aiter_known_defects.json``).

Nothing here imports aiter or triton at module import time.
"""

#: the oldest Triton whose interpreter has ``tl.dot_scaled`` (3.6/3.7 do not)
MIN_TRITON = (3, 8)
#: what ci/install.sh installs when no triton is importable
PINNED_TRITON = "3.9.0"


def triton_status(device: str = "cpu") -> tuple[bool, str]:
    """(usable, one line): is a triton >= MIN_TRITON importable here? Never raises. On a GPU
    (``device`` not "cpu") any importable triton will do: no interpreter is involved."""
    try:
        import triton
    except Exception as e:  # noqa: BLE001 - any import failure means "not usable"
        return False, f"triton is not importable ({type(e).__name__}: {e}); the kernel checks need triton>={'.'.join(map(str, MIN_TRITON))} (ci/install.sh installs {PINNED_TRITON})"
    ver = getattr(triton, "__version__", "0")
    parts = tuple(int(p) for p in ver.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < MIN_TRITON and device == "cpu":
        return False, f"triton {ver} is too old: the kernel checks need triton>={'.'.join(map(str, MIN_TRITON))} (its interpreter has no dot_scaled before 3.8)"
    return True, f"triton {ver}"


def triton_status_light(device: str = "cpu") -> tuple[bool, str]:
    """Like :func:`triton_status` without importing triton (for the parent): the installed
    distribution's version and an importable spec."""
    import importlib.metadata
    import importlib.util

    need = ".".join(map(str, MIN_TRITON))
    if importlib.util.find_spec("triton") is None:
        return False, f"triton is not importable; the kernel checks need triton>={need} (ci/install.sh installs {PINNED_TRITON})"
    try:
        ver = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        ver = "0"
    parts = tuple(int(p) for p in ver.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < MIN_TRITON and device == "cpu":
        return False, f"triton {ver} is too old: the kernel checks need triton>={need} (its interpreter has no dot_scaled before 3.8)"
    return True, f"triton {ver}"
