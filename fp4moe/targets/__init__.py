"""The systems under test, one folder each: ``aiter`` and ``sglang``.

Each says where its code comes from, how it is loaded or driven, and (in ``child/``) what runs
in the child process. ``targets.sglang`` may use ``targets.aiter``, never the reverse.
"""


def capability_probes() -> dict:
    """``detect(probes=...)``: the probes of the targets' capabilities (each reads files only)."""
    from fp4moe.targets.sglang.source import probe as probe_sglang

    return {"sglang": probe_sglang}
