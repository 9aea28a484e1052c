"""Run documents (report.json_report's shape) of any size, with a history of nights behind them, for the report
tests: a run of N test points on 8 GPUs with telemetry, one crashed config, and a history in which a step can be
placed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pytest_glm5.report.history import append, history_rows, series_of
from pytest_glm5.report.trends import analyse

METRICS = {"output_throughput": ("tok/s", "floor", 1000.0), "p99_ttft_ms": ("ms", "ceiling", 180.0),
           "p99_itl_ms": ("ms", "ceiling", 22.0), "median_e2e_latency_ms": ("ms", "ceiling", 2400.0)}
SCENARIOS = [1, 2, 4, 16, 64, 256, 512, 1024]


def _verdict(config: str, conc: int, metric: str, value: float, verdict: str, night: int, rng: random.Random
             ) -> dict[str, Any]:
    unit, kind, base = METRICS[metric]
    launches = [value * rng.lognormvariate(0, 0.01) for _ in range(3)]
    return {"config": config, "scenario": f"c{conc}", "metric": metric, "measured": value, "unit": unit,
            "verdict": verdict, "test_id": f"suites/test_sm120.py::test_sweep[{config}-c{conc}]",
            "model": "/models/GLM-5-NVFP4",
            "bound": {"kind": kind, "value": base, "tolerance": 0.03,
                      "launches": [base * rng.lognormvariate(0, 0.01) for _ in range(5)],
                      "target": 100.0 if metric == "output_throughput" and conc == 1 else None,
                      # the recorded distribution, 21 points, where the metric is taken over TTFT or ITL
                      "cdf": sorted(base * rng.lognormvariate(-0.5, 0.3) for _ in range(21))
                      if "ttft" in metric or "itl" in metric else []},
            "delta": (value - base) / base * (1 if kind == "floor" else -1), "to_go": None,
            "spread": {"min": min(launches), "max": max(launches), "cv": 0.01, "n": 3,
                       **({"requests": 3 * 4 * conc, "pooled": 1.01 * value, "order_ci95": [0.97 * value, 1.04 * value]}
                          if metric.startswith("p99") else {})}, "samples": launches,
            "launches": launches,
            "test": {"describe": f"{(value / base - 1) * 100:+.1f}% [-2.0%, +2.0%], p 0.4, CV 1.0%, 3 vs 5 launches",
                     "against": "5 reference launches", "gain": 0.0},
            "note": "", "workload": {"concurrency": conc, "input_len": 1024, "output_len": 512, "protocol": "sglang"},
            "provenance": {"hardware": "sim-big", "commit": f"night-{night}", "build": "base"}}


def _telemetry(rng: random.Random, seconds: int = 60, hz: int = 8, gpus: int = 8) -> dict[str, Any]:
    samples = [{"t": i / hz, "gpu": float(g), "power_w": 300 + 40 * rng.random(), "memory_used_gb": 88 + rng.random(),
                "util_pct": 90.0, "sm_clock_mhz": 2400 - 30 * rng.random(), "temp_c": 60.0}
               for i in range(seconds * hz) for g in range(gpus)]
    return {"hz": hz, "summary": {}, "samples": samples}


def night_doc(night: int, tests: int, step_at: int | None = None, regressions: int = 0, seed: int = 0,
              telemetry: bool = False) -> dict[str, Any]:
    """One night's run document."""
    rng = random.Random(seed * 1000 + night)
    points = [(f"cfg{i // len(SCENARIOS)}", SCENARIOS[i % len(SCENARIOS)]) for i in range(tests)]
    verdicts = []
    for n, (config, conc) in enumerate(points):
        for metric, (_, kind, base) in METRICS.items():
            value = base * rng.lognormvariate(0, 0.02)
            if step_at is not None and night >= step_at:
                value *= 0.95 if kind == "floor" else 1.05
            bad = n < regressions and metric == "output_throughput"
            verdicts.append(_verdict(config, conc, metric, value * (0.9 if bad else 1.0),
                                     "regression" if bad else "pass", night, rng))
    configs = sorted({c for c, _ in points})
    results = [{"config": c, "scenario": f"c{conc}", "runs": [{
        "started_at": 1_700_000_000.0 + 70 * i, "workload": {"concurrency": conc},
        "distributions": {"ttft_ms": sorted(120 * rng.lognormvariate(0, 0.3) for _ in range(41)),
                          "itl_ms": sorted(20 * rng.lognormvariate(0, 0.2) for _ in range(41))},
        "telemetry": _telemetry(rng) if telemetry else None}]} for i, (c, conc) in enumerate(points)]
    crashed = configs[-1] if len(configs) > 1 else None
    servers = {c: {"config": c, "how": "launched", "why": "", "engine": "sim", "startup_s": 1.0,
                   "exit_status": 1 if c == crashed else 0, "log_path": f"/tmp/{c}.log",
                   "crash": "exited with status 1: CUDA error: out of memory" if c == crashed else None,
                   "log_tail": ["[scheduler] loading weights", "RuntimeError: CUDA error: out of memory"]
                   if c == crashed else []} for c in configs}
    return {"format": "pytest-glm5 report 2",
            "run": {"time": f"2026-09-{1 + night // 30:02d}T{night % 24:02d}:00:00+00:00", "commit": f"night-{night}",
                    "build": "base", "hardware": "sim-big", "duration_s": 3600.0},
            "statistics": None, "servers": servers,
            "problems": {crashed: f"server for {crashed} crashed: CUDA error: out of memory"} if crashed else {},
            "results": results, "verdicts": verdicts, "versus": [], "baseline_changes": []}


def big_doc(tests: int = 40, nights: int = 90, regressions: int = 0, step_at: int | None = None,
            root: Path | None = None, telemetry: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Tonight's run document and the history analyses of `nights` nights ending with it (appended to `root`
    when given)."""
    runs = []
    doc: dict[str, Any] = {}
    for night in range(nights):
        last = night == nights - 1
        doc = night_doc(night, tests, step_at, regressions if last else 0, telemetry=telemetry and last)
        if root is not None:
            append(root, doc)
        runs += list(history_rows(doc).values())
    return doc, [a.to_dict() for a in analyse(series_of(runs))]
