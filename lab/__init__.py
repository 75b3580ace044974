"""The lab: studies, GPU-machine recipes and a recorded baseline, run by hand from a checkout
(``python3 -m lab.studies.NAME``). Not packaged: the wheel holds ``fp4moe`` only."""
