"""The run's gate: results per config and scenario, verdicts against baselines, and baseline updates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..configs import ServerConfig
from ..load.types import BEHIND, BenchResult, Workload, trace_identity
from ..metrics import (
    cdf_points,
    geometric_mean,
    higher_is_better,
    latency_family,
    percentile,
    quantile_of,
    requests_needed,
)
from ..settings import Settings, SettingsError, check_writable_dir
from ..telemetry.energy import merged_power
from ..textfiles import remove_stale_temps
from . import carry, decide, family, held, slo
from .baselines import BaselineError, BaselineStore, baseline_path, judge, model_key, read_once
from .decide import Look, per_launch
from .provenance import Provenance
from .regime import power_change
from .stats import DEFAULT_ALPHA, DEFAULT_EFFECT, order_ci
from .variance import Spread, VarianceModel, variance_of
from .verdicts import (
    NO_BASELINES,
    NOT_JUDGED,
    WORKLOAD_KEYS,
    WORKLOAD_UNSET,
    Bound,
    Kind,
    Reason,
    Test,
    Verdict,
    threshold,
)

# Where a series' looks span nights (a history), alpha is spent early (Pocock-type): scripts/simulate_nights.py
EARLY_SPENDING = True


HOST_BOUND = (Kind.CLIENT_BOUND, Kind.EMULATOR_BOUND)  # not judged: the host, not the server, set the figure


def _wrong(said: str) -> str:
    """The cause of a build's wrong answers in a phrase, from what its check said: `canary failed: 12 of 16 prompts
    diverged within their first 12 tokens` or `accuracy 71.0% vs 90.0% (-19.0 points), p=1.2e-08`."""
    text = said.removeprefix("faster, but wrong: ")
    if text.startswith("accuracy"):
        p = text.split("McNemar ", 1)[1].split(" ", 1)[0] if "McNemar " in text else ""
        return text.split(":", 1)[0] + (f", {p}" if p else "")
    return text.split(" (", 1)[0]


def _behind(results: Sequence[BenchResult], limit: float) -> str | None:
    """Why these runs measured the host, not the emulated model (None: the emulator kept up, or it is not one)."""
    for r in results:
        duration = r.metrics.get("duration", 0.0)
        if r.lag_s is not None and duration > 0 and r.lag_s / duration > limit:
            return (f"the emulator fell behind its own model for {r.lag_s / duration * 100:.0f}% of the run (its "
                    "/metrics sglang:sim_behind_seconds_total): the CPU it shares with the client was measured, not "
                    "the model; not judged (raise --glm5-sim-time-scale for this point)")
    return None


def _tails(verdicts: Sequence[Verdict], results: Sequence[BenchResult]) -> None:
    """A percentile judged from fewer requests per launch than it needs is not judged (it would be a figure of the
    count: a p99 of 8 requests is their maximum); every other one (judged or not) carries the count it came from and
    its order-statistics CI in its spread. Every TTFT and ITL verdict carries the distribution it was taken from
    (recorded with the baselines, drawn on the page)."""
    pooled: dict[str, list[float]] = {}  # each family's values over every launch, gathered and sorted once

    def values(family: str) -> list[float]:
        if family not in pooled:
            pooled[family] = sorted(x for r in results for x in _latencies(r, family))
        return pooled[family]

    for v in verdicts:
        family = v.metric.split("_")[1] if "_" in v.metric else ""
        if latency_family(v.metric):
            v.cdf = cdf_points(values(family))
        q = quantile_of(v.metric)
        if q is None or v.verdict == Kind.TOO_FEW:
            continue
        # What the percentile is taken over: a request each for TTFT and latency, every gap between tokens for ITL.
        itl = family == "itl"
        per_launch: dict[str, int] = {}
        for r in results:
            n = sum(len(x.itl) if itl else 1 for x in r.records if x.success)
            per_launch[r.launch or "0"] = per_launch.get(r.launch or "0", 0) + n
        fewest = min(per_launch.values(), default=0)
        need = requests_needed(q)
        if fewest < need and v.verdict not in NOT_JUDGED:
            lower = next((f"p{p}" for p in (95, 90) if p / 100 < q and requests_needed(p / 100) <= fewest),
                         "median" if fewest >= 2 else None)
            head = v.metric.split("_", 1)[0]
            hint = f" or judge {v.metric.replace(head, lower, 1)}" if lower else ""
            v.verdict = Kind.TOO_FEW
            what = "inter-token gaps" if itl else "requests"
            v.note = (f"{v.metric} from {fewest} {what} per launch: a {head} needs {need} (one expected above it), "
                      f"else it is a figure of the count; not judged: raise num_prompts to {need}{hint}")
            continue
        pool = values(family)
        if not pool:
            continue  # a percentile of a family without per-request values here (TPOT): no count to claim
        ci = order_ci(pool, q)
        # The count always; the CI where the count allows one (a p99 of 128 has no upper rank to bound it with),
        # beside the figure it brackets: the percentile of every launch's values pooled, which is not the measured
        # value (a geometric mean of each launch's own percentile) and may lie outside that value's reach.
        v.spread = {**v.spread, ("gaps" if itl else "requests"): len(pool),
                    **({"pooled": round(percentile(pool, q * 100), 4),
                        "order_ci95": [round(ci[0], 4), round(ci[1], 4)]} if ci is not None else {})}


def _apart(results: Sequence[BenchResult]) -> tuple[Kind, str] | None:
    """Why these runs are not the build's speed at all (INVALID: it answers wrong) or not comparable (THROTTLED: a
    GPU slowed for heat or a power brake); None when neither."""
    invalid = next((r.invalid for r in results if r.invalid), None)
    if invalid:
        return Kind.INVALID, invalid
    throttled = next((why for r in results if r.energy is not None and (why := r.energy.throttled())), None)
    return (Kind.THROTTLED, throttled) if throttled else None


def _latencies(r: BenchResult, family: str) -> list[float]:
    """The values (ms) a TTFT, ITL or end-to-end percentile is taken over: a request each, every gap between tokens
    for ITL; empty for the other families."""
    if family == "itl":
        return [g * 1000.0 for x in r.records if x.success for g in x.itl]
    field = {"ttft": "ttft", "e2e": "latency"}.get(family)
    return [getattr(x, field) * 1000.0 for x in r.records if x.success] if field else []


def _client_bound(results: Sequence[BenchResult]) -> Callable[[str, float], str | None]:
    """For a metric and its tolerance: why the load client's own cost spoils these runs (None: it does not)."""

    def why(metric: str, tolerance: float) -> str | None:
        reasons = [r.client.why(metric, r.metrics, tolerance) for r in results if r.client is not None]
        return next((x for x in reasons if x), None)

    return why


JUDGED = (Kind.PASS, Kind.REGRESSION, Kind.IMPROVEMENT, Kind.UNRESOLVED, Kind.KNOWN_COST)


@dataclass(frozen=True)
class Reference:
    """A config's reference config (its `compare_to`) and whether it is meant to be slower than it."""

    config: str
    expected_slower: bool = False


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


def workload_of(workload: Workload) -> dict[str, object]:
    """The part of a Workload that a bound depends on (a key at its unset value, as thinking outside chat, is left
    out: recorded workloads and carried samples stay as they were, and a TOML file has no null)."""
    out = {k: getattr(workload, k) for k in WORKLOAD_KEYS
           if k not in WORKLOAD_UNSET or getattr(workload, k) != WORKLOAD_UNSET[k]}
    if workload.trace:
        out["trace"] = trace_identity(workload.trace)
    return out


@dataclass
class Checked:
    """What one perf.check produced: verdicts, the lines that fail the test now, and whether another launch could
    decide an unresolved series."""

    verdicts: list[Verdict]
    failures: list[str]
    undecided: bool = False


@dataclass(frozen=True)
class Statistics:
    """The run's error settings for statistical verdicts."""

    alpha: float = DEFAULT_ALPHA
    effect: float = DEFAULT_EFFECT
    max_repeats: int | None = None  # new launches (nightly, default 5) or launches per arm (A/B, default 8)
    ab: tuple[str, str] | None = None
    lag_limit: float = BEHIND  # an emulator behind its model for more of the run than this measured the host

    @classmethod
    def from_settings(cls, s: Settings) -> Statistics:
        """--glm5-alpha, --glm5-effect, --glm5-max-repeats and --glm5-ab."""
        return cls(alpha=s.alpha, effect=s.effect, max_repeats=s.max_repeats, ab=s.ab)

    def to_dict(self) -> dict[str, object]:
        """As the run document keeps it."""
        return {"alpha": self.alpha, "effect": self.effect, "max_repeats": self.max_repeats,
                "ab": list(self.ab) if self.ab else None}


@dataclass
class PerfGate:
    """Holds every verdict of the run, the baselines stores, and writes updates at the end."""

    root: Path
    strict: bool = False
    require: bool = False  # a config with no baselines at all fails (CI=true): the gate never switches off silently
    statistics: Statistics = field(default_factory=Statistics)
    references: dict[str, Reference] = field(default_factory=dict)  # config -> its compare_to
    stores: dict[Path, BaselineStore] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    versus: list[Verdict] = field(default_factory=list)  # configs against their compare_to config
    results: dict[tuple[str, str], list[BenchResult]] = field(default_factory=dict)
    # (hardware, model) -> the runs the history holds, oldest first (None: no --glm5-history, nothing carries)
    history: Callable[[str, str], Sequence[Mapping[str, Any]]] | None = None
    _runs: dict[tuple[str, str], Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    variance: dict[Path, VarianceModel] = field(default_factory=dict)  # per baselines file, fitted once a run

    def spread(self, path: Path, store: BaselineStore, key: tuple[str, str, str]) -> Spread | None:
        """What the series' family lends it (judge/variance.py), from every reference of the store's file."""
        if path not in self.variance:
            hw, model = path.parent.name, path.stem
            runs = [r for (h, m), rs in self._runs.items() for r in rs if h == hw and model_key(m) == model]
            self.variance[path] = variance_of(store, runs)
        config, scenario, metric = key
        return self.variance[path].spread(scenario, metric, config)

    def models(self) -> dict[str, object]:
        """The variance models this run fitted, per baselines file (`hardware/model.toml`), as the report keeps them."""
        return {f"{path.parent.name}/{path.name}": m.to_dict() for path, m in self.variance.items()}

    def prior(self, provenance: Provenance, key: tuple[str, str, str], sample: carry.Sample) -> carry.Prior:
        """What earlier nights in the history leave this series (judge/carry.py); nothing without a history."""
        return carry.prior_of(self._runs_of(provenance), key, sample) if self.history is not None else carry.Prior()

    def _runs_of(self, provenance: Provenance) -> Sequence[Mapping[str, Any]]:
        where = (provenance.hardware, provenance.model)
        if where not in self._runs:
            self._runs[where] = self.history(*where) if self.history is not None else []
        return self._runs[where]

    def store(self, hardware: str, model: str) -> tuple[Path, BaselineStore]:
        """The store of this hardware and model (read once per run)."""
        path = baseline_path(self.root, hardware, model)
        try:
            return path, read_once(self.stores, path)
        except BaselineError as exc:
            raise GateError(str(exc)) from None

    def per_night(self) -> int:
        """The looks one night may take of a series (its launches; A/B: ABBA blocks): --glm5-max-repeats."""
        st = self.statistics
        return max(1, -(-(st.max_repeats or 8) // 2)) if st.ab else (st.max_repeats or 5)

    def look(self, look: int) -> Look:
        """The sequential look: A/B adds ABBA blocks (two launches per arm), the nightly one launch at a time. With a
        history the nightly's looks count across nights, so a sample has at least carry.SAMPLE_LOOKS of them."""
        st = self.statistics
        looks = self.per_night()
        nights = self.history is not None and not st.ab
        if nights:
            looks = max(looks, carry.SAMPLE_LOOKS)
        return Look(st.alpha, min(look, looks), looks, st.effect, early=nights and EARLY_SPENDING)

    def judge(self, config: str, scenario: str, results: Sequence[BenchResult], metrics: Sequence[str] | None,
              provenance: Provenance, look: int = 1) -> Checked:
        """Each metric of a scenario: against its bound (statistically where the bound has reference launches),
        B against A in an A/B run; failed requests fail at once."""
        failures: list[str] = []
        for r in results:
            if r.failed or r.aborted:
                errs = "; ".join(r.errors[:3]) or "no error text"
                failures.append(f"{config} {scenario}: {r.failed} of {r.workload.num_prompts} requests failed at "
                                f"concurrency {r.workload.concurrency}: {errs}")
        if failures:
            return Checked([], failures)
        path, store = self.store(provenance.hardware, provenance.model)
        names = list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]
        prov = provenance.with_workload(workload_of(results[0].workload)) if results else provenance
        prov = prov.with_cotenants([c for r in results for c in r.cotenants])
        prov = prov.with_power(merged_power([r.energy for r in results if r.energy is not None]))
        labels = [r.launch or "0" for r in results]
        behind = _behind(results, self.statistics.lag_limit)
        checked = self._judge(config, scenario, {m: [r.metrics[m] for r in results] for m in names}, labels,
                              [r.arm for r in results], store, path, prov, self.look(look), behind,
                              _client_bound(results), _apart(results), held.observed([r.metrics for r in results]))
        _tails(checked.verdicts, results)
        self._slo_rule(checked, results)
        return checked

    def _slo_rule(self, checked: Checked, results: Sequence[BenchResult]) -> None:
        """An SLO attainment that the reference met and every launch tonight misses beyond doubt is a regression on
        exact binomial bounds (judge/slo.py), whatever a t-test over identical reference launches left open."""
        tonight = [r.slo for r in results if r.slo is not None]
        for v in checked.verdicts:
            if v.metric != slo.ATTAINMENT or v.bound is None or v.verdict not in JUDGED or len(tonight) < len(results):
                continue
            why = slo.missed_beyond_doubt(v.bound.value, tonight, self.statistics.alpha)
            if why is not None:
                v.verdict, v.note, v.stat, v.alone = Kind.REGRESSION, why, Test(), None
            elif v.verdict == Kind.REGRESSION:
                v.verdict, v.note = Kind.UNRESOLVED, ("below its floor, but not beyond doubt on exact bounds (the SLO "
                                                      "is missed beyond doubt or not at all): " + tonight[-1].line())

    def judge_values(self, config: str, scenario: str, metric: str, samples: Sequence[float],
                     provenance: Provenance, launch: str = "0", inputs: Sequence[tuple[str, str]] = ()) -> Checked:
        """A derived metric (e.g. scaling_2x), all from one launch. It is judged only where every input it comes from
        (`inputs`: scenario and metric of this config) was judged: a ratio of a figure the emulator or the client
        set is that figure's, not the server's."""
        path, store = self.store(provenance.hardware, provenance.model)
        checked = self._judge(config, scenario, {metric: list(samples)}, [launch] * len(samples),
                              [""] * len(samples), store, path, provenance, self.look(1), None)
        unjudged = [u for sc, m in inputs if (u := self.latest(config, sc, m)) is not None and u.verdict in NOT_JUDGED]
        for v in checked.verdicts:
            if unjudged and v.verdict in JUDGED:
                u = unjudged[0]
                v.verdict = u.verdict
                v.note = f"derived from {u.scenario} {u.metric}, which was {u.verdict}: not judged either"
                v.stat = Test()
        if unjudged:
            checked.failures = [f for f in checked.failures if f" {metric} " not in f]
        return checked

    def latest(self, config: str, scenario: str, metric: str) -> Verdict | None:
        """The newest verdict this run made of one series (None: not measured yet)."""
        return next((v for v in reversed(self.verdicts)
                     if (v.config, v.scenario, v.metric) == (config, scenario, metric)), None)

    def against_reference(self, config: str, scenario: str, metric: str, samples: list[float], tonight: list[float],
                           bound: Bound, provenance: Provenance, look: Look) -> Verdict:
        """Tonight's launches with the earlier nights' of the same sample (build, workload, reference), one
        sequential test whose looks count across nights; a verdict an earlier night reached stands."""
        sample = carry.Sample(provenance.build, carry.digest(provenance.workload),
                              carry.digest([list(bound.launches), bound.tolerance, bound.value]))
        key = (config, scenario, metric)
        prior = self.prior(provenance, key, sample)
        more = self.grown(provenance, key, sample.ref, bound) if bound.build != provenance.build else ()
        used = replace(bound, launches=(*bound.launches, *more))
        self._runs_of(provenance)  # the history's nights join the variance model
        spread = self.spread(*self.store(provenance.hardware, provenance.model), key)
        alone = decide.against_reference(config, scenario, metric, samples, tonight, used, provenance.workload, look,
                                         spread)
        v = decide.carried(alone, prior, lambda pooled, at: decide.against_reference(
            config, scenario, metric, samples, pooled, used, provenance.workload, at, spread), look)
        v.bound = bound  # what the file holds; the test's reference is in its stat
        if v.stat:
            v.stat["sample"] = {"build": sample.build, "workload": sample.workload, "ref": sample.ref}
            if more:
                v.stat["grown"] = list(more)
                v.stat["against"] = (f"{len(used.launches)} reference launches ({len(bound.launches)} recorded, "
                                     f"{len(more)} of later nights of its build)")
        return v

    def grown(self, provenance: Provenance, key: tuple[str, str, str], ref: str, bound: Bound) -> tuple[float, ...]:
        """Launches later nights made of the reference's build against it (judge/carry.py grown); none without a
        history or a recorded build."""
        if self.history is None or not bound.build:
            return ()
        return carry.grown(self._runs_of(provenance), key, ref, bound.build)

    def _judge(self, config: str, scenario: str, values: dict[str, list[float]], labels: list[str],
               arms: list[str], store: BaselineStore, path: Path, provenance: Provenance, look: Look,
               behind: str | None, client: Callable[[str, float], str | None] | None = None,
               apart: tuple[Kind, str] | None = None, observed: dict[str, float] | None = None) -> Checked:
        out: list[Verdict] = []
        failures: list[str] = []
        ab = self.statistics.ab
        for metric, samples in values.items():
            bound = store.bound(config, scenario, metric)
            if metric == slo.ATTAINMENT:
                # A share of requests: its exact binomial bounds judge it against its floor (_slo_rule), in an A/B
                # run too, never a t-test on the logs of launches (a launch with no request within the SLO has none).
                v = judge(config, scenario, metric, samples, bound, workload=provenance.workload)
                if bound is not None and behind is not None and v.verdict in JUDGED:
                    # The requests' TTFT and TPOT carry the host's delay when the emulator fell behind its model.
                    v.verdict, v.note = Kind.EMULATOR_BOUND, behind
            elif ab and any(arms):
                # By the arm (the position in the ABBA block), not the build's name: an A/A run (base,base) has one
                # name in both arms, and keyed by it each arm was the pooled launches, compared with themselves.
                pick = {arm: [(x, lab) for x, lab, r in zip(samples, labels, arms, strict=True) if r == arm]
                        for arm in ("A", "B")}
                a = per_launch([x for x, _ in pick["A"]], [lab for _, lab in pick["A"]])
                b_samples = [x for x, _ in pick["B"]]
                b = per_launch(b_samples, [lab for _, lab in pick["B"]])
                v = decide.ab(config, scenario, metric, a, b, ab, b_samples, look,
                              pooled=self.spread(path, store, (config, scenario, metric)))
            elif behind is not None:
                # A series with no reference yet too: a figure of the host must not become one (it read `new` and
                # --update-baselines recorded a c1024 p99 TTFT the same run called emulator-bound).
                v = judge(config, scenario, metric, samples, bound, workload=provenance.workload)
                if v.verdict != Kind.WORKLOAD_CHANGED:
                    v.verdict, v.note = Kind.EMULATOR_BOUND, behind
            elif bound is None or bound.provisional:
                v = judge(config, scenario, metric, samples, bound, workload=provenance.workload)
                v.launches = per_launch(samples, labels)
            else:
                v = self.against_reference(config, scenario, metric, samples, per_launch(samples, labels), bound,
                                            provenance, look)
            tolerance = bound.threshold() if bound is not None else store.default_tolerance()
            starved = client(metric, tolerance) if client is not None and not ab else None
            if starved and v.verdict in JUDGED:
                # Never a regression and never a pass: the client, not the server, set this figure. (A new metric
                # stays new: --update-baselines runs alone on the box, and the entry's provenance keeps the figures.)
                v.verdict, v.note = Kind.CLIENT_BOUND, starved
            if apart is not None and apart[0] == Kind.INVALID:
                # Whatever the figure says, it is not the build's speed: the build answers wrong. Never recorded.
                was = str(v.verdict) + (f", {v.delta * 100:+.1f}% from its bound" if v.delta is not None else "")
                v.verdict, v.note = Kind.INVALID, f"{apart[1]} (the figure alone would read {was})"
                v.reason = Reason(Kind.INVALID, _wrong(apart[1]), f"the figure alone would read {was}")
            elif apart is not None and v.verdict in (*JUDGED, Kind.NEW):
                # Never a regression, never a pass, never recorded: the GPU was slowed for heat or a power brake.
                v.verdict, v.note = apart
            elif observed and v.verdict in (*JUDGED, Kind.NEW, *HOST_BOUND) and (miss := held.check(
                    provenance.workload or {}, observed, ((bound.workload or {}).get("observed") if bound else None))) \
                    and (v.verdict not in HOST_BOUND or miss[0] == Kind.WORKLOAD_DRIFT):
                # Another workload than the one asked or recorded: neither faster nor slower, never recorded. The
                # model's thinking drifting is news whatever the host did (a busy client made mean TTFT client-bound
                # and would have hidden it); what a busy host holds back (arrivals) stays the host's.
                v.verdict, v.note = Kind(miss[0]), miss[1]
                v.reason = Reason(miss[0], miss[2])
            elif v.verdict in (Kind.REGRESSION, Kind.IMPROVEMENT, Kind.UNRESOLVED) and bound is not None and \
                    (cause := power_change(bound.power, provenance.power)):
                # At the power cap under load is normal; a cap or a limit that moved since the reference is news.
                v.note = f"{v.note}; likely cause: {cause}" if v.note else f"likely cause: {cause}"
            if observed:  # kept with the workload and recorded with the bound: tomorrow is held to it
                v.workload = {**v.workload, "observed": observed}
            v.provenance = provenance.as_entry()
            v.model = provenance.model
            out.append(v)
            # A regression, provisional or statistical, fails its gate item at the end of the run (report/gateitems.py).
            if v.verdict == Kind.NEW and self.strict and not ab:
                failures.append(v.line() + f"; --glm5-strict-baselines needs an entry in {path}")
        if not store.has_config(config) and all(v.verdict == Kind.NEW for v in out) and not ab:
            loud = (f"NO BASELINES: {config} has no entry in {path} (hardware {provenance.hardware}, model key "
                    f"{model_key(provenance.model)} of {provenance.model}): every metric reads new, nothing is gated")
            for v in out:
                v.note, v.reason = loud, Reason(NO_BASELINES, loud)
            if self.require:
                failures.append(loud + "; record them with --update-baselines, or set --glm5-baselines / the "
                                "hardware key to where they are (this fails under CI=true or "
                                "--glm5-require-baselines)")
        # Unresolved: another launch may decide it. A regression seen on one launch only is confirmed on a second (a
        # host hiccup hits one measurement); requiring more evidence never raises the false-alarm rate.
        # A series tonight's looks cannot settle (futile: its note says what would) asks for none; a
        # regression its own test found but the run-wide decision, as it stands, does not confirm asks for more.
        undecided = self.undecided(out, look)
        if self.strict and not undecided:
            failures += [v.line() + "; --glm5-strict-baselines fails what cannot be decided" for v in out
                         if v.verdict == Kind.UNRESOLVED]
        return Checked(out, failures, undecided)

    def undecided(self, out: Sequence[Verdict], look: Look) -> bool:
        """Whether another launch of the config tonight may decide one of these verdicts: a series left unresolved
        that tonight's looks can still settle (a futile one's note says what would; with a history only a drop
        beyond the tolerance), a regression seen on one launch, or one the run-wide decision as it stands does not
        confirm; never at the last look."""
        carries = self.history is not None and not self.statistics.ab

        def wants(v: Verdict) -> bool:
            if not v.stat:
                return False
            if v.verdict == Kind.REGRESSION:
                return int(v.stat.get("n_new", len(v.launches))) < 2
            if v.verdict != Kind.UNRESOLVED or v.stat.get("futile"):
                return False
            # With a history, a series within the tolerance waits for its config's next night (that launch comes
            # anyway); a drop beyond it is confirmed or cleared tonight while the budget allows.
            return not carries or -float(v.stat.get("gain", 0.0)) > float(v.stat.get("tolerance", 0.0))

        return not look.last and (any(wants(v) for v in out) or not self._confirmed(out))

    def _confirmed(self, out: Sequence[Verdict]) -> bool:
        """Whether the run-wide decision as it stands (family.family over every config judged so far) confirms
        each regression among `out`: rounds follow the family decision, not each series' own test."""
        mine = {(v.config, v.scenario, v.metric) for v in out if v.verdict == Kind.REGRESSION and v.stat}
        if not mine or self.statistics.ab:
            return True
        others = [v for v in self.verdicts if (v.config, v.scenario, v.metric) not in
                  {(o.config, o.scenario, o.metric) for o in out}]
        fam = family.family([*others, *out], self.statistics.alpha)
        return all(v.verdict == Kind.REGRESSION for v in fam.verdicts if (v.config, v.scenario, v.metric) in mine)

    def record(self, config: str, scenario: str, results: Sequence[BenchResult], checked: Checked) -> None:
        """Keep a scenario's final verdicts and results; judge the config against its compare_to config."""
        self.results[(config, scenario)] = list(results)
        self.verdicts.extend(checked.verdicts)
        if not self.statistics.ab and results:  # a derived metric (no results of its own) has no launches to test
            self.versus.extend(self._versus(config, scenario, checked.verdicts))

    def reference_short(self, config: str, scenario: str, results: Sequence[BenchResult],
                        metrics: Sequence[str] | None, provenance: Provenance) -> bool:
        """Recording: whether these launches are still too few to be a reference that resolves each metric's
        tolerance at the CV they show within a night's looks (80% power; decide.to_resolve)."""
        _, store = self.store(provenance.hardware, provenance.model)
        labels = [r.launch or "0" for r in results]
        looks = self.per_night()
        for metric in list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]:
            if metric == slo.ATTAINMENT:
                continue  # judged on exact bounds over its requests: no reference spread to resolve
            values = per_launch([r.metrics[metric] for r in results], labels)
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

    def replace(self, config: str, scenario: str, results: Sequence[BenchResult], checked: Checked,
                test: str) -> None:
        """A round's verdicts of a scenario in place of the earlier ones (same metrics), keeping the test that
        measured it first; its compare_to verdicts are made again."""
        metrics = {v.metric for v in checked.verdicts}
        test = test or next((v.test for v in self.verdicts if (v.config, v.scenario) == (config, scenario)
                             and v.metric in metrics and v.test), "")
        self.verdicts = [v for v in self.verdicts
                         if not ((v.config, v.scenario) == (config, scenario) and v.metric in metrics)]
        self.versus = [v for v in self.versus
                       if not ((v.config, v.scenario) == (config, scenario) and v.metric in metrics)]
        for v in checked.verdicts:
            v.test = test
        self.record(config, scenario, results, checked)
        for v in self.versus:
            if (v.config, v.scenario) == (config, scenario) and v.metric in metrics:
                v.test = test

    def _versus(self, config: str, scenario: str, verdicts: list[Verdict]) -> list[Verdict]:
        return versus_of(config, scenario, verdicts, self.verdicts, self.references, self.statistics)


def versus_of(config: str, scenario: str, verdicts: Sequence[Verdict], everything: Sequence[Verdict],
              references: dict[str, Reference], statistics: Statistics) -> list[Verdict]:
    """A config's verdicts of one scenario against its compare_to config's, where both have launch values."""
    reference = references.get(config)
    ref = reference.config if reference is not None else None
    if ref is None or ref == config:
        return []
    mine = {v.metric: v for v in verdicts}
    theirs = {v.metric: v for v in everything if v.config == ref and v.scenario == scenario}
    out = []
    for metric, v in mine.items():
        r = theirs.get(metric)
        if r is None or not v.launches or not r.launches or v.verdict in NOT_JUDGED \
                or r.verdict in NOT_JUDGED:
            continue
        prior = [list(b.launches) for b in (v.bound, r.bound) if b is not None]
        tolerance = v.bound.tolerance if v.bound is not None else decide.AB_TOLERANCE
        lent = v.stat.get("pooled") if v.stat else None  # what the family lent this config's own test
        versus = decide.against_config(config, scenario, metric, v.launches, r.launches, ref, prior, tolerance,
                                       Look(statistics.alpha, effect=statistics.effect),
                                       bool(reference and reference.expected_slower),
                                       Spread.from_dict(lent) if isinstance(lent, dict) else None)
        versus.test = v.test  # the test that measured this config's side: its gate item fails on a regression
        out.append(versus)
    return out


def versus_all(verdicts: Sequence[Verdict], references: dict[str, Reference], statistics: Statistics
               ) -> list[Verdict]:
    """Every config against its reference, from verdicts measured anywhere (xdist workers, shards): what a run on
    one process computes as it goes. Derived metrics (no workload of their own) have no launches to test."""
    if statistics.ab:
        return []
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        if v.workload:
            groups.setdefault((v.config, v.scenario), []).append(v)
    return [x for (config, scenario), vs in groups.items()
            for x in versus_of(config, scenario, vs, verdicts, references, statistics)]


def references_of(configs: Mapping[str, ServerConfig]) -> dict[str, Reference]:
    """Each config's compare_to reference config, from the configs file."""
    return {n: Reference(ref, c.expected_slower) for n, c in configs.items() if (ref := c.compare_to) is not None}
