"""The statistical gates' defaults, in a module that imports nothing: the command line shows
them in ``--help`` without loading numpy or scipy (``fp4moe.stats.compare`` and
``fp4moe.stats.sequential`` re-export them under the same names)."""

#: regression threshold of perf compare / perf ab: head 5 % slower than base
DEFAULT_THRESHOLD = 0.05
#: one-sided significance level (per benchmark; spent over all looks in perf ab)
DEFAULT_ALPHA = 0.01
#: fewest rounds per side for a verdict (the rank test can reach p < 0.01 from 5 rounds)
DEFAULT_MIN_SAMPLES = 10
#: perf ab's sequential design: rounds per side at the first look, between looks, at the last
DEFAULT_FIRST, DEFAULT_STEP, DEFAULT_MAX_ROUNDS = 10, 10, 100
