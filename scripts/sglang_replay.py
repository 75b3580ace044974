#!/usr/bin/env python3
"""The SGLang release replay is the command ``fp4moe-gate sglang-replay`` (``--help`` there):
this file only passes its arguments on, for old recipes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp4moe.commands.main import main  # noqa: E402 -- after the checkout is on sys.path

if __name__ == "__main__":
    sys.exit(main(["sglang-replay", *sys.argv[1:]]))
