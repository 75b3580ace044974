"""Backends behind one interface (``fp4moe.backends.base.MoEBackend``): the reference, and
aiter on gfx950. ``get_backend(name)`` returns one by name."""

from __future__ import annotations


def get_backend(name: str):
    if name == "reference":
        from fp4moe.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if name == "aiter":
        from fp4moe.backends.aiter import AiterBackend

        return AiterBackend()
    raise ValueError(f"unknown backend {name!r}; valid: reference, aiter")
