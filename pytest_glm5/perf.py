"""The perf gate of one run: results per config and scenario, verdicts against baselines, and updates."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .baselines import (
    BaselineError,
    BaselineStore,
    Change,
    Verdict,
    baseline_path,
    judge,
    select_updates,
    write_updates,
)
from .loadgen import BenchResult
from .metrics import summarize_repeats

VOLATILE_INFO_KEYS = {"port", "host", "startup_time", "status", "internal_states", "launch_command", "nccl_port",
                      "random_seed"}


class GateError(Exception):
    """The gate cannot judge (no hardware key, a broken baselines file); the message says why and what to do."""


def hardware_for(server_info: dict[str, Any], given: str | None, nvml_key: str | None) -> str:
    """The hardware key of a server: --glm5-hardware, the emulator's profile and time scale, or NVML's."""
    sim = server_info.get("sim")
    if isinstance(sim, dict):
        key = f"sim-{sim.get('profile')}-x{float(sim.get('time_scale', 1.0)):g}"
        if given and given != key:
            raise GateError(f"--glm5-hardware {given} given for an emulator run; emulator baselines are keyed "
                            f"{key} and never mix with real hardware or other time scales")
        return key
    if given:
        if given.startswith("sim-"):
            raise GateError(f"--glm5-hardware {given} names emulator baselines, but the server is not the emulator")
        return given
    if nvml_key is None:
        raise GateError("cannot tell which hardware this server runs on: NVML is not available here (or the "
                        "server is remote); pass --glm5-hardware KEY, e.g. 8x-rtx-pro-6000-blackwell-sm120")
    return nvml_key


def args_hash(server_info: dict[str, Any]) -> str:
    """Hash of the server's resolved args, without what changes from launch to launch."""
    stable = {k: v for k, v in server_info.items() if k not in VOLATILE_INFO_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:12]


def git_commit(root: Path) -> str:
    """The suite's git commit (short), with `+dirty` for uncommitted changes; `unknown` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


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
    where: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = field(default_factory=dict)
    crashed: dict[str, str] = field(default_factory=dict)

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
              hardware: str, model: str, provenance: dict[str, Any]) -> Checked:
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
        path, store = self.store(hardware, model)
        names = list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]
        values = {m: [r.metrics[m] for r in results] for m in names}
        return self._judge(config, scenario, values, store, path, provenance)

    def check_values(self, config: str, scenario: str, metric: str, samples: Sequence[float], hardware: str,
                     model: str, provenance: dict[str, Any]) -> Checked:
        """Hold a derived metric (e.g. scaling_2x) against its bound."""
        path, store = self.store(hardware, model)
        return self._judge(config, scenario, {metric: list(samples)}, store, path, provenance)

    def _judge(self, config: str, scenario: str, values: dict[str, list[float]], store: BaselineStore, path: Path,
               provenance: dict[str, Any]) -> Checked:
        out: list[Verdict] = []
        failures: list[str] = []
        for metric, samples in values.items():
            spread = summarize_repeats(samples)
            spread.pop("median", None)
            v = judge(config, scenario, metric, samples, store.bound(config, scenario, metric), spread)
            out.append(v)
            if v.verdict == "regression":
                failures.append(v.line())
            elif v.verdict == "new" and self.strict:
                failures.append(v.line() + f"; --glm5-strict-baselines needs an entry in {path}")
        self.verdicts.extend(out)
        self.where[(config, scenario)] = (path, provenance)
        return Checked(out, failures)

    def update(self, mode: str) -> tuple[list[Change], list[str]]:
        """Write new bounds (new and improved; regressions too with mode 'all'); return changes and errors."""
        by_file: dict[Path, list[Verdict]] = {}
        prov: dict[Path, dict[str, Any]] = {}
        for v in select_updates(self.verdicts, mode):
            path, provenance = self.where[(v.config, v.scenario)]
            by_file.setdefault(path, []).append(v)
            prov[path] = provenance
        changes: list[Change] = []
        errors: list[str] = []
        for path, verdicts in by_file.items():
            try:
                changes += write_updates(path, verdicts, prov[path])
            except (OSError, BaselineError) as exc:
                detail = getattr(exc, "strerror", None) or str(exc)
                errors.append(f"cannot update {path}: {detail}; the file is unchanged")
        return changes, errors
