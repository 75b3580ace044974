"""The zoo's SGLang target: one ``Mutant`` per entry of the SGLang mutant catalogue
(``fp4moe.targets.sglang.mutations``). Applying one in the zoo's child pytest sets
:data:`MUTANT_ENV`; the sglang tier's SGLang child applies it to SGLang's code.
"""

from __future__ import annotations

from fp4moe.gates.zoo.mutants import Mutant
from fp4moe.targets.sglang.mutations import MUTANT_ENV, MUTANTS

#: what killed every one of them when catalogued (the tier's row-by-row checks; ``Mutant.first_tests``)
FIRST_TESTS = ("tests/targets/sglang/test_sglang_tier.py::test_sglang_check",)
#: mutants of SGLang's routers, killed by the release-level router numerics test
ROUTER_FIRST_TESTS = {"sqrtsoftplus_as_written": ("tests/targets/sglang/test_sglang_tier.py::test_router_numerics",)}


def zoo_mutants() -> list:
    """``fp4moe.gates.zoo.mutants.Mutant`` objects for ``fp4moe-gate zoo --target sglang``: applying one in
    the zoo's child pytest sets :data:`MUTANT_ENV`; the sglang tier's SGLang child applies it to
    SGLang's code and reports whether it could (not applied -> the tier ends "not judged")."""
    def setter(name):
        def apply(mp):
            mp.setenv(MUTANT_ENV, name)

        return apply

    return [Mutant(n, origin, desc, setter(n), first_tests=ROUTER_FIRST_TESTS.get(n, FIRST_TESTS))
            for n, (origin, desc) in MUTANTS.items()]
