"""Baselines files (round-trip TOML) and verdicts: floors for throughput, ceilings for latency.

A file is `baselines/<hardware>/<model>.toml`, keyed config -> scenario -> metric:

    [defaults]
    tolerance = 0.05

    [tp8.single-stream.output_throughput]
    floor = 10.36
    source = "campaign log"

Updates keep comments, order and formatting (tomlkit), are written atomically (temp file + rename)
under a file lock, and re-read the file first so that concurrent writers do not lose entries.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePath
from typing import Any

import tomlkit
from filelock import FileLock
from tomlkit.exceptions import TOMLKitError

from ..metrics import (
    geometric_mean,
    higher_is_better,
    latency_family,
    log_cv,
    summarize_repeats,
)
from ..textfiles import SHARED_MODE, atomic_write, read_utf8
from .baselinefile import COSTS, RESERVED, TARGETS, validate
from .baselinefile import BaselineError as BaselineError  # re-exported: every reader of a store catches it
from .verdicts import (
    Bound,
    Change,
    Kind,
    Verdict,
    workload_differs,
)

DEFAULT_TOLERANCE = 0.05
_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def judge(config: str, scenario: str, metric: str, samples: list[float], bound: Bound | None,
          workload: dict[str, Any] | None = None) -> Verdict:
    """Median against the bound: regression past tolerance, improvement past tolerance the other way; a bound
    recorded under another workload is not compared."""
    spread = summarize_repeats(samples)
    median = float(spread.pop("median"))
    wl = dict(workload or {})
    if bound is None:
        return Verdict(config, scenario, metric, median, None, Kind.NEW, spread, samples, wl)
    if wl and workload_differs(bound.workload, wl):
        return Verdict(config, scenario, metric, median, bound, Kind.WORKLOAD_CHANGED, spread, samples, wl)
    band = bound.threshold(bound.value)  # the tolerance rule, at the bound's own level
    lo, hi = bound.value * (1 - band), bound.value * (1 + band)
    if bound.kind == "floor":
        verdict = Kind.REGRESSION if median < lo else (Kind.IMPROVEMENT if median > hi else Kind.PASS)
    else:
        verdict = Kind.REGRESSION if median > hi else (Kind.IMPROVEMENT if median < lo else Kind.PASS)
    return Verdict(config, scenario, metric, median, bound, verdict, spread, samples, wl)


def noise_widened(entry: Any) -> bool:
    """A per-entry tolerance a recorder widened from the spread (3 x CV, before issue 20): an entry with `spread`
    (written by --update-baselines) whose `tolerance` gives no `tolerance_why`. The statistics already test a change
    against the spread, so such a tolerance counted the noise twice (a 30% drop passed on perfect data)."""
    return "tolerance" in entry and "spread" in entry and "tolerance_why" not in entry


class BaselineStore:
    """One baselines file: read, validated, looked up; updated in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.doc = self._read()

    def _read(self) -> tomlkit.TOMLDocument:
        if not self.path.exists():
            return tomlkit.document()
        try:
            doc = tomlkit.parse(read_utf8(self.path))
        except TOMLKitError as exc:
            raise BaselineError(f"{self.path}: invalid TOML: {exc}") from None
        except UnicodeError as exc:
            raise BaselineError(str(exc)) from None
        except OSError as exc:
            raise BaselineError(f"{self.path}: cannot read: {exc.strerror}") from None
        validate(self.path, doc.unwrap())
        return doc

    def default_tolerance(self) -> float:
        """The file's default tolerance."""
        return float(self.doc.get("defaults", {}).get("tolerance", DEFAULT_TOLERANCE))

    def latency_slack_ms(self) -> float:
        """The file's slack for latency ceilings (ms): timer jitter no ceiling's verdict turns on."""
        return float(self.doc.get("defaults", {}).get("latency_slack_ms", 0.0))

    def bound(self, config: str, scenario: str, metric: str) -> Bound | None:
        """The recorded floor or ceiling, or None for a new metric."""
        entry = self.doc.get(config, {}).get(scenario, {}).get(metric)
        if entry is None:
            return None
        kind = "floor" if "floor" in entry else "ceiling"
        slack = float(self.doc.get("defaults", {}).get("latency_slack_ms", 0.0)) if kind == "ceiling" else 0.0
        workload = entry.get("workload")
        default = self.default_tolerance()
        tolerance = default if noise_widened(entry) else entry.get("tolerance", default)
        if len(entry.get("launches", [])) < 2:
            # One launch says little about the next (5-10% between launches): a provisional bound is held to its
            # file's default tolerance, never to a tighter per-entry one, until a reference is recorded.
            tolerance = max(tolerance, default)
        return Bound(metric, kind, float(entry[kind]), float(tolerance),
                     float(entry["measured"]) if "measured" in entry else None, str(entry.get("source", "")),
                     slack, dict(workload) if workload is not None else None,
                     tuple(float(x) for x in entry.get("launches", [])),
                     self._target(entry, scenario, metric),
                     tuple(float(x) for x in entry.get("cdf", [])),
                     _power_of(entry.get("provenance")), str((entry.get("provenance") or {}).get("build", "")),
                     _session(entry))

    def _target(self, entry: Any, scenario: str, metric: str) -> float | None:
        """The entry's own target, else the file's for this scenario and metric ([targets]), else None."""
        target = entry.get("target", self.doc.get(TARGETS, {}).get(scenario, {}).get(metric))
        return float(target) if target is not None else None

    def widened(self) -> list[str]:
        """`config.scenario.metric` of each entry whose tolerance was widened from noise (ignored: the default
        applies; --update-baselines removes it)."""
        return [f"{c}.{s}.{m}" for c, s, m, e in self.entries() if noise_widened(e)]

    def entries(self) -> list[tuple[str, str, str, Any]]:
        """Every entry: (config, scenario, metric, its table)."""
        return [(c, s, m, e) for c, scenarios in self.doc.items() if c not in RESERVED
                for s, metrics in scenarios.items() for m, e in metrics.items()]

    def has_config(self, config: str) -> bool:
        """Whether the file holds any entry of this config."""
        return config not in RESERVED and bool(self.doc.get(config))

    def cost(self, config: str) -> dict[str, Any] | None:
        """What a launch of this config cost here when it was last recorded (`[costs.CONFIG]`), or None."""
        cost = self.doc.get(COSTS, {}).get(config)
        return dict(cost) if cost is not None else None

    def metrics_of(self, config: str, scenario: str) -> list[str]:
        """The metrics the file holds for this config and scenario."""
        return list(self.doc.get(config, {}).get(scenario, {}).keys())


