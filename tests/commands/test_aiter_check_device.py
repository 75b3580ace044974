"""``aiter-check --device``: its default follows the machine. Where torch sees a GPU (CUDA or ROCm) the
kernel checks run compiled there, with the runner's own triton (ROCm and CUDA images often carry one
older than 3.8); without one they run under the Triton interpreter on the CPU (which needs 3.8). A
``--device`` given is kept. The gate itself is stood in: only the options it receives are read."""

from __future__ import annotations

import pytest
import torch

from fp4moe.commands import main as cli
from fp4moe.gates import aiter_check
from fp4moe.infra.errors import GateCannotRun


@pytest.mark.parametrize("gpu, given, used", [(True, None, "cuda"), (False, None, "cpu"), (True, "cpu", "cpu"),
                                              (False, "cuda", "cuda")])
def test_the_kernel_checks_device_defaults_to_the_gpu_where_there_is_one(monkeypatch, capsys, gpu, given, used):
    seen = []

    def stand_in(opts):
        seen.append(opts.device)
        raise GateCannotRun("stood in")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(aiter_check, "check_aiter", stand_in)
    rc = cli.main(["aiter-check", "--aiter-src", "nowhere", *(["--device", given] if given else [])])
    assert rc == 2 and seen == [used], (rc, seen, capsys.readouterr().err)
