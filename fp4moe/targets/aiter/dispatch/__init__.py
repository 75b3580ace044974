"""aiter's ``fused_moe`` dispatch executed under the gate (``aiter-check`` group (f)).

Index: :mod:`.loader` (the tree's real fused_moe, imported unmodified in a child), :mod:`.standins`
(the one table of compiled-op / launch stand-ins), :mod:`.records` (the child's record schema),
``child`` (the entries, started by module name: the table's, and ``child.numerics``), :mod:`.table`
(rows derived from the tree; per-row facts), :mod:`.contracts` (the checks, parent only),
:mod:`.compute` (the computing stand-ins), :mod:`.numerics` (the seeded cases per path, judged in
the parent against the reference), :mod:`.sglang_call` (SGLang's call into the executed dispatch,
judged from the SGLang child's record), :mod:`.calls` (one call run and recorded, in a child that
loaded the tree), :mod:`.group` (the aiter-check group).
"""