def select_updates(verdicts: Iterable[Verdict], mode: str) -> list[Verdict]:
    """Which verdicts --update-baselines writes: new, improved and re-measured under a changed workload; with
    mode 'all' regressions too. A passing entry is rewritten only to record more launches than its reference holds."""
    # A drift the team means (a new chat template, a model that thinks less by design) is recorded as a regression
    # is: on purpose, with 'all'.
    wanted = {Kind.NEW, Kind.IMPROVEMENT, Kind.WORKLOAD_CHANGED} | (
        {Kind.REGRESSION, Kind.WORKLOAD_DRIFT} if mode == "all" else set())
    return [v for v in verdicts
            if v.verdict in wanted or (establishes(v) and v.verdict in (Kind.PASS, Kind.UNRESOLVED))]


def unfit_to_record(v: Verdict) -> str | None:
    """Why a measurement must not become a bound (None: it may): one measured beside other GPU users, or a
    regression that only one launch saw (a contended launch once recorded a latency ceiling 3x the old one)."""
    if v.provenance.get("cotenants"):
        return (f"{v.config} {v.scenario} {v.metric} was measured beside other processes on its GPUs "
                f"({v.provenance['cotenants'][0]}); not recorded: measure it on a quiet machine")
    if v.verdict == Kind.REGRESSION and not v.stat and len(v.launches) < 2:
        return (f"{v.config} {v.scenario} {v.metric} regressed on one launch only; not recorded: record a worse "
                "bound from --glm5-launches 2 or more, so that one contended launch cannot set it")
    return None


def establishes(v: Verdict) -> bool:
    """This run measured more launches than the recorded reference holds: record them (a provisional bound becomes
    a tested one)."""
    return v.bound is not None and len(v.launches) >= 2 and len(v.launches) > len(v.bound.launches)


def _better(kind: str, new: float, old: float) -> bool:
    return new > old if kind == "floor" else new < old


def _fill(entry: Any, kind: str, value: float, v: Verdict, detectable: Callable[[float, int], float] | None) -> None:
    """An entry's bound, measured value, spread, workload and reference launches from the verdict that records it."""
    entry[kind] = value
    entry["measured"] = value
    if v.spread:
        entry["spread"] = _inline({k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.spread.items()})
    if v.workload:
        entry["workload"] = _inline(v.workload)
    if v.launches:
        entry["launches"] = [round(x, 4) for x in v.launches]
        if detectable is not None and len(v.launches) >= 2 and min(v.launches) > 0:
            entry["detectable"] = round(detectable(log_cv(v.launches), len(v.launches)), 4)
    elif "launches" in entry:
        del entry["launches"]  # a value from a run without launch data: the old launches are not its spread
        entry.pop("detectable", None)


