"""GPU facts from NVML (nvidia-ml-py): the inventory behind hardware keys and gating.

Without NVML or GPUs there is no inventory: said once by the caller, never an error.
`GLM5_NVML_MODULE` names another module with pynvml's API (the tests' fake NVML).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML reports it."""

    index: int
    name: str
    compute_capability: str
    memory_gb: float
    driver: str
    pcie_gen: int | None = None
    pcie_width: int | None = None


def load_nvml() -> ModuleType | None:
    """pynvml initialised, or None when the library, the driver or the GPUs are missing."""
    name = os.environ.get("GLM5_NVML_MODULE", "pynvml")
    try:
        nvml = importlib.import_module(name)
        nvml.nvmlInit()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded...
        return None
    return nvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def inventory(nvml: ModuleType | None = None) -> list[Gpu] | None:
    """Every GPU NVML sees; None without NVML."""
    nvml = nvml or load_nvml()
    if nvml is None:
        return None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        out = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            gen: int | None = None
            width: int | None = None
            try:
                gen = int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h))
                width = int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h))
            except Exception:
                pass  # Not every GPU or driver reports its link.
            out.append(Gpu(i, _text(nvml.nvmlDeviceGetName(h)), f"{major}.{minor}", round(mem.total / 2**30, 1),
                           driver, gen, width))
        return out
    except Exception:
        return None


def slug(name: str) -> str:
    """`NVIDIA RTX PRO 6000 Blackwell Workstation Edition` -> `rtx-pro-6000-blackwell`."""
    s = name.lower().replace("nvidia", "")
    s = re.sub(r"\b(workstation|server|max-q)\s+edition\b", "", s)
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-")


def hardware_key(gpus: list[Gpu]) -> str:
    """`8x-rtx-pro-6000-blackwell-sm120` (count, model, compute capability)."""
    if not gpus:
        return "no-gpu"
    names = sorted({g.name for g in gpus})
    cc = gpus[0].compute_capability.replace(".", "")
    return f"{len(gpus)}x-{'+'.join(slug(n) for n in names)}-sm{cc}"


def describe(gpus: list[Gpu] | None) -> str:
    """`8x NVIDIA RTX PRO 6000 (12.0)` or `no NVML`."""
    if gpus is None:
        return "no NVML (nvidia-ml-py or the driver is missing)"
    if not gpus:
        return "NVML shows no GPU"
    kinds: dict[tuple[str, str], int] = {}
    for g in gpus:
        kinds[(g.name, g.compute_capability)] = kinds.get((g.name, g.compute_capability), 0) + 1
    return ", ".join(f"{n}x {name} (compute capability {cc})" for (name, cc), n in kinds.items())
