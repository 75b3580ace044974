"""The zoo's child entry: ``plugin``, the pytest plugin loaded by name (``-p``) in each child
suite run (``fp4moe.gates.zoo.runner``), never imported by a parent.
"""
