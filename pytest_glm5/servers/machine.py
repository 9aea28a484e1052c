"""The machine a run measures on: NVML's GPUs as this run may see them (an outer CUDA_VISIBLE_DEVICES narrows them),
the hardware key a config's baselines are read under, which gated tests these GPUs cannot run and why, and one GPU
lease book per machine (NVML's, or each emulated profile's). The session asks; it never reads NVML itself.

A value in, a value out: every answer is computed from the settings, the environment and the configs handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..configs import ServerConfig
from ..settings import Settings
from ..telemetry.nvml import Gpu, describe, gpu_processes, hardware_key, inventory
from .engines import EngineError
from .engines.base import Engine, gpus_for
from .leases import Device, LeaseBook, LeaseError, book_for, default_lease_dir, emulated, visible


class MachineError(Exception):
    """GPUs that cannot be read, narrowed or leased as asked; the message names the cause and the fix."""


class Gated(Protocol):
    """What the machine needs of a collected test: its id, its config and its markers."""

    @property
    def nodeid(self) -> str: ...
    @property
    def config(self) -> str | None: ...
    @property
    def markers(self) -> frozenset[str]: ...


class Machine:
    """This run's GPUs and lease books, read once."""

    def __init__(self, settings: Settings, environ: Mapping[str, str], engine_for: Callable[[ServerConfig], Engine],
                 cache: Callable[[str], Path] | None) -> None:
        self.settings = settings
        self.environ = environ
        self.engine_for = engine_for
        self.cache = cache  # pytest's cache directories by name (the emulated machines keep their leases there)
        self._gpus: list[Gpu] | None = None
        self._gpus_read = False
        self.books: dict[str, LeaseBook | None] = {}  # per machine: NVML's, or each emulated profile's

    def gpus(self) -> list[Gpu] | None:
        """NVML's GPUs (None: no NVML), read once."""
        if not self._gpus_read:
            self._gpus, self._gpus_read = inventory(), True
        return self._gpus

    def visible_gpus(self) -> list[Gpu] | None:
        """NVML's GPUs as this run may use them: an outer CUDA_VISIBLE_DEVICES narrows them (a box whose run sees 1
        of its 8 GPUs is a 1-GPU machine for the baselines and the gate)."""
        gpus = self.gpus()
        if not gpus:
            return gpus
        try:
            keep = visible([Device(g.index, g.uuid) for g in gpus], self.environ.get("CUDA_VISIBLE_DEVICES"),
                           "NVML GPUs")
        except LeaseError as exc:
            raise MachineError(str(exc)) from None
        by_index = {g.index: g for g in gpus}
        return [by_index[d.index] for d in keep]

    def nvml_key(self) -> str | None:
        """The hardware key of the GPUs this run sees (None without NVML)."""
        gpus = self.visible_gpus()
        return hardware_key(gpus) if gpus else None

    def gpu_skips(self, items: Sequence[Gated], configs: Mapping[str, ServerConfig],
                  gated_markers: Mapping[str, str]) -> dict[str, str]:
        """Tests of a gated marker (`sm120`) that this machine's GPUs cannot run, with the reason (not under the
        emulator or an external server)."""
        s = self.settings
        if s.sim or s.external:
            return {}
        where = f" (CUDA_VISIBLE_DEVICES={self.environ['CUDA_VISIBLE_DEVICES']})" \
            if "CUDA_VISIBLE_DEVICES" in self.environ else ""
        out: dict[str, str] = {}
        for marker, cc in gated_markers.items():
            gated = [item for item in items if marker in item.markers]
            if not gated:
                continue
            gpus = self.visible_gpus()
            have = [g for g in gpus or [] if g.compute_capability == cc]
            for item in gated:
                cfg = configs.get(item.config or "")
                need, why = gpus_for(self.engine_for(cfg), cfg, len(gpus or [])) if cfg is not None else (1, "")
                if have and len(have) >= need:
                    continue
                if not have:
                    out[item.nodeid] = (f"{marker}: needs compute capability {cc} GPUs; found {describe(gpus)}"
                                        f"{where}. Rehearse on the emulator with --glm5-sim, or use a running "
                                        "server with --sglang-url URL")
                else:
                    out[item.nodeid] = (f"{marker}: config {cfg.name if cfg else '?'} needs {need} GPUs of compute "
                                        f"capability {cc} ({why}); this run sees {len(have)}{where}")
        return out

    def hardware_known(self, cfg: ServerConfig) -> str | None:
        """The hardware key a config's baselines will be read under, where it is known before any launch."""
        s = self.settings
        try:
            key = self.engine_for(cfg).hardware_key(cfg)
        except EngineError as exc:
            raise MachineError(str(exc)) from None
        if key is not None:
            return key
        if s.hardware:
            return s.hardware
        return None if s.external else self.nvml_key()

    def lease_book(self, cfg: ServerConfig) -> LeaseBook | None:
        """The GPUs a config's server is leased from: its emulator profile's (each profile a machine of its own),
        else NVML's; None with an external server."""
        s = self.settings
        if s.external:
            return None
        try:
            # Only under --glm5-sim is the machine emulated: a config of engine "sim" on a GPU box leases real GPUs.
            emulated_by = self.engine_for(cfg).devices(cfg) if s.sim else None
        except EngineError as exc:
            raise MachineError(str(exc)) from None
        key = f"sim-{emulated_by[0]}" if emulated_by else "nvml"
        if key in self.books:
            return self.books[key]
        if emulated_by is not None:
            name, count = emulated_by
            devices = emulated(name, count)
            what = f"{count} emulated GPUs (profile {name})"
            directory = self.cache("glm5") if self.cache is not None else default_lease_dir() / "sim"
            # The host's CUDA_VISIBLE_DEVICES names real GPUs (empty on a box without any), not the emulated ones:
            # a rehearsal narrows the emulated machine with a variable of its own.
            variable = "GLM5_SIM_VISIBLE_DEVICES"
            file = f"gpu-leases-{name}.json"
        else:
            gpus = self.gpus() or []
            devices = [Device(g.index, g.uuid) for g in gpus]
            what = f"{len(gpus)} GPUs (NVML)"
            directory = Path(s.lease_dir) if s.lease_dir else default_lease_dir()
            variable = "CUDA_VISIBLE_DEVICES"
            file = "gpu-leases.json"
        try:
            book = book_for(devices, what, self.environ.get(variable), directory,
                            exclusive=s.exclusive or bool(s.update_baselines),
                            probe=None if emulated_by else gpu_processes, file=file, variable=variable)
        except LeaseError as exc:
            raise MachineError(str(exc)) from None
        except OSError as exc:
            raise MachineError(f"cannot keep GPU leases in {directory}: {exc.strerror or exc}; set "
                               "--glm5-lease-dir or env GLM5_LEASE_DIR to a writable directory") from None
        self.books[key] = book
        return book
