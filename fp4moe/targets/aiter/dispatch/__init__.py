"""aiter's ``fused_moe`` dispatch executed under the gate (``aiter-check`` group (f)).

Index: :mod:`.loader` (the tree's real fused_moe, imported unmodified in a child), :mod:`.standins`
(the one table of compiled-op / launch stand-ins), :mod:`.records` (the child's record schema),
``child`` (the entry, started by module name), :mod:`.table` (rows derived from the tree; per-row
facts), :mod:`.contracts` (the checks, parent only), :mod:`.group` (the aiter-check group).
"""
