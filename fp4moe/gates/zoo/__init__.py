"""The bug zoo: every known failure as a mutant (``mutants`` for the reference path,
``sglang_mutants`` for SGLang's own code), ``runner`` runs the suite once per mutant and
judges, ``child.plugin`` is the pytest plugin loaded by name (``-p``) in the child suite.
"""
