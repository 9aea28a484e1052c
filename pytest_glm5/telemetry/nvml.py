"""GPU facts from NVML (nvidia-ml-py): the inventory behind hardware keys and gating.

Without NVML or GPUs there is no inventory: said once by the caller, never an error.
`GLM5_NVML_MODULE` names another module with pynvml's API (the tests' fake NVML).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..names import key


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
    uuid: str = ""  # GPU-8c5e...: what a lease holds (an index can change with the next boot or driver)


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
            uuid = f"GPU-index-{i}"  # Leases key on it: without NVML's UUID, the index has to do.
            with contextlib.suppress(Exception):
                uuid = _text(nvml.nvmlDeviceGetUUID(h))
            out.append(Gpu(i, _text(nvml.nvmlDeviceGetName(h)), f"{major}.{minor}", round(mem.total / 2**30, 1),
                           driver, gen, width, uuid))
        return out
    except Exception:
        return None


def gpu_processes(uuids: list[str], nvml: ModuleType | None = None) -> dict[str, list[tuple[int, float]]]:
    """The compute processes NVML lists on each of these GPUs: uuid -> [(pid, GB used)]; empty without NVML."""
    nvml = nvml or load_nvml()
    out: dict[str, list[tuple[int, float]]] = {}
    if nvml is None:
        return out
    for uuid in uuids:
        with contextlib.suppress(Exception):  # a GPU or driver that cannot say is left out
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByUUID(uuid))
            out[uuid] = [(int(p.pid), round(float(p.usedGpuMemory or 0) / 2**30, 1)) for p in procs]
    return out


def wait_released(uuids: list[str], pids: set[int], timeout_s: float, nvml: ModuleType | None = None,
                  poll_s: float = 0.5) -> str | None:
    """Wait until NVML lists none of these (stopped) processes on these GPUs: the driver frees a dead process's
    memory a moment after it exits, and the next 8 x 60 GB load must not start into it. The problem, if the memory
    is still held after timeout_s (None: released, or NVML cannot say)."""
    nvml = nvml or load_nvml()
    if nvml is None or not uuids or not pids:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        held = [(uuid, pid, gb) for uuid, procs in gpu_processes(uuids, nvml).items() for pid, gb in procs
                if pid in pids]
        if not held:
            return None
        if time.monotonic() >= deadline:
            total = sum(gb for _, _, gb in held)
            return (f"{len(held)} process(es) of the stopped server still hold {total:.1f} GB on "
                    f"{len({u for u, _, _ in held})} GPU(s) {timeout_s:.0f} s after it stopped (pids "
                    f"{', '.join(str(p) for p in sorted({p for _, p, _ in held}))}); the next launch may run out of "
                    "memory")
        time.sleep(poll_s)


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


def sim_hardware_key(profile: str, time_scale: Any) -> str:
    """`sim-glm5-sm120-x0.01`: emulator baselines never mix with real hardware or other time scales. ValueError for
    a profile name that is no key (`../x`) or a time scale that is no number above 0: the key names directories."""
    try:
        scale = float(time_scale)
    except (TypeError, ValueError):
        raise ValueError(f"the emulator's time scale {time_scale!r} is not a number") from None
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"the emulator's time scale {time_scale!r} is not a number above 0")
    key(str(profile), "the emulator profile's name")
    return key(f"sim-{profile}-x{scale:g}", "the emulator's hardware key")


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


FIELDS = ("power_w", "memory_used_gb", "util_pct", "sm_clock_mhz", "temp_c")


@dataclass
class Telemetry:
    """Samples per GPU over a load run, with their mean and max."""

    hz: float
    samples: list[dict[str, float]]  # each: t (s since start), gpu, and FIELDS

    def summary(self) -> dict[int, dict[str, dict[str, float]]]:
        """Per GPU, per field: mean and max."""
        out: dict[int, dict[str, dict[str, float]]] = {}
        for gpu in sorted({int(s["gpu"]) for s in self.samples}):
            rows = [s for s in self.samples if int(s["gpu"]) == gpu]
            out[gpu] = {f: {"mean": sum(r[f] for r in rows) / len(rows), "max": max(r[f] for r in rows)}
                        for f in FIELDS}
        return out

    def memory_growth_gb(self) -> dict[int, float]:
        """Per GPU: mean memory used in the last quarter of the run minus the first quarter."""
        out: dict[int, float] = {}
        for gpu in sorted({int(s["gpu"]) for s in self.samples}):
            rows = [s["memory_used_gb"] for s in self.samples if int(s["gpu"]) == gpu]
            q = max(1, len(rows) // 4)
            out[gpu] = sum(rows[-q:]) / q - sum(rows[:q]) / q
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the summary and the samples."""
        return {"hz": self.hz, "summary": self.summary(), "samples": self.samples}


def power_samples(telemetry: Telemetry | None) -> dict[int, list[tuple[float, float]]]:
    """Per GPU, (t, W) of a run's samples: what energy.py integrates where a GPU has no energy counter."""
    out: dict[int, list[tuple[float, float]]] = {}
    for s in telemetry.samples if telemetry is not None else []:
        out.setdefault(int(s["gpu"]), []).append((float(s["t"]), float(s["power_w"])))
    return out


class Sampler:
    """Samples NVML on a thread at `hz` while a load runs (the load owns the main thread's event loop)."""

    def __init__(self, nvml: ModuleType, hz: float = 8.0) -> None:
        import threading

        self.nvml = nvml
        self.hz = hz
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="glm5-nvml", daemon=True)
        self._t0 = 0.0

    def _read(self, i: int, h: Any, t: float) -> dict[str, float]:
        n = self.nvml
        return {
            "t": round(t, 3),
            "gpu": float(i),
            "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "memory_used_gb": n.nvmlDeviceGetMemoryInfo(h).used / 1e9,
            "util_pct": float(n.nvmlDeviceGetUtilizationRates(h).gpu),
            "sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, getattr(n, "NVML_CLOCK_SM", 1))),
            "temp_c": float(n.nvmlDeviceGetTemperature(h, getattr(n, "NVML_TEMPERATURE_GPU", 0))),
        }

    def _run(self) -> None:
        import time

        handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(self.nvml.nvmlDeviceGetCount()))]
        while not self._stop.is_set():
            t = time.monotonic() - self._t0
            try:
                self.samples += [self._read(i, h, t) for i, h in enumerate(handles)]
            except Exception:
                return  # A GPU that stops answering ends the sampling, never the run.
            self._stop.wait(1.0 / self.hz)

    def start(self) -> Sampler:
        """Begin sampling."""
        import time

        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> Telemetry:
        """End sampling and return what was seen."""
        self._stop.set()
        self._thread.join(5)
        return Telemetry(self.hz, list(self.samples))
