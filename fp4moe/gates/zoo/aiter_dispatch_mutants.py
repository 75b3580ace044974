"""The zoo's aiter-dispatch target: edits of ``aiter/fused_moe.py``, each re-creating a way the
dispatch can lose what a kernel must be told, applied to a copy of an aiter tree.

Index:

- :data:`MUTANTS` -- name -> :class:`DispatchMutant` (origin, what it breaks, its text edits,
  written against ROCm/aiter e4048607; an edit whose text is not found exactly once is
  :class:`MutantNotApplicable`, never a silent no-op).
- :func:`mutated_tree` -- a copy of the tree (symlinks to every file but the edited one) with
  one mutant applied: what the dispatch checks then load (``--aiter-src``).
- :data:`MUTANT_ENV` / :func:`zoo_mutants` -- ``fp4moe-gate zoo --target aiter-dispatch``: the
  zoo's child pytest sets the variable; the dispatch tests (tests/targets/aiter/dispatch) load
  the mutated copy instead of the tree and must fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_text_bounded

MUTANT_ENV = "FP4MOE_AITER_DISPATCH_MUTANT"
FUSED_MOE = "aiter/fused_moe.py"


class MutantNotApplicable(GateCannotRun):
    """The tree does not hold the text a mutant edits (another aiter commit): not judged."""


@dataclass(frozen=True)
class TreeEdit:
    old: str
    new: str


@dataclass(frozen=True)
class DispatchMutant:
    name: str
    origin: str
    description: str
    edits: tuple[TreeEdit, ...]
    file: str = FUSED_MOE


_FLYDSL_HEURISTIC = '''            functools.partial(
                _flydsl_stage1_wrapper,
                kernelName=kn1,
                activation=activation,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kn2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
            ),
            _tile_m,
            -1,  # split_k = -1'''

_OPUS_STAGE1 = '''                _opus_a8w4_stage1_wrapper,
                kernelName=kernelName1,
                activation=activation,
                block_m=block_m,
                inter_dim_pad=intermediate_pad,
'''

_FLYDSL_TUNED_STAGE2 = '''        elif is_flydsl2:
            stage2_func = functools.partial(
                _flydsl_stage2_wrapper,
                kernelName=kernelName2,
                inter_dim_pad=intermediate_pad,
                model_dim_pad=hidden_pad,
'''

_OPUS_STAGE2 = '''        elif is_opus2:
            stage2_func = functools.partial(
                _opus_a8w4.opus_a8w4_stage2_wrapper,
                kernelName=kernelName2,
                inter_dim_pad=intermediate_pad,
'''

_CKTILE_SPLITK_N_PAD = '''                n_pad_zeros=intermediate_pad // 64 * 64 * (2 if use_g1u1 else 1),
                k_pad_zeros=hidden_pad // 128 * 128,
                activation=activation,
                split_k=_split_k,
                dtype=dtype,
                post_activation_layout=('''

_IMPL_SHUFFLED = '    isShuffled = getattr(w1, "is_shuffled", False) or getattr(w2, "is_shuffled", False)'
_STAGES_SHUFFLED = '    is_shuffled = getattr(w1, "is_shuffled", False) or getattr(w2, "is_shuffled", False)'

_LIST = (
    DispatchMutant(
        "flydsl_partials_pad_dropped", "SGLang PR #27858 / aiter #5413 (a pad that never reaches the kernel)",
        "the heuristic FlyDSL stage partials lose inter_dim_pad=intermediate_pad",
        (TreeEdit(_FLYDSL_HEURISTIC, _FLYDSL_HEURISTIC.replace("                inter_dim_pad=intermediate_pad,\n", "")),)),
    DispatchMutant(
        "opus_stage1_pad_dropped", "aiter #5413 (the pad lost on the way to one stage)",
        "the tuned Opus stage-1 partial loses inter_dim_pad=intermediate_pad",
        (TreeEdit(_OPUS_STAGE1, _OPUS_STAGE1.replace("                inter_dim_pad=intermediate_pad,\n", "")),)),
    # the cost on paper (dispatch/cost.py): a stage handed the padded extent where the unpadded one was
    # available reads R times the bytes; the pad passed but the unpadded size not (on the wrong extent,
    # or for one half of gate/up), or the pad dropped
    DispatchMutant(
        "flydsl_stage2_pad_on_model_dim", "SGLang PR #27858 (the pad given, the kernel still computes the padded K)",
        "the tuned FlyDSL stage-2 partial passes the intermediate pad as model_dim_pad (and the hidden pad as "
        "inter_dim_pad): a pad reaches the stage, its K stays the padded intermediate",
        (TreeEdit(_FLYDSL_TUNED_STAGE2, _FLYDSL_TUNED_STAGE2.replace("inter_dim_pad=intermediate_pad", "inter_dim_pad=@")
                  .replace("model_dim_pad=hidden_pad", "model_dim_pad=intermediate_pad").replace("@", "hidden_pad")),)),
    DispatchMutant(
        "cktile_gate_up_pad_once", "fused_moe.py: n_pad_zeros counts the pad of gate and up (2x with use_g1u1)",
        "the CK-tile split-k stage-1 partial tells the intermediate pad once, not for gate and up: N stays 2P - pad",
        (TreeEdit(_CKTILE_SPLITK_N_PAD, _CKTILE_SPLITK_N_PAD.replace(" * (2 if use_g1u1 else 1)", "")),)),
    DispatchMutant(
        "opus_stage2_pad_dropped", "aiter #5413 / SGLang PR #27858 (the pad lost on the way to one stage)",
        "the tuned Opus stage-2 partial loses inter_dim_pad=intermediate_pad (stage 2 computes the padded K)",
        (TreeEdit(_OPUS_STAGE2, _OPUS_STAGE2.replace("                inter_dim_pad=intermediate_pad,\n", "")),)),
    DispatchMutant(
        "swiglu_limit_not_forwarded", "fused_moe.py: swiglu_limit reaches only the FlyDSL/Opus stage-1 wrappers",
        "fused_moe_2stages no longer forwards swiglu_limit to stage 1 (the clamp is lost)",
        (TreeEdit('        extra_stage1_args["swiglu_limit"] = swiglu_limit', '        extra_stage1_args["swiglu_limit"] = None'),)),
    DispatchMutant(
        "is_shuffled_ignored", "aiter's is_shuffled attribute (shuffle_weight sets it)",
        "both dispatch reads of is_shuffled assume preshuffled weights: plain weights reach preshuffle-only kernels",
        (TreeEdit(_IMPL_SHUFFLED, "    isShuffled = True"), TreeEdit(_STAGES_SHUFFLED, "    is_shuffled = True"))),
    DispatchMutant(
        "tuned_stage1_kernel_swapped", "aiter PR #4398 review (tests hard-code a tile the tuned CSVs do not select)",
        "a tuned row's stage-1 kernel replaced by another row's (FlyDSL tile_m 64 over block_m 32 sorting)",
        (TreeEdit('        kernelName1 = cfg["kernelName1"]',
                  '        kernelName1 = "flydsl_moe1_afp8_wfp4_bf16_t64x128x256_w3_gui_fp8"'),)),
    DispatchMutant(
        "bf16_fp8_bound_moved", "AITER_BF16_FP8_MOE_BOUND (the bf16/fp8 activation switch)",
        "the default bf16/fp8 activation bound moves from 256 to 16 tokens",
        (TreeEdit('os.environ.get("AITER_BF16_FP8_MOE_BOUND", "256")', 'os.environ.get("AITER_BF16_FP8_MOE_BOUND", "16")'),)),
    DispatchMutant(
        "block_m_rounded_to_64", "block_m must equal the sorting unit and the kernel's tile_m",
        "the sorting unit is rounded up to a multiple of 64 while the kernels keep their tile",
        (TreeEdit("        block_size_M = int(block_size_M)\n", "        block_size_M = -(-int(block_size_M) // 64) * 64\n"),)),
)

MUTANTS: dict[str, DispatchMutant] = {m.name: m for m in _LIST}


def apply_edits(source: str, mutant: DispatchMutant, where: str) -> str:
    """``source`` with every edit of ``mutant`` applied; each old text must occur exactly once."""
    for i, e in enumerate(mutant.edits):
        n = source.count(e.old)
        if n != 1:
            first = e.old.strip().splitlines()[0][:80]
            raise MutantNotApplicable(f"mutant {mutant.name}: edit {i + 1} found {n} times (expected once) in {where}: {first!r}")
        source = source.replace(e.old, e.new)
    return source


def mutated_tree(tree: str | os.PathLike, name: str, dest: str | os.PathLike) -> Path:
    """``dest`` made a copy of ``tree`` (a folder holding ``aiter/`` and ``csrc/``) with mutant
    ``name`` applied: the edited file is real, every other entry a symlink into ``tree``."""
    if name not in MUTANTS:
        raise GateCannotRun(f"{MUTANT_ENV}={name}: unknown aiter-dispatch mutant; known: {', '.join(MUTANTS)}")
    mutant, src, out = MUTANTS[name], Path(tree), Path(dest)
    target = src / mutant.file
    if not target.is_file():
        raise MutantNotApplicable(f"mutant {name}: {target}: no such file")
    edited = apply_edits(read_text_bounded(target), mutant, str(target))
    rel = Path(mutant.file)
    _link_farm(src, out, rel)
    (out / rel).write_text(edited, encoding="utf-8")
    return out


def _link_farm(src: Path, out: Path, rel: Path) -> None:
    """Real folders along ``rel``'s parents, symlinks for everything else."""
    out.mkdir(parents=True, exist_ok=True)
    here_src, here_out = src, out
    for part in rel.parts[:-1]:
        for entry in here_src.iterdir():
            if entry.name != part and not (here_out / entry.name).exists():
                (here_out / entry.name).symlink_to(entry.resolve())
        here_src, here_out = here_src / part, here_out / part
        here_out.mkdir(exist_ok=True)
    for entry in here_src.iterdir():
        if entry.name != rel.name and not (here_out / entry.name).exists():
            (here_out / entry.name).symlink_to(entry.resolve())


def zoo_mutants() -> list:
    """``fp4moe.gates.zoo.mutants.Mutant`` objects: applying one sets :data:`MUTANT_ENV` in the
    zoo's child pytest; the dispatch tests then load the mutated copy of the tree."""
    from fp4moe.gates.zoo.mutants import Mutant

    def setter(n):
        def apply(mp):
            mp.setenv(MUTANT_ENV, n)

        return apply

    return [Mutant(m.name, m.origin, m.description, setter(m.name), needs_shared="aiter/e4048607") for m in _LIST]
