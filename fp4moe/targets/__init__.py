"""The systems under test, one folder each: ``aiter`` and ``sglang``.

Each says where its code comes from, how it is loaded or driven, and (in ``child/``) what runs
in the child process. ``targets.sglang`` may use ``targets.aiter``, never the reverse.
"""


def capability_probes(deep=()) -> dict:
    """``detect(probes=...)``: the probes of the targets' capabilities (each reads files only).
    A capability named in ``deep`` (what ``--require`` asks for) is also proven: for ``sglang``,
    a child process imports SGLang's FP4 MoE modules with the child's stubs (a few seconds), so
    a missing dependency fails the session up front, naming its package and extra."""
    from fp4moe.targets.sglang.source import probe as probe_sglang

    if "sglang" not in deep:
        return {"sglang": probe_sglang}

    def probe_sglang_deep() -> tuple[bool, str]:
        ok, why = probe_sglang()
        if not ok:
            return ok, why
        from fp4moe.targets.sglang import source, target

        why = target.import_check(source.resolve())
        return why is None, why or ""

    return {"sglang": probe_sglang_deep}
