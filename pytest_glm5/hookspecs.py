"""Hooks a suite implements (in its root conftest.py) to give the plugin its settings."""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_glm5_suite(config: Any) -> dict[str, Any] | None:
    """The suite's settings: `{"gated_markers": {"sm120": "12.0"}, "defaults": {"glm5-sim-time-scale": 0.01}}`.

    `gated_markers`: marker -> compute capability its tests need (they skip, with the reason, elsewhere, unless
    --glm5-sim or --sglang-url). `defaults`: setting name -> value, below the command line, ini and env."""
