"""The H200 check: GPU idle readings taken before any server starts, for the telemetry test."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_glm5.telemetry import load_nvml


def _idle() -> list[dict[str, float]] | None:
    nvml = load_nvml()
    if nvml is None:
        return None
    out = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        out.append({"power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "memory_used_gb": nvml.nvmlDeviceGetMemoryInfo(h).used / 1e9})
    return out


IDLE = _idle()  # read at collection, before the first server launch


@pytest.fixture
def idle_gpu() -> Any:
    """Per-GPU power and memory before any server ran (None without NVML)."""
    return IDLE
