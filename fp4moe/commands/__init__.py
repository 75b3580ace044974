"""The command line, the top floor: ``main`` (the ``fp4moe-gate`` entry point and the exit-code
contract) and one module per public subcommand, each parsing its options and calling a gate.
Shared options and output writing live in one place each.
"""
