"""Tables shared by processes (workers, runs): JSON files changed under a file lock; the servers they record."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..textfiles import SHARED_MODE, atomic_write
from .process import kill_tree, same_process, started

KEPT = "kept"  # servers left running on purpose (--glm5-keep-servers), for reuse by a later run
LAUNCHED = "launched"  # servers of a live run, from spawn to stop: what a killed run leaves is reaped

Tables = dict[str, dict[str, dict[str, Any]]]


class LockedTables:
    """Named tables of records in one JSON file; every change re-reads and merges under a file lock, so that two
    processes never drop each other's rows."""

    def __init__(self, path: Path, sections: tuple[str, ...]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.sections = sections
        self.lock = FileLock(str(path) + ".lock", timeout=60, mode=SHARED_MODE)

    def _load(self) -> Tables:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        return {name: dict(data.get(name) or {}) for name in self.sections}

    def read(self) -> Tables:
        """Every table, as it is now."""
        with self.lock:
            return self._load()

    def update(self, change: Callable[[Tables], object]) -> None:
        """Re-read, apply `change`, write atomically: all under the lock."""
        with self.lock:
            data = self._load()
            change(data)
            atomic_write(self.path, json.dumps(data, indent=1))


class RecordStore(LockedTables):
    """Servers recorded across runs, keyed by pid: kept ones (for reuse) and launched ones (for reaping)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory / "servers.json", (KEPT, LAUNCHED))

    def put(self, section: str, data: dict[str, Any]) -> None:
        """Record one server under its pid."""
        self.update(lambda d: d[section].__setitem__(str(data["pid"]), data))

    def drop(self, section: str, pid: int | None) -> None:
        """Forget one server."""
        def forget(d: Tables) -> None:
            d[section].pop(str(pid), None)

        self.update(forget)


def owner() -> dict[str, Any]:
    """This process as the owner of a record: pid and start time (a recycled pid does not pass for it)."""
    me = os.getpid()
    return {"owner_pid": me, "owner_started": started(me) or 0.0}


def owner_alive(data: dict[str, Any]) -> bool:
    """The process that made a record still runs (its servers and leases are its own business)."""
    pid = data.get("owner_pid")
    return pid is not None and same_process(int(pid), float(data.get("owner_started", 0.0)))


def reap_leftovers(store: RecordStore, timeout: float = 10.0) -> list[str]:
    """Stop servers that runs killed outright left behind (their pytest is gone); one line each. Servers of runs
    still alive (another pytest, another worker) are theirs and stay."""
    lines: list[str] = []

    def reap(d: Tables) -> None:
        for pid, data in list(d[LAUNCHED].items()):
            if owner_alive(data):
                continue
            if same_process(int(pid), float(data.get("started", 0.0))):
                kill_tree(int(data["pid"]), timeout)
                lines.append(f"reaped a server left by an earlier run: {data.get('config')} pid {pid} "
                             f"port {data.get('port')}")
            del d[LAUNCHED][pid]

    store.update(reap)
    return lines


def stop_recorded(store: RecordStore, timeout: float = 60.0) -> list[str]:
    """Stop every server recorded by --glm5-keep-servers; return one line per server."""
    lines: list[str] = []

    def stop_all(d: Tables) -> None:
        for pid, data in d[KEPT].items():
            if same_process(int(pid), float(data.get("started", 0.0))):
                kill_tree(int(pid), timeout)
                lines.append(f"stopped {data.get('config')}: pid {pid}, port {data.get('port')}")
            else:
                lines.append(f"{data.get('config')}: pid {pid} was already gone")
        d[KEPT].clear()

    store.update(stop_all)
    return lines
