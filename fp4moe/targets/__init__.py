"""The systems under test, one folder each: ``aiter`` and ``sglang``.

Each says where its code comes from, how it is loaded or driven, and (in ``child/``) what runs
in the child process. ``targets.sglang`` may use ``targets.aiter``, never the reverse.
"""
