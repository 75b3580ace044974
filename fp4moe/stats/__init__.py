"""Statistics for the perf and serving gates: no device, no model, no I/O but plots.

``compare`` (Mann-Whitney + Hodges-Lehmann ratio and interval, the verdict words),
``sequential`` (group-sequential rule with Pocock spending), ``report`` (markdown table, plot).
"""
