"""GPU leases: each server gets a disjoint set of GPUs, across workers and runs, under a file lock.

A lease is keyed by GPU UUID (an index can change with a reboot or a driver) and handed to the server as
`CUDA_VISIBLE_DEVICES=<indices>` with `CUDA_DEVICE_ORDER=PCI_BUS_ID`: NVML counts GPUs in PCI bus order, so
with that order CUDA's indices are NVML's. Indices, not UUIDs, because SGLang 0.5.23 parses the variable as
integers in places (utils/cuda_vmm_utils.py:166 `map(int, ...)`) and warns without PCI_BUS_ID order
(platforms/cuda.py:67).

Waiters queue in arrival order and only the head of the queue is served, so a large config is not starved by a
stream of small ones; a waiter holds no lease, so waiting never deadlocks. An idle kept server
(--glm5-keep-servers) holds its GPUs until a launch needs them: then it is stopped.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from .process import same_process
from .records import LockedTables, Tables, owner, owner_alive

LEASES = "leases"  # uuid -> holder
QUEUE = "queue"  # ticket -> waiter
POLL_S = 0.25
_tickets = itertools.count()


class LeaseError(Exception):
    """A lease that can never be granted (more GPUs than exist) or a device list that cannot be read."""


@dataclass(frozen=True)
class Device:
    """One GPU a lease can hold: its NVML index and UUID."""

    index: int
    uuid: str


def visible(devices: list[Device], cuda_visible: str | None, what: str, variable: str = "CUDA_VISIBLE_DEVICES"
            ) -> list[Device]:
    """The devices an outer CUDA_VISIBLE_DEVICES leaves, in its order (indices, UUIDs or UUID prefixes, as CUDA
    reads them); all of them when it is unset. LeaseError names the entry that matches no GPU."""
    if cuda_visible is None:
        return list(devices)
    out: list[Device] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if not entry:
            continue
        if entry.startswith("MIG-"):
            raise LeaseError(f"{variable}={cuda_visible} names a MIG instance ({entry}); GPU leases hand "
                             "out whole GPUs: list GPUs (indices or GPU-... UUIDs), or unset it")
        if entry.lstrip("-").isdigit():
            hits = [d for d in devices if d.index == int(entry)]
        else:
            hits = [d for d in devices if d.uuid.startswith(entry)]
        if len(hits) != 1:
            found = "no GPU" if not hits else f"{len(hits)} GPUs"
            raise LeaseError(f"{variable}={cuda_visible}: {entry!r} matches {found} among the {what} "
                             f"(indices 0-{len(devices) - 1}); fix the entry or unset the variable")
        if hits[0] in out:
            raise LeaseError(f"{variable}={cuda_visible} names GPU {hits[0].index} twice")
        out.append(hits[0])
    return out


def emulated(profile: str, count: int) -> list[Device]:
    """The GPUs an emulator profile presents (`glm5-sm120`: eight)."""
    return [Device(i, f"GPU-sim-{profile}-{i}") for i in range(count)]


def span(indices: list[int]) -> str:
    """`GPUs 0-3`, `GPUs 4,6`, `GPU 0`: GPU indices for a person."""
    if indices and indices == list(range(indices[0], indices[0] + len(indices))) and len(indices) > 2:
        return f"GPUs {indices[0]}-{indices[-1]}"
    return ("GPU " if len(indices) == 1 else "GPUs ") + ",".join(str(i) for i in indices)


@dataclass
class Lease:
    """GPUs granted to one config's server."""

    config: str
    devices: list[Device]
    waited_s: float = 0.0
    server_pid: int | None = None

    @property
    def indices(self) -> list[int]:
        """NVML (= PCI_BUS_ID-ordered CUDA) indices."""
        return [d.index for d in self.devices]

    def env(self) -> dict[str, str]:
        """What the server is launched with."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.indices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass
class _Turn:
    """What one look at the table found."""

    granted: list[Device] = field(default_factory=list)
    victims: list[dict[str, Any]] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)


Probe = Callable[[list[str]], dict[str, list[tuple[int, float]]]]  # uuids -> [(pid, GB)] on each (NVML)
Waiting = Callable[[str, float, str], None]  # (config, seconds waited, what it waits for)
Evict = Callable[[dict[str, Any]], None]  # stop a kept or orphaned server that holds GPUs a launch needs


class LeaseBook:
    """The GPUs of this machine (or of an emulator profile) and who holds each, in one locked file."""

    say_after = 5.0  # seconds of waiting before the first line (short waits are the normal turn-taking)
    say_every = 30.0

    def __init__(self, path: Path, devices: list[Device], source: str, exclusive: bool = False,
                 probe: Probe | None = None) -> None:
        self.table = LockedTables(path, (LEASES, QUEUE))
        self.devices = devices
        self.source = source  # "8 GPUs (NVML)", "4 of 8 GPUs (CUDA_VISIBLE_DEVICES=0,1,2,3)", ...
        self.exclusive = exclusive
        self.probe = probe  # real GPUs only: what else already runs on them

    def outsiders(self, lease: Lease) -> list[str]:
        """Processes already on a just-granted lease's GPUs (before its server starts, any process there is
        outside the leases: another user's job, a notebook, a server this plugin did not start)."""
        if self.probe is None:
            return []
        found = self.probe([d.uuid for d in lease.devices])
        return [f"pid {pid} ({_name(pid)}) on GPU {d.index}, {gb:g} GB, outside pytest-glm5's leases"
                for d in lease.devices for pid, gb in found.get(d.uuid, [])]

    def check(self, config: str, need: int, why: str) -> int:
        """GPUs to lease for a config: all of them when exclusive; LeaseError with the numbers when there are too
        few."""
        if need > len(self.devices):
            raise LeaseError(f"config {config} needs {need} GPUs ({why}) but this run has {self.source}; nothing "
                             f"was launched. Run it where {need} GPUs are visible, or set `gpus = N` in "
                             f"[config.{config}] if its flags do not say how many it uses")
        return len(self.devices) if self.exclusive else need

    def acquire(self, config: str, need: int, waiting: Waiting | None = None, evict: Evict | None = None) -> Lease:
        """Wait in line for `need` free GPUs and take them; idle kept servers in the way are evicted."""
        ticket = f"{os.getpid()}:{next(_tickets)}"
        me = owner()
        t0 = time.monotonic()
        last_said = self.say_after - self.say_every
        try:
            while True:
                turn = _Turn()
                self.table.update(partial(self._turn, turn, ticket, me, config, need, evict is not None))
                if turn.granted:
                    return Lease(config, turn.granted, waited_s=time.monotonic() - t0)
                for v in turn.victims:
                    assert evict is not None
                    evict(v)
                    self._forget_server(int(v["server_pid"]))
                if turn.victims:
                    continue
                waited = time.monotonic() - t0
                if waiting is not None and waited - last_said >= self.say_every:
                    last_said = waited
                    waiting(config, waited, f"waits for {need} of {self.source}: " + "; ".join(turn.blocking))
                time.sleep(POLL_S)
        finally:
            self.table.update(lambda d: d[QUEUE].pop(ticket, None))

    def _turn(self, turn: _Turn, ticket: str, me: dict[str, Any], config: str, need: int, may_evict: bool,
              d: Tables) -> None:
        """One look at the table, under its lock: take the GPUs if this waiter is first in line and they are free."""
        self._drop_stale(d)
        d[QUEUE].setdefault(ticket, {"config": config, "need": need, "since": time.time(), **me})
        head = min(d[QUEUE], key=lambda t: (d[QUEUE][t]["since"], t))
        free = [dev for dev in self.devices if dev.uuid not in d[LEASES]]
        if head == ticket and len(free) >= need:
            turn.granted = free[:need]
            for dev in turn.granted:
                d[LEASES][dev.uuid] = {"config": config, "index": dev.index, "since": time.time(), "server_pid": None,
                                       "server_started": 0.0, "kept": False, **me}
            del d[QUEUE][ticket]
            return
        if head == ticket and may_evict:
            turn.victims = self._victims(d, need - len(free))
        turn.blocking = self._describe(d)
        if head != ticket:
            h = d[QUEUE][head]
            turn.blocking.insert(0, f"behind {h['config']} (waits for {h['need']})")

    def _victims(self, d: Tables, short: int) -> list[dict[str, Any]]:
        """Idle kept (or orphaned) servers whose GPUs cover the shortfall, oldest first; none if they cannot."""
        servers: dict[int, dict[str, Any]] = {}
        for uuid, h in d[LEASES].items():
            if h.get("server_pid") and (h.get("kept") or not owner_alive(h)):
                v = servers.setdefault(int(h["server_pid"]), {**h, "gpus": [], "indices": []})
                v["gpus"].append(uuid)
                v["indices"].append(int(h["index"]))
        picked: list[dict[str, Any]] = []
        for s in sorted(servers.values(), key=lambda s: s["since"]):
            if short <= 0:
                break
            picked.append(s)
            short -= len(s["gpus"])
        return picked if short <= 0 else []

    def _forget_server(self, pid: int) -> None:
        def drop(d: Tables) -> None:
            for uuid in [u for u, h in d[LEASES].items() if h.get("server_pid") == pid]:
                del d[LEASES][uuid]

        self.table.update(drop)

    @staticmethod
    def _live(h: dict[str, Any]) -> bool:
        server_up = bool(h.get("server_pid")) and same_process(int(h["server_pid"]),
                                                                float(h.get("server_started", 0.0)))
        return server_up or (not h.get("kept") and owner_alive(h))

    def _drop_stale(self, d: Tables) -> None:
        for uuid in [u for u, h in d[LEASES].items() if not self._live(h)]:
            del d[LEASES][uuid]
        for t in [t for t, w in d[QUEUE].items() if not owner_alive(w)]:
            del d[QUEUE][t]

    def _describe(self, d: Tables, exclude_server: int | None = None) -> list[str]:
        by: dict[tuple[str, Any, Any, bool], list[int]] = {}
        for h in d[LEASES].values():
            if exclude_server is not None and h.get("server_pid") == exclude_server:
                continue
            key = (str(h["config"]), h.get("server_pid"), h.get("owner_pid"), bool(h.get("kept")))
            by.setdefault(key, []).append(int(h["index"]))
        out = []
        for (cfg, spid, opid, kept), idx in sorted(by.items(), key=lambda kv: min(kv[1])):
            who = f"server pid {spid}" if spid else f"launching in pid {opid}"
            out.append(f"{cfg} on {span(sorted(idx))} ({who}{', kept idle' if kept else ''})")
        return out

    def bind(self, lease: Lease, pid: int, start: float) -> None:
        """The lease is now also held by its server process (it outlives a killed owner until reaped)."""
        lease.server_pid = pid
        self._mark(lease, server_pid=pid, server_started=start)

    def keep(self, lease: Lease) -> None:
        """The server outlives this run: its GPUs are its own until another launch needs them."""
        self._mark(lease, kept=True)

    def _mark(self, lease: Lease, **fields: Any) -> None:
        def put(d: Tables) -> None:
            for dev in lease.devices:
                if dev.uuid in d[LEASES]:
                    d[LEASES][dev.uuid].update(fields)

        self.table.update(put)

    def take_over(self, config: str, pid: int, need: int) -> Lease | None:
        """The GPUs of a kept server this run reuses, if it holds exactly what the config needs now."""
        me = owner()
        taken: list[Device] = []

        def take(d: Tables) -> None:
            mine = [dev for dev in self.devices if d[LEASES].get(dev.uuid, {}).get("server_pid") == pid]
            if len(mine) != need:
                return
            for dev in mine:
                d[LEASES][dev.uuid].update(kept=False, config=config, **me)
            taken.extend(mine)

        self.table.update(take)
        return Lease(config, taken, server_pid=pid) if taken else None

    def release(self, lease: Lease) -> None:
        """Give the GPUs back (the server is stopped)."""
        me = os.getpid()

        def drop(d: Tables) -> None:
            for dev in lease.devices:
                h = d[LEASES].get(dev.uuid)
                if h is not None and (h.get("owner_pid") == me or h.get("server_pid") == lease.server_pid):
                    del d[LEASES][dev.uuid]

        self.table.update(drop)

    def others(self, server_pid: int | None) -> list[str]:
        """Who else holds GPUs now: `tp4-b on GPUs 4-7 (server pid 123)`, one per server."""
        d = self.table.read()
        self._drop_stale(d)
        return self._describe(d, exclude_server=server_pid)


def _name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return "not visible here"


def default_lease_dir() -> Path:
    """pytest-glm5-leases-UID in the temp dir: every run of this user on this machine sees the same leases."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"pytest-glm5-leases-{uid}"


def book_for(devices: list[Device] | None, what: str, cuda_visible: str | None, directory: Path,
             exclusive: bool, probe: Probe | None = None, file: str = "gpu-leases.json",
             variable: str = "CUDA_VISIBLE_DEVICES") -> LeaseBook | None:
    """The lease book of a run: over `devices` (an emulator profile's or NVML's; None or empty: no leases), narrowed
    by an outer CUDA_VISIBLE_DEVICES (or the variable named). LeaseError names a bad entry of the variable."""
    if not devices:
        return None
    shown = visible(devices, cuda_visible, what, variable)
    source = what if cuda_visible is None else f"{len(shown)} of {what} ({variable}={cuda_visible})"
    return LeaseBook(directory / file, shown, source, exclusive=exclusive, probe=probe)
