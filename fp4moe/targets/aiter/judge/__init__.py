"""aiter's judge: every check aiter-check makes of an aiter tree, judged in the parent on what the
children computed (the kernel checks' judge is ``fp4moe.targets.aiter.kernels.checks``).

- ``source_checks``: groups (a)-(d) as one table, and the record of their child;
- ``api``: (a) the signatures of ``fused_moe`` / ``shuffle_weight`` / ``shuffle_scale``;
- ``layout``: (b) aiter's shuffles against ``fp4moe.reference.layout``;
- ``capabilities``: (c) the PR #4130 probe and the bound-environment probe;
- ``registry``: the known-upstream-defects registry applied to the kernel rows;
- ``upgrade``: ``--base-src``: the two trees' kernel outputs compared.

The result words are ``fp4moe.targets.aiter.results.Result``.
"""