def write_updates(path: Path, verdicts: list[Verdict], provenance: dict[str, Any] | None = None,
                  today: str | None = None, lock_timeout: float = 60.0,
                  detectable: Callable[[float, int], float] | None = None,
                  distributions: Sequence[Verdict] = ()) -> list[Change]:
    """Record measured medians as the new bounds: re-read under a lock, edit in place, replace atomically.

    Each entry is stamped with its own verdict's provenance and workload. The file is re-read under the lock, so
    a bound another run wrote meanwhile is seen: a new or improved value never lowers a floor (or raises a
    ceiling) that is already better; only an explicit regression update (`=all`) moves a bound the worse way.
    `detectable(cv, n)`: the drop one new launch finds against n reference launches, stored with each reference
    (the statistics are the caller's: this module stays free of scipy, which a killed writer must not wait for).
    `distributions`: verdicts whose entries stay as they are but gain the TTFT or ITL distribution their scenario
    has none of yet (files recorded before distributions were kept), under the same workload."""
    path.parent.mkdir(parents=True, exist_ok=True)
    changes: list[Change] = []
    with FileLock(str(path.parent / f".{path.name}.lock"), timeout=lock_timeout, mode=SHARED_MODE):
        store = BaselineStore(path)
        doc = store.doc
        added: list[tuple[str, str, str, Any]] = []
        drawn: set[tuple[str, str, str]] = set()  # one recorded distribution per scenario and family, not per metric
        for v in verdicts:
            kind = "floor" if higher_is_better(v.metric) else "ceiling"
            old = doc.get(v.config, {}).get(v.scenario, {}).get(v.metric)
            before = float(old[kind]) if old is not None and kind in old else None
            value = round(geometric_mean(v.launches) if len(v.launches) >= 2 else v.measured, 4)
            moved = v.verdict == Kind.WORKLOAD_CHANGED and workload_differs(_recorded_workload(old), v.workload)
            moved = moved or establishes(v)
            if before is not None and v.verdict != Kind.REGRESSION and not moved and not _better(kind, value, before):
                continue  # another writer recorded a better bound since this run read the file
            entry: Any = old if old is not None else tomlkit.table()
            _fill(entry, kind, value, v, detectable)
            family = (v.config, v.scenario, latency_family(v.metric))
            if v.cdf and family not in drawn:
                drawn.add(family)
                _keep_distribution(doc[v.config][v.scenario] if old is not None else {}, entry, v)
            entry["updated"] = today or dt.date.today().isoformat()
            entry["provenance"] = _inline(v.provenance or provenance or {})
            if old is None:
                added.append((v.config, v.scenario, v.metric, entry))
            why = f"reference of {len(v.launches)} launches" if establishes(v) else v.verdict
            changes.append(Change(v.config, v.scenario, v.metric, before, value, why))
        changes += _add_distributions(doc, distributions, drawn)
        changes += migrate(store)
        text = _insert_tables(tomlkit.dumps(doc), added)
        tomlkit.parse(text)  # what is written must read back
        atomic_write(path, text)
    return changes


def write_costs(path: Path, costs: dict[str, dict[str, Any]], lock_timeout: float = 60.0) -> None:
    """Record what a launch of each config cost (`[costs.CONFIG]`), under the file's lock, keeping the rest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{path.name}.lock"), timeout=lock_timeout, mode=SHARED_MODE):
        doc = BaselineStore(path).doc
        if COSTS not in doc:
            doc[COSTS] = tomlkit.table(is_super_table=True)
        for config, cost in costs.items():
            table = tomlkit.table()
            table.update(cost)
            doc[COSTS][config] = table
        text = tomlkit.dumps(doc)
        tomlkit.parse(text)
        atomic_write(path, text)


def _keep_distribution(scenario: Any, entry: Any, v: Verdict) -> None:
    """Put v's distribution on its entry, the only one of its family in the scenario (an older one elsewhere goes)."""
    family = latency_family(v.metric)
    for metric, other in scenario.items():
        if other is not entry and latency_family(metric) == family:
            other.pop("cdf", None)
    entry["cdf"] = [float(f"{x:.4g}") for x in v.cdf]


def _add_distributions(doc: Any, verdicts: Sequence[Verdict], drawn: set[tuple[str, str, str]]) -> list[Change]:
    """Give each scenario's TTFT and ITL family the distribution it lacks, on the entry of a verdict that measured it
    under the recorded workload; one Change each (the bound does not move)."""
    out = []
    for v in verdicts:
        family = latency_family(v.metric)
        entry = doc.get(v.config, {}).get(v.scenario, {}).get(v.metric)
        key = (v.config, v.scenario, family)
        if not v.cdf or entry is None or key in drawn or workload_differs(_recorded_workload(entry), v.workload):
            continue
        if any("cdf" in e and latency_family(m) == family for m, e in doc[v.config][v.scenario].items()):
            continue
        drawn.add(key)
        _keep_distribution(doc[v.config][v.scenario], entry, v)
        value = float(entry["floor" if "floor" in entry else "ceiling"])
        out.append(Change(v.config, v.scenario, v.metric, value, value,
                          f"bound kept; its {family.upper()} distribution recorded, 21 quantiles, for the page"))
    return out


