"""Fresh memory of SGLang's modules filled with a byte no legal pad holds.

Index: ``POISON_BYTE``, :func:`poison_fresh_memory` (SGLang's fp8 / runner modules see a ``torch``
whose ``empty`` / ``empty_like`` are poisoned; nothing else does). CHILD PROCESS ONLY.
"""

from __future__ import annotations

#: the byte every fresh allocation SGLang's fp8 / runner modules make is filled with: not zero
#: and no legal pad byte (FP4 zero codes 0x00/0x08/0x80/0x88; e8m0 pads 0x00 or 0x7F), so a
#: pad left uninitialised is seen whatever the allocator hands back (MALLOC_PERTURB_ or not).
#: 0xA5: FP4 codes 0x5 (+3.0) and 0xA (-1.0), e8m0 2^38 (finite: not the NaN check's finding).
POISON_BYTE = 0xA5


class _PoisonTorch:
    """``torch`` as SGLang's fp8.py / runner module see it: ``empty`` / ``empty_like`` return
    memory filled with POISON_BYTE (deterministic); everything else is torch itself."""

    def __init__(self, real):
        self._real = real
        self.hits = 0

    def __getattr__(self, item):
        return getattr(self._real, item)

    def _poison(self, t):
        if t.device.type != "meta" and t.numel():
            t.view(self._real.uint8).fill_(POISON_BYTE) if t.is_contiguous() else t.fill_(0)
            self.hits += 1
        return t

    def empty(self, *a, **k):
        return self._poison(self._real.empty(*a, **k))

    def empty_like(self, *a, **k):
        return self._poison(self._real.empty_like(*a, **k))


def poison_fresh_memory(*modules) -> dict:
    """Give each SGLang module a poisoning ``torch`` (only those modules: the rest of the
    process, the reference included, sees torch itself). ``Tensor.new_empty`` is not covered."""
    import torch

    done = {}
    for m in modules:
        cur = getattr(m, "torch", None)
        if cur is torch or isinstance(cur, _PoisonTorch):
            if cur is torch:
                m.torch = _PoisonTorch(torch)
            done[m.__name__] = f"torch.empty/empty_like filled with 0x{POISON_BYTE:02X}"
    return done
