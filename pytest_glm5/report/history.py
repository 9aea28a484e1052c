"""The run history: one JSON-lines store per hardware and model, a line per run, appended under a file lock.

A line (`h/sim-glm5-sm120-x0.01/GLM-5-NVFP4.jsonl`):

    {"time": "2026-12-02T23:40:11+00:00", "commit": "ce23f0b", "build": "default: pytest-glm5 0.1.0",
     "hardware": "sim-glm5-sm120-x0.01", "model": "/models/GLM-5-NVFP4",
     "series": [{"config": "tp8", "scenario": "single-stream", "metric": "output_throughput", "value": 1038.5,
                 "samples": [...], "launches": [...], "verdict": "pass"}, ...]}

A line is written whole with one `write` of an O_APPEND file under the lock, so two runs appending at once
never interleave, and a reader that meets a torn last line (a run killed mid-write, on a filesystem that allows
it) skips it and says so.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..judge.baselines import model_key
from ..judge.verdicts import Kind
from ..textfiles import SHARED_MODE

SUFFIX = ".jsonl"


class HistoryError(Exception):
    """A history directory or store that cannot be used; names the path and the fix."""


def store_path(root: Path, hardware: str, model: str) -> Path:
    """`root/<hardware>/<model key>.jsonl`, as baselines/ names its files (baselines.model_key)."""
    return root / hardware / f"{model_key(model)}{SUFFIX}"


def history_rows(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The history lines of one run document (judge.verdicts.run_document): one per (hardware, model) it measured."""
    run = doc.get("run") or {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for v in doc.get("verdicts", []):
        prov = v.get("provenance") or {}
        hardware, model = str(prov.get("hardware", "")), str(v.get("model", ""))
        if not hardware or not model or v.get("measured") is None:
            continue
        rec = out.setdefault((hardware, model), {
            "time": run.get("time"), "commit": prov.get("commit") or run.get("commit"),
            "build": prov.get("build") or run.get("build", ""), "hardware": hardware, "model": model,
            # Every config launched tonight, measured or not (a known crash measures nothing): the schedule's
            # record of when each config last ran (judge/schedule.py).
            **({"launched": list(run["launched"])} if run.get("launched") else {}), "series": []})
        rec["series"].append(series_entry(v))
    return out


def series_entry(v: dict[str, Any]) -> dict[str, Any]:
    """A verdict of the run document (judge.verdicts.verdict_doc) as its history line keeps it: the figure, its
    launches, the verdict, and what tomorrow's launches must share to pool with tonight's (judge/carry.py)."""
    sample = (v.get("test") or {}).get("sample") or {}
    return {"config": v["config"], "scenario": v["scenario"], "metric": v["metric"], "value": v["measured"],
            "samples": v.get("samples") or [], "launches": v.get("launches") or [], "verdict": v["verdict"],
            "bound": (v.get("bound") or {}).get("value"), "target": (v.get("bound") or {}).get("target"), **sample,
            # A suspect and the launches it asked for: tomorrow's schedule gives them (judge/schedule.py).
            **({"suspect": True, "to_add": test.get("to_add") or 1} if v["verdict"] == Kind.UNRESOLVED and
               (test := v.get("test") or {}).get("suspect") else {}),
            **({"restart": True} if (v.get("test") or {}).get("restart") else {})}


def append(root: Path, doc: dict[str, Any], lock_timeout: float = 60.0) -> list[Path]:
    """Append this run to each store it measured; returns the stores written."""
    written = []
    for (hardware, model), rec in history_rows(doc).items():
        path = store_path(root, hardware, model)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            line = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
            with FileLock(str(path.parent / f".{path.name}.lock"), timeout=lock_timeout, mode=SHARED_MODE):
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, SHARED_MODE)  # the umask decides
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise HistoryError(f"cannot append to the history {path}: {exc.strerror or exc}; pass a writable "
                               "--glm5-history DIR") from None
        written.append(path)
    return written


@dataclass
class Store:
    """One store read back: its runs in file order, and the lines that could not be read."""

    path: Path
    runs: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)


def load(path: Path) -> Store:
    """Read one store; a line that is not JSON is skipped and named (line number and why)."""
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HistoryError(f"cannot read the history {path}: {exc.strerror or exc}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append(f"{path}:{n}: not a JSON line ({exc.msg}); skipped")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("series"), list):
            skipped.append(f"{path}:{n}: not a glm5 history line (no series); skipped")
            continue
        runs.append(rec)
    return Store(path, runs, skipped)


def stores(root: Path) -> list[Path]:
    """Every store under a history directory (HistoryError when it is not one)."""
    if not root.is_dir():
        raise HistoryError(f"{root}: no such history directory; runs write one with --glm5-history {root}")
    found = sorted(root.glob(f"*/*{SUFFIX}"))
    if not found:
        raise HistoryError(f"{root}: no history stores (<hardware>/<model>{SUFFIX}) yet; runs append to it with "
                           f"--glm5-history {root}")
    return found


@dataclass
class Point:
    """One run's value of a series."""

    index: int
    time: str
    commit: str
    build: str
    value: float
    verdict: str = ""


@dataclass
class Series:
    """One metric of one config and scenario over the runs of a store."""

    hardware: str
    model: str
    config: str
    scenario: str
    metric: str
    points: list[Point]
    bound: float | None = None
    target: float | None = None

    @property
    def key(self) -> str:
        """`tp8 single-stream output_throughput`."""
        return f"{self.config} {self.scenario} {self.metric}"

    def values(self) -> list[float]:
        """The values in run order."""
        return [p.value for p in self.points]


def series_of(runs: Sequence[dict[str, Any]], config: str | None = None, metric: str | None = None,
              scenario: str | None = None) -> list[Series]:
    """Every (config, scenario, metric) of the runs, optionally filtered, in first-seen order."""
    out: dict[tuple[str, str, str, str, str], Series] = {}
    for i, run in enumerate(runs):
        where = (str(run.get("hardware", "")), str(run.get("model", "")))
        for s in run.get("series", []):
            key = (str(s.get("config")), str(s.get("scenario")), str(s.get("metric")))
            if (config and key[0] != config) or (metric and key[2] != metric) or (scenario and key[1] != scenario):
                continue
            value = s.get("value")
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                continue
            ser = out.setdefault((*where, *key), Series(*where, *key, []))
            ser.points.append(Point(i, str(run.get("time", "")), str(run.get("commit", "")),
                                    str(run.get("build", "")), float(value), str(s.get("verdict", ""))))
            ser.bound = s.get("bound") if s.get("bound") is not None else ser.bound
            ser.target = s.get("target") if s.get("target") is not None else ser.target
    return list(out.values())


def load_dir(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every run of every store under root, and the skipped-line notes."""
    runs: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in stores(root):
        st = load(path)
        runs += st.runs
        notes += st.skipped
    return runs, notes


def for_run(root: Path, keys: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The runs of the stores of these (hardware, model) keys (missing stores: none)."""
    runs: list[dict[str, Any]] = []
    for hardware, model in keys:
        path = store_path(root, hardware, model)
        if path.exists():
            runs += load(path).runs
    return runs
