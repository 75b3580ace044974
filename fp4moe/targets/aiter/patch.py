"""One stub or patch a loader applies to an aiter tree, as its table row and its record say it.

- :class:`Patch` -- what is stood in (``name``), how (``what``) and why aiter's own code cannot
  run there (``why``); the kernel loader's and the dispatch loader's ``PATCHES`` tables hold them,
  and the kernel child's record carries them as ``[name, what, why]``.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Patch:
    name: str
    what: str
    why: str
