"""The run's metrics in the formats of the tools people already run (`--glm5-export FORMAT:PATH`).

- `customBiggerIsBetter` / `customSmallerIsBetter`: github-action-benchmark's custom JSON, a list of
  `{"name", "unit", "value", "range", "extra"}`; the action takes one direction per file, so throughput and
  latency go to two files (each format writes only its own direction).
- `bencher`: Bencher Metric Format, `{benchmark: {measure: {"value", "lower_value", "upper_value"}}}`; the
  bounds are the launch-to-launch range (min..max of the run's values).
- `pytest-benchmark`: pytest-benchmark's `--benchmark-json` layout, which `pytest-benchmark compare` reads.
  Its stats are seconds, lower is better: a latency is its seconds; a throughput is seconds per token (or per
  request), so that `ops` reads as tokens (requests) per second.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..metrics import higher_is_better
from ..textfiles import atomic_write


def _series(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in doc.get("verdicts", []) if d.get("measured") is not None]


def _higher(d: dict[str, Any]) -> bool:
    b = d.get("bound")
    if b:
        return bool(b["kind"] == "floor")
    return higher_is_better(d["metric"])


def _values(d: dict[str, Any]) -> list[float]:
    return [float(x) for x in (d.get("launches") or d.get("samples") or [d["measured"]])]


def _name(d: dict[str, Any]) -> str:
    return f"{d['config']} {d['scenario']} {d['metric']}"


def github_action_benchmark(doc: dict[str, Any], bigger: bool) -> list[dict[str, Any]]:
    """customBiggerIsBetter (bigger=True) or customSmallerIsBetter entries."""
    out = []
    for d in _series(doc):
        if _higher(d) != bigger:
            continue
        vals = _values(d)
        entry: dict[str, Any] = {"name": _name(d), "unit": d.get("unit") or "1", "value": float(d["measured"])}
        if len(vals) > 1:
            entry["range"] = f"± {statistics.stdev(vals):.4g}"
        hardware = (d.get("provenance") or {}).get("hardware", "")
        entry["extra"] = f"verdict: {d['verdict']}; n={len(vals)}; {d['config']} on {hardware}"
        out.append(entry)
    return out


def _slug(metric: str) -> str:
    return metric.replace("_", "-")


def bencher(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: benchmark `config/scenario`, one measure per metric."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for d in _series(doc):
        vals = _values(d)
        out.setdefault(f"{d['config']}/{d['scenario']}", {})[_slug(d["metric"])] = {
            "value": float(d["measured"]), "lower_value": min(vals), "upper_value": max(vals)}
    return out


def _seconds(d: dict[str, Any], x: float) -> float:
    """pytest-benchmark's unit: seconds, lower is better."""
    if _higher(d):
        return 1.0 / x
    unit = d.get("unit", "")
    return x / 1000.0 if unit == "ms" else x


def _stats(values: list[float]) -> dict[str, Any]:
    s = sorted(values)
    n = len(s)
    mean = statistics.fmean(s)
    q = statistics.quantiles(s, n=4, method="inclusive") if n > 1 else [s[0]] * 3
    iqr = q[2] - q[0]
    sd = statistics.stdev(s) if n > 1 else 0.0
    lo = [x for x in s if x >= q[0] - 1.5 * iqr]
    hi = [x for x in s if x <= q[2] + 1.5 * iqr]
    out_iqr = sum(1 for x in s if x < q[0] - 1.5 * iqr or x > q[2] + 1.5 * iqr)
    out_sd = sum(1 for x in s if abs(x - mean) > sd) if sd else 0
    return {"min": s[0], "max": s[-1], "mean": mean, "stddev": sd, "rounds": n, "median": statistics.median(s),
            "iqr": iqr, "q1": q[0], "q3": q[2], "iqr_outliers": out_iqr, "stddev_outliers": out_sd,
            "outliers": f"{out_sd};{out_iqr}", "ld15iqr": min(lo), "hd15iqr": max(hi), "ops": 1.0 / mean if mean else 0,
            "total": sum(s), "data": s, "iterations": 1}


def pytest_benchmark(doc: dict[str, Any]) -> dict[str, Any]:
    """A pytest-benchmark JSON document of the run's metrics (group: the metric)."""
    run = doc.get("run") or {}
    benches = []
    for d in _series(doc):
        vals = [_seconds(d, x) for x in _values(d) if x > 0]
        if not vals:
            continue
        test = d.get("test_id") or f"{d['config']}::{d['scenario']}"
        benches.append({
            "group": d["metric"], "name": f"{d['config']}[{d['scenario']}]", "fullname": f"{test}::{d['metric']}",
            "params": None, "param": None,
            "extra_info": {"measured": d["measured"], "unit": d.get("unit"), "verdict": d["verdict"],
                           "converted": "1/value (seconds per unit)" if _higher(d) else "seconds"},
            "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": 1, "max_time": 0,
                        "min_time": 0, "warmup": False},
            "stats": _stats(vals)})
    uname = platform.uname()
    return {
        "machine_info": {"node": uname.node, "processor": uname.processor, "machine": uname.machine,
                         "python_compiler": platform.python_compiler(),
                         "python_implementation": platform.python_implementation(),
                         "python_implementation_version": platform.python_version(),
                         "python_version": platform.python_version(), "python_build": list(platform.python_build()),
                         "release": uname.release, "system": uname.system, "cpu": {},
                         "hardware": run.get("hardware", "")},
        "commit_info": {"id": run.get("commit", ""), "time": run.get("time", ""), "author_time": run.get("time", ""),
                        "dirty": str(run.get("commit", "")).endswith("+dirty"), "project": "pytest-glm5",
                        "branch": ""},
        "benchmarks": benches,
        "datetime": run.get("time") or dt.datetime.now(dt.UTC).isoformat(),
        "version": "5.1.0",
    }


WRITERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "customBiggerIsBetter": lambda doc: github_action_benchmark(doc, True),
    "customSmallerIsBetter": lambda doc: github_action_benchmark(doc, False),
    "bencher": bencher,
    "pytest-benchmark": pytest_benchmark,
}


def write_text(path: Path, text: str) -> None:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    atomic_write(path, text)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(data, indent=2, default=str))


def export(doc: dict[str, Any], fmt: str, path: Path) -> None:
    """Write one export."""
    write_json(path, WRITERS[fmt](doc))
