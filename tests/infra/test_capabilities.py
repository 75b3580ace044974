"""Tier detection: what counts as a GPU, a gfx950, a usable aiter; --require; the tier block."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fp4moe.infra import capabilities as hardware
from fp4moe.infra.paths import REPO_ROOT


@pytest.fixture()
def fake_aiter(tmp_path, monkeypatch):
    """Put a package named ``aiter`` with the given __init__ body first on sys.path."""

    def make(body: str | None):
        pkg = tmp_path / "aiter"
        pkg.mkdir(exist_ok=True)
        if body is not None:
            (pkg / "__init__.py").write_text(body)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "aiter", raising=False)

    yield make
    sys.modules.pop("aiter", None)


def test_aiter_raising_runtime_error_is_unavailable_with_the_reason(fake_aiter):
    # what the real package does on a machine without ROCm: RuntimeError, not ImportError
    fake_aiter('raise RuntimeError("ROCm version file not found")\n')
    ok, why = hardware.probe_aiter()
    assert not ok
    assert why == "import aiter failed: RuntimeError: ROCm version file not found"


def test_a_folder_named_aiter_is_not_aiter(fake_aiter):
    fake_aiter(None)  # namespace package: imports fine, is not the library
    ok, why = hardware.probe_aiter()
    assert not ok and "namespace package" in why


def test_importable_aiter_is_available(fake_aiter):
    fake_aiter("VERSION = 'fake'\n")
    assert hardware.probe_aiter() == (True, "")


@pytest.mark.parametrize("name,arch", [("gfx950:sramecc+:xnack-", "gfx950"), ("gfx942", "gfx942"), ("", None), (None, None)])
def test_gfx_arch_of(name, arch):
    assert hardware.gfx_arch_of(name) == arch


def test_parse_require():
    assert hardware.parse_require(" gfx950, aiter ,") == ["gfx950", "aiter"]
    assert hardware.parse_require(None) == []
    with pytest.raises(ValueError, match=r"unknown capability \['gfx9'\]; valid: gpu, cuda, rocm, gfx950"):
        hardware.parse_require("gfx9")


def test_cpu_machine_has_no_gpu_tiers_and_says_why():
    caps = hardware.detect(server_url=None, shared_present=False)
    if caps.has("gpu"):
        pytest.skip("this machine has a GPU")
    for cap in ("gpu", "cuda", "rocm", "gfx950"):
        assert not caps.has(cap) and caps.reason(cap)
    assert "no --server-url" in caps.reason("server") and "absent" in caps.reason("shared")


def _pytest(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, env=dict(os.environ, **(env or {})),
    )


def _root_conftest(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    return root


def test_tier_block_is_built_from_the_session_counts_and_the_skip_reasons():
    """The root conftest's summary hook, in-process on a copy of the module (its own counters):
    a tier that ran shows its counts, a tier whose tests were all skipped shows the recorded
    reason, a tier with no test says so (the whole pytest in a child process is the slow case below)."""
    import types
    from collections import Counter

    root = _root_conftest("fp4moe_root_conftest_block")
    caps = hardware.Capabilities(device_name="cpu", arch=None)
    config = types.SimpleNamespace(_fp4moe_caps=caps, _fp4moe_skip_reasons={"gfx950": "no gfx950 GPU (device: cpu)"})
    root._SESSION_COUNTS.update(cpu=Counter(passed=7, failed=2, skipped=1), gfx950=Counter(skipped=3))
    lines = []
    tr = types.SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write_line=lines.append)
    root.pytest_terminal_summary(tr, 0, config)
    assert lines[0] == "== fp4-moe-gate tiers" and lines[1] == "device: cpu  arch: -"
    rows = {ln.split()[0]: ln for ln in lines[2:]}
    assert list(rows) == list(root.TIER_ORDER)
    assert rows["cpu"].split(None, 1)[1] == "RAN      7 passed, 2 failed, 1 skipped"
    assert rows["gfx950"].split(None, 1)[1] == "SKIPPED  3 tests: no gfx950 GPU (device: cpu)"
    assert rows["gpu"].split(None, 1)[1] == "none selected"
    assert root.pytest_terminal_summary(tr, 0, types.SimpleNamespace()) is None  # configure never ran: no block


@pytest.mark.slow
def test_tier_block_lists_skipped_tiers_with_reasons():
    if hardware.detect().has("gfx950"):
        pytest.skip("this machine has a gfx950")
    r = _pytest("tests/model/test_catalogue.py", "tests/targets/aiter/test_gfx950_aiter.py::test_spy_sees_recorded_pads")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    block = out[out.index("fp4-moe-gate tiers"):]
    assert "cpu     RAN" in block
    assert "gfx950  SKIPPED" in block and "no gfx950 GPU" in block


@pytest.mark.parametrize("how", ["env", "option"])
def test_require_of_a_missing_capability_is_a_usage_error_before_any_test(monkeypatch, how):
    """The root conftest's configure step, in-process (the whole pytest in a child process,
    exit 4 and no test run, is tests/ci/test_workflow_lint.py's slow case)."""
    import importlib.util
    import types

    from fp4moe.infra.paths import REPO_ROOT

    if hardware.detect().has("gfx950"):
        pytest.skip("this machine has a gfx950")
    spec = importlib.util.spec_from_file_location("fp4moe_root_conftest_req", REPO_ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    monkeypatch.delenv("FP4MOE_REQUIRE", raising=False)
    opts = {"--server-url": None, "--require": None}
    if how == "env":
        monkeypatch.setenv("FP4MOE_REQUIRE", "gfx950,aiter")
    else:
        opts["--require"] = "gfx950,aiter"
    config = types.SimpleNamespace(getoption=opts.get)
    import torch

    threads = torch.get_num_threads()
    try:
        with pytest.raises(pytest.UsageError, match="required capabilities missing") as e:
            root.pytest_configure(config)
    finally:
        torch.set_num_threads(threads)
    assert "gfx950:" in str(e.value) and "aiter:" in str(e.value)
    assert ("FP4MOE_REQUIRE" if how == "env" else "--require") in str(e.value)


@pytest.mark.rocm
def test_rocm_device_reports_a_gfx_arch():
    """On a ROCm runner: torch is a HIP build and the device names its gfx arch (the gfx950
    tier keys off it)."""
    import torch

    assert torch.version.hip
    caps = hardware.detect()
    assert caps.arch and caps.arch.startswith("gfx"), caps.arch


def test_skip_label_is_one_per_test_whatever_is_missing_or_the_set_order():
    """The root conftest labels a skipped test by its first hardware marker in TIER_ORDER, not
    by which capability is missing (nor by set order: string hashes change per process)."""
    import importlib.util
    import types

    from fp4moe.infra.capabilities import Capabilities
    from fp4moe.infra.paths import REPO_ROOT

    spec = importlib.util.spec_from_file_location("fp4moe_root_conftest", REPO_ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)

    class Item:
        def __init__(self, names):
            self.names, self.added = names, []

        def iter_markers(self):
            return [types.SimpleNamespace(name=n) for n in self.names]

        def get_closest_marker(self, name):
            return None

        def add_marker(self, m):
            self.added.append(m.kwargs["reason"])

    def reason(names, lacking):
        caps = Capabilities()
        for c in ("gpu", "rocm", "gfx950", "aiter", "server", "shared", "sglang"):
            caps.set(c, c not in lacking, f"no {c} here")
        config = types.SimpleNamespace(_fp4moe_caps=caps, _fp4moe_skip_reasons={},
                                       getoption=lambda name: False)
        item = Item(names)
        root.pytest_collection_modifyitems(config, [item])
        return item.added[0]

    for names in (["aiter", "gfx950"], ["gfx950", "aiter"]):
        assert reason(names, {"gfx950", "aiter"}).startswith("[gfx950 tier] gfx950: no gfx950 here")
        assert reason(names, {"aiter"}).startswith("[gfx950 tier] aiter: no aiter here")
    assert reason(["perf", "gpu"], {"gpu"}).startswith("[gpu tier] gpu:")