def migrate(store: BaselineStore) -> list[Change]:
    """Remove every tolerance a recorder widened from noise (the default applies again); one Change each."""
    out = []
    default = store.default_tolerance()
    for config, scenario, metric, entry in store.entries():
        if noise_widened(entry):
            value = float(entry["floor" if "floor" in entry else "ceiling"])
            out.append(Change(config, scenario, metric, value, value,
                              f"tolerance {entry['tolerance']:g} removed: an old recording widened it from the "
                              f"spread; the tests weigh the spread, the practical threshold is [defaults] {default:g}"))
            del entry["tolerance"]
    return out


def _recorded_workload(entry: Any) -> dict[str, Any] | None:
    recorded = entry.get("workload") if entry is not None else None
    return dict(recorded) if recorded is not None else None


_HEADER_RE = re.compile(r"^\s*\[([A-Za-z0-9_.-]+)\]\s*(#.*)?$")


def _insert_tables(text: str, added: list[tuple[str, str, str, Any]]) -> str:
    """New entries as `[config.scenario.metric]` tables: after the config's last table, before the comments and
    blank lines that introduce the next header (they belong to it), with a blank line before each header. A
    config the file does not hold yet goes at the end."""
    lines = text.splitlines()
    for config, scenario, metric, entry in added:
        body = tomlkit.document()
        for key, value in entry.items():
            body[key] = value
        block = ["", f"[{config}.{scenario}.{metric}]", *tomlkit.dumps(body).rstrip("\n").splitlines()]
        headers = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _HEADER_RE.match(line))]
        own = [i for i, key in headers if key.split(".")[0] == config]
        if not own:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += block
            continue
        following = [i for i, _ in headers if i > own[-1]]
        at = following[0] if following else len(lines)
        while at > own[-1] + 1 and (not lines[at - 1].strip() or lines[at - 1].lstrip().startswith("#")):
            at -= 1
        lines[at:at] = block
    return "\n".join(lines).rstrip("\n") + "\n"


def _power_of(provenance: Any) -> dict[str, float] | None:
    """The power regime an entry was recorded under (its provenance's `power`), where it holds numbers."""
    power = provenance.get("power") if isinstance(provenance, dict) else None
    if not isinstance(power, dict):
        return None
    return {str(k): float(v) for k, v in power.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _inline(values: dict[str, Any]) -> Any:
    table = tomlkit.inline_table()
    table.update(values)
    return table


def model_key(model: str) -> str:
    """The name a model's baselines and history are filed under, the same wherever the weights lie: `GLM-5-NVFP4`
    for /models/GLM-5-NVFP4, for zai-org/GLM-5-NVFP4 and for a Hugging Face snapshot
    .../models--zai-org--GLM-5-NVFP4/snapshots/3f2a9c1 (whose last folder is a commit hash)."""
    parts = PurePath(model.rstrip("/")).parts
    for i, part in enumerate(parts[:-1]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            name = part[len("models--"):].split("--", 1)[-1]
            break
    else:
        name = parts[-1] if parts else model
    name = name[: -len(".gguf")] if name.endswith(".gguf") else name  # a model file: its name, not its format
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "model"


def store_of(root: Path, stores: dict[Path, BaselineStore], hardware: str | None, model: str | None
             ) -> tuple[Path, BaselineStore] | None:
    """The one parsed copy of the baselines file of this hardware and model (read into `stores` once); None where
    either is not known yet, or the file cannot be read (the run said why when it read it first)."""
    if model is None or hardware is None:
        return None
    path = baseline_path(root, hardware, model)
    try:
        return path, read_once(stores, path)
    except BaselineError:
        return None


def read_once(stores: dict[Path, BaselineStore], path: Path) -> BaselineStore:
    """The one parsed copy of a baselines file, read into `stores` the first time; BaselineError when it cannot be
    read (the session's plan, the gate and the recording share the copy)."""
    if path not in stores:
        stores[path] = BaselineStore(path)
    return stores[path]


def baseline_path(root: Path, hardware: str, model: str) -> Path:
    """`<root>/<hardware>/<model key>.toml` (model_key: the same file for every path to the same model)."""
    return root / hardware / f"{model_key(model)}.toml"


def _session(entry: Any) -> str:
    """The recording session of an entry: its date and the commit that recorded it ("" where the file says neither).

    >>> _session({"updated": "2026-12-03", "provenance": {"commit": "7fed32d+dirty"}}), _session({})
    ('2026-12-03 7fed32d+dirty', '')
    """
    provenance = entry.get("provenance") or {}
    parts = [str(entry.get("updated", "")), str(provenance.get("commit", "")) if isinstance(provenance, dict) else ""]
    return " ".join(p for p in parts if p)
