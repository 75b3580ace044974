"""What this machine can run: CPU / CUDA / ROCm, the AMD gfx arch, whether aiter works, and the
capabilities whose probes the caller passes in (SGLang).

Every capability carries a reason when it is missing, so a skip says why. aiter is
"available" only if ``import aiter`` succeeds: on a machine without ROCm the import raises
``RuntimeError: ROCm version file not found`` (not ImportError), so any exception counts as
"unavailable" and its text becomes the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Capabilities that ``--require`` / ``FP4MOE_REQUIRE`` can demand.
CAPABILITIES = ("gpu", "cuda", "rocm", "gfx950", "aiter", "server", "shared", "sglang")


@dataclass
class Capabilities:
    available: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    device_name: str = "cpu"
    arch: str | None = None

    def has(self, cap: str) -> bool:
        return self.available.get(cap, False)

    def reason(self, cap: str) -> str:
        return self.reasons.get(cap, f"{cap} not available")

    def set(self, cap: str, ok: bool, reason: str = "") -> None:
        self.available[cap] = ok
        if not ok:
            self.reasons[cap] = reason


def gfx_arch_of(gcn_arch_name: str | None) -> str | None:
    """``'gfx950:sramecc+:xnack-'`` -> ``'gfx950'``."""
    if not gcn_arch_name:
        return None
    return gcn_arch_name.split(":")[0]


def probe_aiter() -> tuple[bool, str]:
    """Try ``import aiter``; any exception means unavailable, with the exception as reason."""
    try:
        import aiter
    except Exception as e:  # RuntimeError without ROCm, ImportError without the package
        return False, f"import aiter failed: {type(e).__name__}: {e}"
    if getattr(aiter, "__file__", None) is None:
        # a namespace package (e.g. some folder named `aiter` on sys.path) is not aiter
        return False, f"'aiter' resolves to a namespace package {list(getattr(aiter, '__path__', []))}, not aiter"
    return True, ""


def detect(server_url: str | None = None, shared_present: bool | None = None, probes: dict | None = None) -> Capabilities:
    """Probe this machine. ``probes`` maps a target capability (``sglang``) to a ``() -> (ok, reason)``
    probe: infrastructure knows no system under test (``fp4moe.targets.capability_probes()``)."""
    import torch

    caps = Capabilities()
    gpu = torch.cuda.is_available()
    caps.set("gpu", gpu, "torch.cuda.is_available() is False (no CUDA or ROCm GPU visible)")
    hip = getattr(torch.version, "hip", None)
    if gpu:
        props = torch.cuda.get_device_properties(0)
        caps.device_name = props.name
        caps.arch = gfx_arch_of(getattr(props, "gcnArchName", None)) if hip else f"sm_{props.major}{props.minor}"
    caps.set("cuda", gpu and not hip, "no NVIDIA GPU (CUDA build of torch with a visible device)")
    caps.set("rocm", gpu and bool(hip), f"not a ROCm torch build with a visible GPU (torch.version.hip={hip})")
    caps.set(
        "gfx950",
        caps.has("rocm") and caps.arch == "gfx950",
        f"no gfx950 GPU (device: {caps.device_name}, arch: {caps.arch or 'none'})",
    )
    ok, why = probe_aiter()
    caps.set("aiter", ok, why)
    caps.set("server", bool(server_url), "no --server-url given (or FP4MOE_SERVER_URL)")
    if shared_present is None:
        from fp4moe.infra.paths import shared_dir

        shared_present = shared_dir() is not None
    caps.set("shared", shared_present, "../shared (golden layouts, GSM8K data) is absent in this checkout")
    for cap in ("sglang",):  # capabilities of the systems under test: probed by what the caller passes
        probe = (probes or {}).get(cap)
        ok, why = probe() if probe else (False, f"{cap} not probed (no probe passed to detect())")
        caps.set(cap, ok, why)
    return caps


def parse_require(value: str | None, source: str = "--require") -> list[str]:
    """``'gfx950, aiter'`` -> ``['gfx950', 'aiter']``; unknown names raise ValueError naming
    ``source`` (``--require`` or ``FP4MOE_REQUIRE``, wherever the value came from)."""
    if not value:
        return []
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in CAPABILITIES]
    if unknown:
        raise ValueError(f"{source}={value!r}: unknown capability {unknown}; valid: {', '.join(CAPABILITIES)}")
    return names
