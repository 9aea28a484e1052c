"""The GPUs' own numbers: NVML's inventory and sampler (`nvml`) and the energy meter over a window (`energy`).
Numbers, no verdicts: what a changed power regime means for a verdict is the judge's (judge/regime.py)."""
