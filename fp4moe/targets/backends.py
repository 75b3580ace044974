"""Backends behind one interface (``fp4moe.reference.backend.MoEBackend``): the reference, and
aiter on gfx950. ``get_backend(name)`` returns one by name."""

from __future__ import annotations


def get_backend(name: str):
    if name == "reference":
        from fp4moe.reference.reference_backend import ReferenceBackend

        return ReferenceBackend()
    if name == "aiter":
        from fp4moe.targets.aiter.backend import AiterBackend

        return AiterBackend()
    raise ValueError(f"unknown backend {name!r}; valid: reference, aiter")
