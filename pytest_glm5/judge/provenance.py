"""Who measured what: hardware key, model, commit, engine and version, server-args hash, driver, workload."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..telemetry.nvml import sim_hardware_key

VOLATILE_INFO_KEYS = {"port", "host", "startup_time", "status", "internal_states", "launch_command", "nccl_port",
                      "random_seed"}


class HardwareError(Exception):
    """No hardware key can be had for a server; the message says what to pass."""


@dataclass(frozen=True)
class Provenance:
    """One verdict's origin, stamped on the baseline entry it writes."""

    hardware: str
    model: str
    commit: str
    engine: str
    server_args: str
    driver: str = ""
    workload: dict[str, Any] = field(default_factory=dict)
    build: str = ""  # the build's identity: engine and kernel versions, editable commits, patch hash
    cotenants: tuple[str, ...] = ()  # other servers on the machine's GPUs while it was measured
    power: dict[str, float] = field(default_factory=dict)  # the GPUs' power regime (energy.Window.power): limit, cap

    def with_cotenants(self, cotenants: list[str]) -> Provenance:
        """The same server's provenance for a measurement that shared the machine with these servers."""
        return replace(self, cotenants=tuple(sorted(set(cotenants))))

    def with_power(self, power: dict[str, float]) -> Provenance:
        """The same server's provenance with the power its GPUs ran at over this measurement."""
        return replace(self, power=dict(power))

    def with_workload(self, workload: dict[str, Any]) -> Provenance:
        """The same server's provenance for another measurement."""
        return replace(self, workload=dict(workload))

    def as_entry(self) -> dict[str, Any]:
        """What a baselines entry keeps (the workload has its own key there)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("workload", "model")
               and (k not in ("build", "cotenants", "power") or v)}
        if self.cotenants:
            out["cotenants"] = list(self.cotenants)
        return out


def hardware_for(server_info: dict[str, Any], given: str | None, nvml_key: str | None) -> str:
    """The hardware key of a server: --glm5-hardware, the emulator's profile and time scale, or NVML's."""
    sim = server_info.get("sim")
    if isinstance(sim, dict):
        try:
            key = sim_hardware_key(str(sim.get("profile")), sim.get("time_scale", 1.0))
        except ValueError as exc:
            raise HardwareError(f"the server's /server_info names no usable emulator hardware: {exc}; is it the "
                                "emulator? a real server is keyed by --glm5-hardware") from None
        if given and given != key:
            raise HardwareError(f"--glm5-hardware {given} given for an emulator run; emulator baselines are keyed "
                                f"{key} and never mix with real hardware or other time scales")
        return key
    if given:
        if given.startswith("sim-"):
            raise HardwareError(f"--glm5-hardware {given} names emulator baselines, but the server is not the "
                                "emulator")
        return given
    if nvml_key is None:
        raise HardwareError("cannot tell which hardware this server runs on: NVML is not available here (or the "
                            "server is remote); pass --glm5-hardware KEY, e.g. 8x-rtx-pro-6000-blackwell-sm120")
    return nvml_key


def args_hash(server_info: dict[str, Any]) -> str:
    """Hash of the server's resolved args, without what changes from launch to launch."""
    stable = {k: v for k, v in server_info.items() if k not in VOLATILE_INFO_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:12]


def git_commit(root: Path) -> str:
    """The suite's git commit (short), with `+dirty` for uncommitted changes; `unknown` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
