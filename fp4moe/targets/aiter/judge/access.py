"""Where the source checks' aiter functions come from.

The same checks run twice: in the child, which executes aiter's files and records every call
(``fp4moe.infra.callrecord.Recorder``), and in the parent, which answers the same calls from that
log (``Replay``) and makes the rows; no aiter code runs in the parent.

- :class:`DirectAccess` -- aiter's files executed in THIS process (tests; the child's base);
- :class:`RecordingAccess` -- the child's: every call recorded, its rows never read;
- :class:`ReplayAccess` -- the parent's: every call answered from the child's log.
"""

from __future__ import annotations

from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.source import AiterSource, load_shuffle_module

#: the attributes of aiter/ops/shuffle.py the layout checks and the PR #4130 probe read
SHUFFLE_ATTRS = ("shuffle_weight", "shuffle_scale", "shuffle_weight_a16w4", "shuffle_scale_a16w4")


class DirectAccess:
    """aiter's files executed in THIS process (tests, and the child under a recorder)."""

    def __init__(self, src: AiterSource):
        self.src = src

    def shuffle(self):
        return load_shuffle_module(self.src)

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.AiterRefs(self.src)


class RecordingAccess(DirectAccess):
    """The child's access: every aiter function the checks call is recorded
    (``fp4moe.infra.callrecord.Recorder``); a load that fails is recorded and raised again."""

    judges = False  # the child only records: its rows are never read

    def __init__(self, src: AiterSource, recorder):
        super().__init__(src)
        self.rec, self._shuffle = recorder, None

    def shuffle(self):
        if self._shuffle is None:
            try:
                mod = super().shuffle()
            except (SyntaxError, ValueError, GateCannotRun):
                raise  # could not run: the child's cannot-run record names the file
            except Exception as e:
                self.rec.error("shuffle.load_error", e)
                raise
            self.rec.error("shuffle.load_error", None)
            self._shuffle = (self.rec.module("shuffle", mod, SHUFFLE_ATTRS),)
        return self._shuffle[0]

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.record_refs(super().refs(), self.rec)


class ReplayAccess:
    """The parent's access: aiter's functions answered from the child's call log
    (``fp4moe.infra.callrecord.Replay``); no aiter code runs in this process."""

    def __init__(self, replay):
        self.rp = replay

    def shuffle(self):
        from fp4moe.infra.callrecord import reraise

        reraise(self.rp.value("shuffle.load_error"))
        return self.rp.module("shuffle")

    def refs(self):
        from fp4moe.targets.aiter import conformance as conf

        return conf.ReplayedRefs(self.rp)
