"""Fixtures shared by the GPU perf modules."""

from __future__ import annotations

import pytest

from fp4moe.gates.perf import workloads


@pytest.fixture(scope="module")
def bench_backend() -> str:
    """The backend under test: FP4MOE_BENCH_BACKEND (default "reference"); aiter skips with the
    reason where it cannot be imported; an unknown name fails the test."""
    try:
        name, skip_reason = workloads.bench_backend_from_env()
    except ValueError as e:
        pytest.fail(str(e), pytrace=False)
    if skip_reason:
        pytest.skip(skip_reason)
    return name
