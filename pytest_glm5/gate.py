"""The run's gate: results per config and scenario, verdicts against baselines, and baseline updates."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .baselines import (
    WORKLOAD_KEYS,
    BaselineError,
    BaselineStore,
    Change,
    Verdict,
    baseline_path,
    judge,
    select_updates,
    write_updates,
)
from .loadgen import BenchResult, Workload
from .provenance import Provenance


class GateError(Exception):
    """The gate cannot judge (no hardware key, a broken baselines file); the message says why and what to do."""


def check_stores(root: Path, wanted: Iterable[tuple[str, str]]) -> None:
    """Read the baselines file of each (hardware, model) now; GateError names the first that cannot be used."""
    for path in {baseline_path(root, hw, model) for hw, model in wanted}:
        try:
            BaselineStore(path)
        except BaselineError as exc:
            raise GateError(str(exc)) from None


def workload_of(workload: Workload) -> dict[str, object]:
    """The part of a Workload that a bound depends on."""
    return {k: getattr(workload, k) for k in WORKLOAD_KEYS}


@dataclass
class Checked:
    """What one perf.check produced: verdicts and the lines that fail the test."""

    verdicts: list[Verdict]
    failures: list[str]


@dataclass
class PerfGate:
    """Holds every verdict of the run, the baselines stores, and writes updates at the end."""

    root: Path
    strict: bool = False
    stores: dict[Path, BaselineStore] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    results: dict[tuple[str, str], list[BenchResult]] = field(default_factory=dict)
    where: dict[tuple[str, str], Path] = field(default_factory=dict)

    def store(self, hardware: str, model: str) -> tuple[Path, BaselineStore]:
        """The store of this hardware and model (read once per run)."""
        path = baseline_path(self.root, hardware, model)
        if path not in self.stores:
            try:
                self.stores[path] = BaselineStore(path)
            except BaselineError as exc:
                raise GateError(str(exc)) from None
        return path, self.stores[path]

    def check(self, config: str, scenario: str, results: Sequence[BenchResult], metrics: Sequence[str] | None,
              provenance: Provenance) -> Checked:
        """Hold the median of each metric over repeats against its bound."""
        failures: list[str] = []
        for r in results:
            if r.failed or r.aborted:
                errs = "; ".join(r.errors[:3]) or "no error text"
                failures.append(f"{config} {scenario}: {r.failed} of {r.workload.num_prompts} requests failed at "
                                f"concurrency {r.workload.concurrency}: {errs}")
        self.results[(config, scenario)] = list(results)
        if failures:
            return Checked([], failures)
        path, store = self.store(provenance.hardware, provenance.model)
        names = list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]
        values = {m: [r.metrics[m] for r in results] for m in names}
        prov = provenance.with_workload(workload_of(results[0].workload)) if results else provenance
        return self._judge(config, scenario, values, store, path, prov)

    def check_values(self, config: str, scenario: str, metric: str, samples: Sequence[float],
                     provenance: Provenance) -> Checked:
        """Hold a derived metric (e.g. scaling_2x) against its bound."""
        path, store = self.store(provenance.hardware, provenance.model)
        return self._judge(config, scenario, {metric: list(samples)}, store, path, provenance)

    def _judge(self, config: str, scenario: str, values: dict[str, list[float]], store: BaselineStore, path: Path,
               provenance: Provenance) -> Checked:
        out: list[Verdict] = []
        failures: list[str] = []
        for metric, samples in values.items():
            v = judge(config, scenario, metric, samples, store.bound(config, scenario, metric),
                      workload=provenance.workload)
            v.provenance = provenance.as_entry()
            out.append(v)
            if v.verdict == "regression":
                failures.append(v.line())
            elif v.verdict == "new" and self.strict:
                failures.append(v.line() + f"; --glm5-strict-baselines needs an entry in {path}")
        self.verdicts.extend(out)
        self.where[(config, scenario)] = path
        return Checked(out, failures)

    def update(self, mode: str) -> tuple[list[Change], list[str]]:
        """Write new bounds (new and improved; regressions too with mode 'all'); return changes and errors."""
        by_file: dict[Path, list[Verdict]] = {}
        for v in select_updates(self.verdicts, mode):
            by_file.setdefault(self.where[(v.config, v.scenario)], []).append(v)
        changes: list[Change] = []
        errors: list[str] = []
        for path, verdicts in by_file.items():
            try:
                changes += write_updates(path, verdicts)
            except (OSError, BaselineError) as exc:
                detail = getattr(exc, "strerror", None) or str(exc)
                errors.append(f"cannot update {path}: {detail}; the file is unchanged")
        return changes, errors
