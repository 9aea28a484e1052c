"""The GLM-5 / SM120 suite's settings, apart from the plugin's own test settings (pyproject.toml).

`pytest -m sm120` in this directory collects `suites/` (pyproject's testpaths); `pytest tests` runs the plugin's
own tests. These settings apply to every run started here.
"""

from __future__ import annotations

from typing import Any

import pytest

# The gated markers: a test so marked runs only where NVML shows GPUs of this compute capability (or on the
# emulator with --glm5-sim, or against a running server with --sglang-url).
GATED_MARKERS = {"sm120": "12.0"}

# The rehearsal (`pytest -m sm120 --glm5-sim`) runs the emulator 100x faster than real time and loads its model in
# 20 model seconds (0.2 s: the gate relaunches a server where a verdict needs another launch); emulator baselines
# are keyed by this scale (baselines/sim-glm5-sm120-x0.01/).
SIM_DEFAULTS = {"glm5-sim-time-scale": "0.01", "glm5-sim-startup-s": "20"}
# Correctness the night cannot skip: each config's first launch of a night answers 200 generated arithmetic word
# problems (GSM8K's shape, no download), paired against its recorded answers; priced in the plan. A GSM8K JSONL
# file instead: --glm5-accuracy-set=PATH; none: --glm5-no-accuracy (the outcome line then says "canary only").
CHECKS = {"glm5-accuracy-set": "generated:200"}


def pytest_glm5_suite(config: pytest.Config) -> dict[str, Any]:
    """The suite's gated markers and emulator defaults, for pytest-glm5."""
    return {"gated_markers": GATED_MARKERS, "defaults": {**SIM_DEFAULTS, **CHECKS}}
