"""The run history: one JSON-lines store per hardware and model, a line per run, appended under a file lock.

A line (`h/sim-glm5-sm120-x0.01/GLM-5-NVFP4.jsonl`):

    {"time": "2026-12-02T23:40:11+00:00", "commit": "ce23f0b", "build": "default: pytest-glm5 0.1.0",
     "hardware": "sim-glm5-sm120-x0.01", "model": "/models/GLM-5-NVFP4",
     "series": [{"config": "tp8", "scenario": "single-stream", "metric": "output_throughput", "value": 1038.5,
                 "samples": [...], "launches": [...], "verdict": "pass"}, ...]}

A line is written whole under the lock to an O_APPEND file, so two runs appending at once never interleave. A write
is all or nothing: a short write (a full disk) is truncated back and raises, and a line starts on a new line when
the file does not end in one (a run killed mid-write before this one), so one torn line never swallows the next
night. Each line is checked for its shape when read: a line that is not JSON, or JSON of another shape, is skipped
and named, and every reader that decides on the history (the schedule, the carried evidence, `glm5 history`) says
so; a line dated after now counts as now and is named. Each line carries its run's id (a merged night carries its
shards' ids), and a night already in the store is not appended again: a shard run with --glm5-history and
`glm5 merge --history` into the same directory write it once.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
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
            **({"runs": ids} if (ids := run_ids(run)) else {}),
            # Every config launched tonight, measured or not (a known crash measures nothing): the schedule's
            # record of when each config last ran (night/schedule.py).
            **({"launched": list(run["launched"])} if run.get("launched") else {}), "series": []})
        rec["series"].append(series_entry(v))
    return out


def run_ids(run: dict[str, Any]) -> list[str]:
    """The ids of the pytest runs a run document holds: its own, or a merge's shards'."""
    ids = run.get("run_ids") or ([run["run_id"]] if run.get("run_id") else [])
    return [str(i) for i in ids]


def series_entry(v: dict[str, Any]) -> dict[str, Any]:
    """A verdict of the run document (judge.verdicts.verdict_doc) as its history line keeps it: the figure, its
    launches, the verdict, and what tomorrow's launches must share to pool with tonight's (judge/carry.py)."""
    sample = (v.get("test") or {}).get("sample") or {}
    return {"config": v["config"], "scenario": v["scenario"], "metric": v["metric"], "value": v["measured"],
            "samples": v.get("samples") or [], "launches": v.get("launches") or [], "verdict": v["verdict"],
            "bound": (v.get("bound") or {}).get("value"), "target": (v.get("bound") or {}).get("target"), **sample,
            # A suspect and the launches it asked for: tomorrow's schedule gives them (night/schedule.py).
            **({"suspect": True, "to_add": test.get("to_add") or 1} if v["verdict"] == Kind.UNRESOLVED and
               (test := v.get("test") or {}).get("suspect") else {}),
            **({"restart": True} if (v.get("test") or {}).get("restart") else {})}


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte or raise: os.write may write part of them (a full disk, a signal)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, "no byte could be written")
        view = view[n:]


def _already(path: Path, ids: set[str]) -> set[str]:
    """The configs the store already holds from any of these run ids (read under the lock)."""
    if not ids or not path.exists():
        return set()
    return {str(s.get("config")) for run in load(path).runs if ids & set(run.get("runs") or [])
            for s in run["series"]}


def _append_line(fd: int, line: bytes) -> None:
    """Append one line, on a line of its own, whole or not at all (the lock is held)."""
    start = os.fstat(fd).st_size
    if start:
        os.lseek(fd, start - 1, os.SEEK_SET)
        if os.read(fd, 1) != b"\n":
            line = b"\n" + line  # an earlier writer was killed mid-line: that torn line stays alone
    try:
        _write_all(fd, line)
        os.fsync(fd)
    except OSError:
        os.ftruncate(fd, start)  # no half line for the next night to be glued to
        raise


def append(root: Path, doc: dict[str, Any], lock_timeout: float = 60.0) -> list[Path]:
    """Append this run to each store it measured, once (a run id the store holds adds only configs it lacks);
    returns the stores written. HistoryError names the store and why, and leaves it as it was."""
    written = []
    for (hardware, model), rec in history_rows(doc).items():
        path = store_path(root, hardware, model)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path.parent / f".{path.name}.lock"), timeout=lock_timeout, mode=SHARED_MODE):
                held = _already(path, set(rec.get("runs") or []))
                if held:
                    rec = {**rec, "series": [s for s in rec["series"] if s["config"] not in held]}
                    if "launched" in rec:
                        rec["launched"] = [c for c in rec["launched"] if c not in held]
                    if not rec["series"]:
                        continue  # the night is in the store already (a shard wrote it, then the merge)
                line = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, SHARED_MODE)  # the umask decides
                try:
                    _append_line(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise HistoryError(f"cannot append to the history {path}: {exc.strerror or exc}; the store is as it "
                               "was; free space or pass a writable --glm5-history DIR") from None
        written.append(path)
    return written


@dataclass
class Store:
    """One store read back: its runs in file order, and the lines that could not be read."""

    path: Path
    runs: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)


_TEXT = ("config", "scenario", "metric")


def _shape(rec: Any) -> str | None:
    """Why a parsed line is not a glm5 history line (None: it is one). Every key a reader decides on is checked, so
    a line of another shape is skipped here instead of crashing the schedule, the carry or `glm5 history`."""
    if not isinstance(rec, dict):
        return "not an object"
    if not isinstance(rec.get("series"), list):
        return "no series list"
    if rec.get("time") is not None and not isinstance(rec["time"], str):
        return f"time {rec['time']!r} is not text"
    for key in ("launched", "runs"):
        if key in rec and not (isinstance(rec[key], list) and all(isinstance(x, str) for x in rec[key])):
            return f"{key} {rec[key]!r} is not a list of names"
    for i, s in enumerate(rec["series"]):
        if not isinstance(s, dict):
            return f"series[{i}] is not an object"
        if not all(isinstance(s.get(k), str) for k in _TEXT):
            return f"series[{i}] lacks a config, scenario or metric name"
        if isinstance(s.get("value"), bool) or not isinstance(s.get("value"), int | float | None):
            return f"series[{i}] value {s.get('value')!r} is not a number"
        for key in ("samples", "launches"):
            got = s.get(key, [])
            if not isinstance(got, list) or any(isinstance(x, bool) or not isinstance(x, int | float) for x in got):
                return f"series[{i}] {key} {got!r} is not a list of numbers"
        if "to_add" in s and (isinstance(s["to_add"], bool) or not isinstance(s["to_add"], int)):
            return f"series[{i}] to_add {s['to_add']!r} is not a whole number"
        for key in ("verdict", "build", "workload", "ref"):
            if key in s and not isinstance(s[key], str):
                return f"series[{i}] {key} {s[key]!r} is not text"
    return None


def _when(text: str) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def load(path: Path, now: dt.datetime | None = None) -> Store:
    """Read one store; a line that is not JSON, or not of a history line's shape, is skipped and named (line number
    and why); a line dated after `now` is read as dated now, and named (it would keep its configs 'judged today')."""
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    now = now or dt.datetime.now(dt.UTC)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HistoryError(f"cannot read the history {path}: {exc.strerror or exc}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            skipped.append(f"{path}:{n}: not a JSON line ({getattr(exc, 'msg', exc)}); skipped")
            continue
        why = _shape(rec)
        if why is not None:
            skipped.append(f"{path}:{n}: not a glm5 history line ({why}); skipped")
            continue
        when = _when(str(rec.get("time") or ""))
        if when is not None and when > now:
            skipped.append(f"{path}:{n}: dated {rec['time']}, after now: read as now")
            rec["time"] = now.isoformat(timespec="seconds")
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


def _gather(root: Path, paths: Iterable[Path]) -> Store:
    """The runs of these stores, store after store, and every line they skipped."""
    out = Store(root, [])
    for path in paths:
        st = load(path)
        out.runs += st.runs
        out.skipped += st.skipped
    return out


def load_dir(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every run of every store under root, and the skipped-line notes."""
    st = _gather(root, stores(root))
    return st.runs, st.skipped


def for_run(root: Path, keys: Iterable[tuple[str, str]]) -> Store:
    """The runs of the stores of these (hardware, model) keys (missing stores: none), and the lines skipped."""
    return _gather(root, [path for hw, model in keys if (path := store_path(root, hw, model)).exists()])


class Reader:
    """A history directory as one run reads it: each store's runs on demand, and each skipped or re-dated line
    said once through `say` (the schedule and the carried evidence decide on what it returns)."""

    def __init__(self, root: Path, say: Callable[[str], None]) -> None:
        self.root, self.say = root, say
        self._said: set[str] = set()

    def runs(self, keys: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
        """The runs of these (hardware, model) stores, oldest first within each; a store that cannot be read is said
        and gives none (tonight then carries nothing from it, and appending to it fails the run's outputs)."""
        try:
            st = for_run(self.root, keys)
        except HistoryError as exc:
            st = Store(self.root, [], [f"{exc}; nothing carries from it tonight"])
        for note in st.skipped:
            if note not in self._said:
                self._said.add(note)
                self.say(f"history: {note}")
        return st.runs

    def of(self, hardware: str, model: str) -> list[dict[str, Any]]:
        """The runs of one store (the gate's carried evidence)."""
        return self.runs([(hardware, model)])
