"""The dispatch child (``python -m fp4moe.targets.aiter.dispatch.child``): started by name, never imported."""
