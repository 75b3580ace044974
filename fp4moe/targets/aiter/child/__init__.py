"""Child entry modules of the aiter target: started by module name (``python -m ...``) in a child
process with a time limit (``fp4moe.infra.runner``), never imported by a parent."""
