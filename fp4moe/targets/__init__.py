"""The systems under test, one folder each: ``aiter`` and ``sglang``.

Each says where its code comes from, how it is loaded or driven, and (in ``child/``) what runs
in the child process. ``targets.sglang`` may use ``targets.aiter``, never the reverse.
"""


#: the capabilities whose probe only finds them and a proof (:func:`prover`) also proves (``--require``)
PROVABLE = ("sglang",)


def prover(name: str):
    """The proof of capability ``name``: a callable returning None when it holds, else one line
    saying why not (None for a name not in :data:`PROVABLE`: nothing more to prove). ``sglang``: a
    child process imports SGLang's FP4 MoE modules with the child's stubs (a few seconds), so a
    missing dependency is named with its package and extra. The proof's modules are imported here,
    by the caller: the callable may run on a thread of its own beside the caller's imports."""
    if name != "sglang":
        return None
    from fp4moe.targets.sglang import source, target

    return lambda: target.import_check(source.resolve())


def capability_probes(deep=()) -> dict:
    """``detect(probes=...)``: the probes of the targets' capabilities (each reads files only).
    A capability named in ``deep`` is also proven (:func:`prover`) once its probe found it."""
    from fp4moe.targets.sglang.source import probe as probe_sglang

    if "sglang" not in deep:
        return {"sglang": probe_sglang}

    def probe_sglang_deep() -> tuple[bool, str]:
        ok, why = probe_sglang()
        if not ok:
            return ok, why
        why = prover("sglang")()
        return why is None, why or ""

    return {"sglang": probe_sglang_deep}
