"""Where each series' reference comes from: the baselines file of its hardware and model (read once a run, checked
before the first launch), the history's nights (what earlier nights of the same sample leave a series, and the
launches later nights made of the reference's own build, which grow it), and the variance model fitted over both
(judge/variance.py). Recording's sizing asks here too: whether tonight's launches already make a reference that
resolves its tolerance. The gate judges; this room says what it judges against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..metrics import geometric_mean, higher_is_better
from ..settings import SettingsError, check_writable_dir
from ..textfiles import remove_stale_temps
from . import box, carry, decide, slo
from .baselines import BaselineError, BaselineStore, baseline_path, model_key, read_once
from .provenance import Provenance
from .stats import mean_log
from .variance import Spread, VarianceModel, variance_of
from .verdicts import Bound, threshold


def _ref_digest(bound: Bound) -> str:
    """The digest a sample keeps of its reference (carry.Sample.ref): updating the baselines starts a new sample."""
    return carry.digest([list(bound.launches), bound.tolerance, bound.value])


class GateError(Exception):
    """The gate cannot judge (no hardware key, a broken baselines file); the message says why and what to do."""


def check_stores(root: Path, wanted: dict[str, tuple[str, str]],
                 stores: dict[Path, BaselineStore] | None = None, writing: bool = False) -> list[str]:
    """Read the baselines file of each config's (hardware, model) now; GateError names the first that cannot be
    used, and with `writing` (--update-baselines) the first whose directory cannot take the new file: before the
    first launch, not after a night of recording. Returns a line per file: which configs read it, and which of them
    it holds nothing for. `stores`: filled with what was read, for the plan (a large file takes about half a second
    to parse). Temp files a killed writer left beside a file are removed."""
    users: dict[Path, list[str]] = {}
    keys: dict[Path, str] = {}
    for config, (hw, model) in wanted.items():
        path = baseline_path(root, hw, model)
        users.setdefault(path, []).append(config)
        keys[path] = f"model key {model_key(model)} of {model}"
    lines = []
    for path, configs in users.items():
        try:
            store = BaselineStore(path)
        except BaselineError as exc:
            raise GateError(str(exc)) from None
        for tmp in remove_stale_temps(path):
            lines.append(f"removed {tmp}, left by a writer that was killed mid-write")
        if writing:
            try:
                check_writable_dir(path.parent, f"--update-baselines: the baselines directory of {path.name}")
            except SettingsError as exc:
                raise GateError(f"{exc}, or make it writable; nothing was launched") from None
        if stores is not None:
            stores[path] = store
        missing = [c for c in configs if not store.has_config(c)]
        state = ("MISSING" if not path.exists() else
                 f"nothing for {', '.join(missing)}" if missing else "an entry for each")
        lines.append(f"baselines {path} ({keys[path]}) for {', '.join(configs)}: {state}")
        if widened := store.widened():
            lines.append(f"  {len(widened)} entries there (e.g. {widened[0]}) carry a tolerance an old recording "
                         f"widened from their spread: ignored, [defaults] {store.default_tolerance():g} applies; "
                         "--update-baselines removes them")
    return lines


@dataclass(frozen=True)
class Against:
    """What one series is judged against tonight: its sample (build, workload, reference: what tomorrow's launches
    must share to pool with tonight's), what earlier nights of that sample left, the reference launches later nights
    of its build grew it by, and the reference the test uses (the recorded launches and those)."""

    sample: carry.Sample
    prior: carry.Prior
    grown: tuple[float, ...]
    used: Bound
    box: box.Shift | None = None  # the box's shift the reference was moved by (judge/box.py)


@dataclass
class ReferenceBook:
    """The baselines stores, the history's runs and the variance models of one run: where references come from."""

    root: Path
    stores: dict[Path, BaselineStore] = field(default_factory=dict)
    # (hardware, model) -> the runs the history holds, oldest first (None: no --glm5-history, nothing carries)
    history: Callable[[str, str], Sequence[Mapping[str, Any]]] | None = None
    runs: dict[tuple[str, str], Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    variance: dict[Path, VarianceModel] = field(default_factory=dict)  # per baselines file, fitted once a run
    # (hardware, model) -> the box's shift per (scenario, metric, recording session) (judge/box.py)
    shifts: dict[tuple[str, str], dict[box.SeriesKind, box.Shift]] = field(default_factory=dict)

    def store(self, hardware: str, model: str) -> tuple[Path, BaselineStore]:
        """The store of this hardware and model (read once per run)."""
        path = baseline_path(self.root, hardware, model)
        try:
            return path, read_once(self.stores, path)
        except BaselineError as exc:
            raise GateError(str(exc)) from None

    def spread(self, path: Path, store: BaselineStore, key: tuple[str, str, str]) -> Spread | None:
        """What the series' family lends it (judge/variance.py), from every reference of the store's file."""
        if path not in self.variance:
            hw, model = path.parent.name, path.stem
            runs = [r for (h, m), rs in self.runs.items() for r in rs if h == hw and model_key(m) == model]
            self.variance[path] = variance_of(store, runs)
        config, scenario, metric = key
        return self.variance[path].spread(scenario, metric, config)

    def models(self) -> dict[str, object]:
        """The variance models this run fitted, per baselines file (`hardware/model.toml`), as the report keeps them."""
        return {f"{path.parent.name}/{path.name}": m.to_dict() for path, m in self.variance.items()}

    def runs_of(self, provenance: Provenance) -> Sequence[Mapping[str, Any]]:
        """The history's runs of this hardware and model (read once a run; none without a history)."""
        where = (provenance.hardware, provenance.model)
        if where not in self.runs:
            self.runs[where] = self.history(*where) if self.history is not None else []
        return self.runs[where]

    def against(self, provenance: Provenance, key: tuple[str, str, str], bound: Bound) -> Against:
        """What a series is judged against tonight: its sample, what earlier nights of it left (judge/carry.py),
        and its reference grown by later nights' launches of the reference's build (none while tonight's build is
        the reference's, which would test a sample against itself)."""
        sample = carry.Sample(provenance.build, carry.digest(provenance.workload), _ref_digest(bound))
        runs = self.runs_of(provenance)  # read before the variance model is fitted: the nights join it
        carries = self.history is not None
        prior = carry.prior_of(runs, key, sample) if carries else carry.Prior()
        moved = box.for_series(self.box_shift(provenance), key[1], key[2], bound.recorded) if carries else None
        if moved is not None and moved.usable and len(bound.launches) >= 2:
            # The box as it reads the reference's build now: the recorded launches moved by its shift (the grown
            # ones are of the box as it was, and would pull the reference back).
            return Against(sample, prior, (), replace(bound, launches=moved.move(bound.launches,
                                                                                 higher_is_better(key[2]))), moved)
        grown = carry.grown(runs, key, sample.ref, bound.build) \
            if carries and bound.build and bound.build != provenance.build else ()
        return Against(sample, prior, grown, replace(bound, launches=(*bound.launches, *grown)))

    def box_shift(self, provenance: Provenance) -> dict[box.SeriesKind, box.Shift]:
        """How the box reads the references' own builds on its latest nights, per (scenario, metric, recording
        session) (judge/box.py), once a run."""
        where = (provenance.hardware, provenance.model)
        if where not in self.shifts:
            _, store = self.store(*where)
            # Per series, once: its recorded build, its reference's digest and mean (every night's entry asks).
            means: dict[tuple[str, str, str], tuple[str, str, float, str] | None] = {}

            def recorded(key: tuple[str, str, str], build: str, ref: str) -> tuple[float, bool, str] | None:
                if key not in means:
                    b = store.bound(*key)
                    means[key] = (b.build, _ref_digest(b), mean_log(b.launches), b.recorded) \
                        if b is not None and not b.provisional and b.build else None
                got = means[key]
                if got is None or (build, ref) != got[:2]:
                    return None
                return got[2], higher_is_better(key[2]), got[3]

            self.shifts[where] = box.of(self.runs_of(provenance), recorded)
        return self.shifts[where]

    def reference_short(self, config: str, scenario: str, values_of: Callable[[str], list[float]],
                        metrics: Sequence[str] | None, provenance: Provenance, looks: int) -> bool:
        """Recording: whether tonight's launch values (`values_of(metric)`, one a launch) are still too few to be a
        reference that resolves each metric's tolerance at the CV they show within `looks` (80% power;
        decide.to_resolve)."""
        _, store = self.store(provenance.hardware, provenance.model)
        for metric in list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]:
            if metric == slo.ATTAINMENT:
                continue  # judged on exact bounds over its requests: no reference spread to resolve
            values = values_of(metric)
            if len(values) < 2 or min(values) <= 0:
                return len(values) < 2
            bound = store.bound(config, scenario, metric)
            slack = 0.0 if higher_is_better(metric) else store.latency_slack_ms()
            tolerance = bound.threshold(geometric_mean(values)) if bound is not None else \
                threshold(store.default_tolerance(), slack, geometric_mean(values))
            if decide.reference_short(values, tolerance, looks):
                return True
        return False

    def reference_full(self, config: str, scenario: str, metrics: Sequence[str] | None, provenance: Provenance,
                       cap: int) -> bool:
        """Recording: whether every metric of the scenario already has a reference of `cap` launches, so that no
        round of this run can record a larger one (only an improvement could change it, and rounds are not spent
        on hoping for one)."""
        _, store = self.store(provenance.hardware, provenance.model)
        names = list(metrics or []) or store.metrics_of(config, scenario)
        bounds = [store.bound(config, scenario, m) for m in names]
        return bool(names) and all(b is not None and len(b.launches) >= cap for b in bounds)
