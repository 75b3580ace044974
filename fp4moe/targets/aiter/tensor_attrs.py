"""The attributes aiter's ``fused_moe`` reads from the weight tensors it is handed.

aiter picks kernels not only from keywords but from Python attributes set on ``w1`` / ``w2``
(``getattr(w1, "is_shuffled", False)``): a caller whose tensors lost such an attribute passes
every keyword check and still gets kernels for another layout. :data:`KNOWN` is this project's
table of them, read from aiter e4048607 (``../shared/aiter/e4048607/aiter``), each with where
aiter reads it and what it means; :func:`scan` reads the same from any aiter tree's syntax tree
(``getattr(w1|w2, "NAME", ...)`` in ``aiter/fused_moe.py`` and ``aiter/ops/moe_op.py``), so an
aiter that reads an attribute this table does not know is seen (the SGLang gate fails it closed).
Nothing here imports aiter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.files import read_text_bounded

#: files of an aiter tree whose reads of w1/w2 attributes are scanned
SCANNED = ("aiter/fused_moe.py", "aiter/ops/moe_op.py")
WEIGHT_ARGS = ("w1", "w2")


@dataclass(frozen=True)
class TensorAttr:
    tensor: str  # "w1" or "w2"
    name: str
    where: tuple[str, ...]  # file:line in aiter e4048607 (or the scanned tree)
    #: what the value must be: "layout_shuffled" (True exactly when the bytes are in aiter's
    #: pre-shuffled layout), "real_intermediate" (absent, or the unpadded I_p) or "fp4x2"
    #: (the dtype is aiter's ``dtypes.fp4x2``, torch.float4_e2m1fn_x2)
    meaning: str
    default: object = None


#: aiter e4048607's reads (aiter/fused_moe.py, aiter/ops/moe_op.py), file:line.
KNOWN = {
    ("w1", "is_shuffled"): TensorAttr("w1", "is_shuffled", ("aiter/fused_moe.py:747", "aiter/fused_moe.py:901",
                                      "aiter/fused_moe.py:3030", "aiter/fused_moe.py:3050", "aiter/ops/moe_op.py:626"),
                                      "layout_shuffled", False),
    ("w2", "is_shuffled"): TensorAttr("w2", "is_shuffled", ("aiter/fused_moe.py:747", "aiter/fused_moe.py:902",
                                      "aiter/fused_moe.py:3030", "aiter/fused_moe.py:3051", "aiter/ops/moe_op.py:666"),
                                      "layout_shuffled", False),
    ("w1", "dtype"): TensorAttr("w1", "dtype", ("aiter/fused_moe.py:3149",), "fp4x2", None),
    ("w2", "inter_real"): TensorAttr("w2", "inter_real", ("aiter/fused_moe.py:1882",), "real_intermediate", None),
}
TABLE_ORIGIN = "fp4moe.targets.aiter.tensor_attrs.KNOWN (read from aiter e4048607)"


def scan(root: str | Path) -> dict[tuple[str, str], tuple[str, ...]]:
    """(tensor, attribute) -> file:line of every ``getattr(w1|w2, "NAME", ...)`` in the tree
    (``root`` holds ``aiter/`` or is the package itself)."""
    root = Path(root)
    base = root if (root / "aiter").is_dir() else root.parent
    found: dict[tuple[str, str], list[str]] = {}
    for rel in SCANNED:
        f = base / rel
        if not f.is_file():
            continue
        for node in ast.walk(ast.parse(read_text_bounded(f))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in WEIGHT_ARGS
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                found.setdefault((node.args[0].id, node.args[1].value), []).append(f"{rel}:{node.lineno}")
    return {k: tuple(v) for k, v in sorted(found.items())}


def attrs_for(aiter_src: str | None) -> tuple[list[TensorAttr], str]:
    """The attributes to judge and where the list came from: the tree given (each known one
    with that tree's file:line; unknown ones with meaning "unknown"), else :data:`KNOWN`."""
    if not aiter_src:
        return list(KNOWN.values()), TABLE_ORIGIN
    got = scan(aiter_src)
    out = []
    for key, where in got.items():
        k = KNOWN.get(key)
        out.append(TensorAttr(key[0], key[1], where, k.meaning if k else "unknown", k.default if k else None))
    return out, f"the aiter tree {aiter_src} ({', '.join(SCANNED)})"
