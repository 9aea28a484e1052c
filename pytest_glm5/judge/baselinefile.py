"""A baselines file's shape: every key it may hold, its type and its range, checked before a run uses the file (a
`floor = nan` passed every value, a `floor = -5` read as a -20354% change); BaselineError names the file, the table,
the key and the fix."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..metrics import ZERO_IS_A_VALUE, higher_is_better, known_metric_names


class BaselineError(Exception):
    """A baselines file that cannot be used; names the file, the table and the key."""

ENTRY_KEYS: dict[str, type | tuple[type, ...]] = {
    "floor": (int, float),
    "ceiling": (int, float),
    "tolerance": (int, float),
    "tolerance_why": str,  # a per-entry tolerance is a practical threshold someone chose, and says why
    "measured": (int, float),
    "spread": dict,
    "updated": (str, dt.date),
    "source": str,
    "method": str,
    "note": str,
    "provenance": dict,
    "workload": dict,
    "launches": list,
    "detectable": (int, float),  # the drop one new launch finds against `launches` (95% power, alpha 0.01)
    "target": (int, float),
    "cdf": list,  # TTFT or ITL (ms) at 0, 5, ... 100% over the recording's requests: the page draws it
}
DEFAULTS_KEYS = {"tolerance", "latency_slack_ms", "note", "source", "method"}
COSTS = "costs"  # [costs.CONFIG]: what a launch of the config costs on this hardware (plan.py), not a config
COST_KEYS: dict[str, type | tuple[type, ...]] = {"load_s": (int, float), "measure_s": (int, float), "tests": int,
                                                 "launches": int, "source": str, "updated": (str, dt.date),
                                                 "provenance": dict, "canary_s": (int, float),
                                                 "accuracy_s": (int, float), "questions": int}
# [targets.SCENARIO]: METRIC = value, where the work is heading for every config of this hardware (the campaign's 100
# tok/s single stream): shown against each config's figure, never judged; an entry's own `target` wins.
TARGETS = "targets"
RESERVED = ("defaults", COSTS, TARGETS)
# Every number of a baselines file is finite and in its range: a `floor = nan` passed every value, a `floor = -5`
# read as a -20354% change. The range per key, as (low, low included, high): a bound and a recorded value are
# positive; a launch cost above a week is a typo (a night is 8 hours).
WEEK_S = 7 * 24 * 3600.0
RANGES: dict[str, tuple[float, bool, float]] = {
    "floor": (0.0, False, math.inf), "ceiling": (0.0, True, math.inf), "measured": (0.0, False, math.inf),
    "target": (0.0, False, math.inf), "detectable": (0.0, True, math.inf), "latency_slack_ms": (0.0, True, 3.6e6),
    "load_s": (0.0, True, WEEK_S), "measure_s": (0.0, True, WEEK_S), "tests": (1.0, True, 1e6),
    "launches": (0.0, True, 1e6), "canary_s": (0.0, True, WEEK_S), "accuracy_s": (0.0, True, WEEK_S),
    "questions": (1.0, True, 1e7)}  # launches 0: an estimate, measured over no launch yet


def _in_range(path: Path, where: str, key: str, value: Any, zero: bool = False) -> None:
    """A number of the file: a finite number inside its key's range (>= 0 where `zero` says 0 is a value), else
    BaselineError with the range."""
    low, included, high = RANGES[key]
    included = included or (zero and low == 0.0)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and math.isfinite(value) and (value >= low if included else value > low) and value <= high:
        return
    span = f"{'>=' if included else '>'} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
    raise BaselineError(f"{path}: {where}: {key} must be a finite number {span}, got {value!r}; fix the value or "
                        "delete the entry and record it again with --update-baselines")


def validate(path: Path, doc: dict[str, Any]) -> None:
    """Every key of a baselines file known, of its type and in its range, else BaselineError naming the file, the
    table, the key and the fix."""
    _defaults(path, doc.get("defaults", {}))
    _costs(path, doc.get(COSTS, {}))
    known = known_metric_names()
    _targets(path, doc.get(TARGETS, {}), known)
    for config, scenarios in doc.items():
        if config in RESERVED:
            continue
        if not isinstance(scenarios, dict):
            raise BaselineError(f"{path}: {config!r} must be a table of scenarios, got {type(scenarios).__name__}")
        for scenario, metrics in scenarios.items():
            where = f"[{config}.{scenario}]"
            if not isinstance(metrics, dict):
                raise BaselineError(f"{path}: {where} must be a table of metrics")
            for metric, entry in metrics.items():
                where = f"[{config}.{scenario}.{metric}]"
                if metric not in known:
                    raise BaselineError(f"{path}: {where}: {metric!r} is not a known metric name "
                                        "(see pytest_glm5/metrics.py)")
                if not isinstance(entry, dict):
                    raise BaselineError(f"{path}: {where} must be a table with floor or ceiling")
                _entry(path, where, metric, entry)


def _defaults(path: Path, defaults: Any) -> None:
    if not isinstance(defaults, dict):
        raise BaselineError(f"{path}: [defaults] must be a table")
    for key, value in defaults.items():
        if key not in DEFAULTS_KEYS:
            raise BaselineError(f"{path}: [defaults]: unknown key {key!r}; allowed: {', '.join(sorted(DEFAULTS_KEYS))}")
        if key == "tolerance":
            _check_tolerance(path, "[defaults]", value)
        if key == "latency_slack_ms":
            _in_range(path, "[defaults]", key, value)


def _targets(path: Path, targets: Any, known: Collection[str]) -> None:
    if not isinstance(targets, dict):
        raise BaselineError(f"{path}: {TARGETS} must be a table of [targets.SCENARIO] tables, got {targets!r}")
    for scenario, metrics in targets.items():
        if not isinstance(metrics, dict):
            raise BaselineError(f"{path}: [targets.{scenario}] must be a table of METRIC = target")
        for metric, value in metrics.items():
            if metric not in known:
                raise BaselineError(f"{path}: [targets.{scenario}]: {metric!r} is not a known metric name (see "
                                    "pytest_glm5/metrics.py)")
            _in_range(path, f"[targets.{scenario}]", "target", value)


def _costs(path: Path, costs: Any) -> None:
    if not isinstance(costs, dict):
        raise BaselineError(f"{path}: {COSTS} must be a table of [costs.CONFIG] tables (what a launch of each config "
                            f"costs here, written by --update-baselines), got {costs!r}")
    for config, cost in costs.items():
        for key, value in (cost.items() if isinstance(cost, dict) else [("", cost)]):
            want = COST_KEYS.get(key)
            if want is None or not isinstance(value, want) or isinstance(value, bool):
                raise BaselineError(f"{path}: [costs.{config}]: {key or 'the entry'} must be one of "
                                    f"{', '.join(COST_KEYS)}, got {value!r}")
            if key in RANGES:
                _in_range(path, f"[costs.{config}]", key, value)


def _entry(path: Path, where: str, metric: str, entry: dict[str, Any]) -> None:
    for key, value in entry.items():
        if key not in ENTRY_KEYS:
            raise BaselineError(f"{path}: {where}: unknown key {key!r}; allowed: "
                                f"{', '.join(ENTRY_KEYS)}")
        want = ENTRY_KEYS[key]
        if not isinstance(value, want) or isinstance(value, bool):
            raise BaselineError(f"{path}: {where}: {key} must be "
                                f"{'a number' if want == (int, float) else getattr(want, '__name__', want)}"
                                f", got {value!r}")
    if "tolerance" in entry:
        _check_tolerance(path, where, entry["tolerance"])
    zero = metric in ZERO_IS_A_VALUE
    for key in ("floor", "ceiling", "measured", "target", "detectable"):
        if key in entry:
            _in_range(path, where, key, entry[key], zero)
    launches = entry.get("launches", [])
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
               and (x >= 0 if zero else x > 0) for x in launches):
        raise BaselineError(f"{path}: {where}: launches must be a list of "
                            f"{'numbers >= 0' if zero else 'positive numbers'}, one per server launch, "
                            f"got {launches!r}")
    cdf = entry.get("cdf", [])
    if cdf and (not all(isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x < math.inf
                        for x in cdf)
                or len(cdf) < 2 or any(b < a for a, b in itertools.pairwise(cdf))):
        raise BaselineError(f"{path}: {where}: cdf must be a rising list of numbers >= 0 (the recorded "
                            f"distribution in ms at evenly spaced quantiles), got {cdf!r}")
    kinds = [k for k in ("floor", "ceiling") if k in entry]
    if len(kinds) != 1:
        raise BaselineError(f"{path}: {where}: needs exactly one of floor or ceiling")
    expected = "floor" if higher_is_better(metric) else "ceiling"
    if kinds[0] != expected:
        raise BaselineError(f"{path}: {where}: {metric} is {'higher' if expected == 'floor' else 'lower'}"
                            f" is better, so it takes a {expected}, not a {kinds[0]}")


def _check_tolerance(path: Path, where: str, value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1:  # nan fails too
        raise BaselineError(f"{path}: {where}: tolerance must be a fraction in [0, 1), got {value!r}")
