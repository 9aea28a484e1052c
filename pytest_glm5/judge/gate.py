"""The run's gate: results per config and scenario, verdicts against baselines, and baseline updates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..configs import ServerConfig
from ..load.types import BEHIND, BenchResult, Workload, dataset_identity, trace_identity
from ..settings import Settings
from ..telemetry.energy import merged_power
from . import admission, carry, decide, family, slo, suspects
from .admission import JUDGED
from .baselines import BaselineStore, judge, model_key
from .decide import per_launch
from .looks import Look
from .provenance import Provenance
from .references import ReferenceBook
from .stats import DEFAULT_ALPHA, DEFAULT_EFFECT
from .tails import judge_tails
from .variance import Spread
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
)


def _behind(results: Sequence[BenchResult], limit: float) -> str | None:
    """Why these runs measured the host, not the emulated model (None: the emulator kept up, or it is not one)."""
    for r in results:
        duration = r.metrics.get("duration", 0.0)
        if r.lag_s is not None and duration > 0 and r.lag_s / duration > limit:
            return (f"the emulator fell behind its own model for {r.lag_s / duration * 100:.0f}% of the run (its "
                    "/metrics sglang:sim_behind_seconds_total): the CPU it shares with the client was measured, not "
                    "the model; not judged (raise --glm5-sim-time-scale for this point)")
    return None


@dataclass(frozen=True)
class Reference:
    """A config's reference config (its `compare_to`) and whether it is meant to be slower than it."""

    config: str
    expected_slower: bool = False


def workload_of(workload: Workload) -> dict[str, object]:
    """The part of a Workload that a bound depends on (a key at its unset value, as thinking outside chat, is left
    out: recorded workloads and carried samples stay as they were, and a TOML file has no null)."""
    out = {k: getattr(workload, k) for k in WORKLOAD_KEYS
           if k not in WORKLOAD_UNSET or getattr(workload, k) != WORKLOAD_UNSET[k]}
    if workload.trace:
        out["trace"] = trace_identity(workload.trace)
    if workload.dataset:
        out["dataset"] = dataset_identity(workload.dataset)
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
    launches: int = 1  # --glm5-launches: the launches every config gets before any round

    @classmethod
    def from_settings(cls, s: Settings) -> Statistics:
        """--glm5-alpha, --glm5-effect, --glm5-max-repeats, --glm5-ab and --glm5-launches."""
        return cls(alpha=s.alpha, effect=s.effect, max_repeats=s.max_repeats, ab=s.ab, launches=s.launches)

    # The one launch count rule, read by the plan (night/plan.py), the rounds (perf/fixture.py) and the looks.
    @property
    def planned(self) -> int:
        """The launches every config gets: --glm5-launches, or one ABBA block (4) under --glm5-ab."""
        return 4 if self.ab else self.launches

    @property
    def most(self) -> int:
        """The launches a config may get tonight, rounds included: --glm5-max-repeats new launches (default 5), or
        under --glm5-ab that many a arm (default 8), both arms."""
        return 2 * (self.max_repeats or 8) if self.ab else (self.max_repeats or 5)

    @property
    def per_night(self) -> int:
        """The looks one night may take of a series: a launch each, or an ABBA block each under --glm5-ab."""
        return max(1, -(-self.most // 4)) if self.ab else self.most

    def to_dict(self) -> dict[str, object]:
        """As the run document keeps it."""
        return {"alpha": self.alpha, "effect": self.effect, "max_repeats": self.max_repeats,
                "ab": list(self.ab) if self.ab else None}


def across_nights(book: ReferenceBook, key: tuple[str, str, str], samples: list[float], tonight: list[float],
                  bound: Bound, provenance: Provenance, look: Look) -> Verdict:
    """Tonight's launches with the earlier nights' of the same sample (build, workload, reference), one sequential
    test whose looks count across nights, against the reference the book grew; a verdict an earlier night reached
    stands."""
    config, scenario, metric = key
    on = book.against(provenance, key, bound)
    used, more = on.used, on.grown
    spread = book.spread(*book.store(provenance.hardware, provenance.model), key)
    extra = on.box.variance if on.box is not None else 0.0  # a moved reference carries the shift's error
    alone = decide.against_reference(config, scenario, metric, samples, tonight, used, provenance.workload, look,
                                     spread, extra)
    v = decide.carried(alone, on.prior, lambda pooled, at: decide.against_reference(
        config, scenario, metric, samples, pooled, used, provenance.workload, at, spread, extra), look)
    v.bound = bound  # what the file holds; the test's reference is in its stat
    if v.stat:
        v.stat["sample"] = {"build": on.sample.build, "workload": on.sample.workload, "ref": on.sample.ref}
        if more:
            v.stat["grown"] = list(more)
            v.stat["against"] = (f"{len(used.launches)} reference launches ({len(bound.launches)} recorded, "
                                 f"{len(more)} of later nights of its build)")
        if on.box is not None:  # the reference the test used, moved by the box's shift (judge/box.py)
            v.stat["box"], v.stat["reference"] = on.box.to_dict(), list(used.launches)
            v.stat["against"] = f"{len(used.launches)} reference launches moved by the box ({on.box.line()})"
    return v


def _arms(samples: Sequence[float], labels: Sequence[str], arms: Sequence[str]
          ) -> tuple[list[float], list[float], list[float]]:
    """An A/B run's values by arm (the position in the ABBA block, not the build's name: an A/A run has one name
    in both arms): A's per launch, B's per launch, and B's samples."""
    pick = {arm: [(x, lab) for x, lab, r in zip(samples, labels, arms, strict=True) if r == arm] for arm in "AB"}
    b_samples = [x for x, _ in pick["B"]]
    return (per_launch([x for x, _ in pick["A"]], [lab for _, lab in pick["A"]]), per_launch(
        b_samples, [lab for _, lab in pick["B"]]), b_samples)


def _no_baselines(config: str, out: Sequence[Verdict], store: BaselineStore, path: Path,
                  provenance: Provenance) -> str | None:
    """The loud line of a config the baselines file holds nothing for (every metric new: nothing is gated), set on
    each of its verdicts as their reason; None where the file has an entry."""
    if store.has_config(config) or not all(v.verdict == Kind.NEW for v in out):
        return None
    loud = (f"NO BASELINES: {config} has no entry in {path} (hardware {provenance.hardware}, model key "
            f"{model_key(provenance.model)} of {provenance.model}): every metric reads new, nothing is gated")
    for v in out:
        v.note, v.reason = loud, Reason(NO_BASELINES, loud)
    return loud


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
    book: ReferenceBook = field(init=False)  # where each series' reference comes from (judge/references.py)

    def __post_init__(self) -> None:
        self.book = ReferenceBook(self.root, self.stores, self.history)

    def per_night(self) -> int:
        """The looks one night may take of a series (Statistics.per_night)."""
        return self.statistics.per_night

    def look(self, look: int) -> Look:
        """The sequential look: A/B adds ABBA blocks (two launches per arm), the nightly one launch at a time. With a
        history a sample's launches carry across nights for up to carry.SAMPLE_LOOKS looks, and alpha is spent over
        tonight's looks (looks.Look.night)."""
        st = self.statistics
        tonight = self.per_night()
        nights = self.history is not None and not st.ab
        looks = max(tonight, carry.SAMPLE_LOOKS) if nights else tonight
        return Look(st.alpha, min(look, looks), looks, st.effect, night=(look, tonight) if nights else None)

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
        path, store = self.book.store(provenance.hardware, provenance.model)
        names = list(metrics or []) or store.metrics_of(config, scenario) or ["output_throughput"]
        prov = provenance.with_workload(workload_of(results[0].workload)) if results else provenance
        prov = prov.with_cotenants([c for r in results for c in r.cotenants])
        prov = prov.with_power(merged_power([r.energy for r in results if r.energy is not None]))
        labels = [r.launch or "0" for r in results]
        behind = _behind(results, self.statistics.lag_limit)
        ev = admission.evidence(results, prov.workload, prov.power, bool(self.statistics.ab))
        checked = self._judge(config, scenario, {m: [r.metrics[m] for r in results] for m in names}, labels,
                              [r.arm for r in results], store, path, prov, self.look(look), behind, ev)
        judge_tails(checked.verdicts, results)
        tonight = [r.slo for r in results if r.slo is not None]
        slo.judge_attainment(checked.verdicts, tonight, len(tonight) >= len(results), self.statistics.alpha)
        return checked

    def judge_values(self, config: str, scenario: str, metric: str, samples: Sequence[float],
                     provenance: Provenance, launch: str = "0", inputs: Sequence[tuple[str, str]] = ()) -> Checked:
        """A derived metric (e.g. scaling_2x), all from one launch. It is judged only where every input it comes from
        (`inputs`: scenario and metric of this config) was judged: a ratio of a figure the emulator or the client
        set is that figure's, not the server's."""
        path, store = self.book.store(provenance.hardware, provenance.model)
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
        """Tonight's launches against the series' reference with what earlier nights left (`across_nights`)."""
        return across_nights(self.book, (config, scenario, metric), samples, tonight, bound, provenance, look)

    def _judge(self, config: str, scenario: str, values: dict[str, list[float]], labels: list[str],
               arms: list[str], store: BaselineStore, path: Path, provenance: Provenance, look: Look,
               behind: str | None, ev: admission.Evidence | None = None) -> Checked:
        ev = ev if ev is not None else admission.Evidence(asked=provenance.workload, power=provenance.power)
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
                # By the arm, not the build's name: keyed by it, an A/A run's arms were one pool against itself.
                a, b, b_samples = _arms(samples, labels, arms)
                v = decide.ab(config, scenario, metric, a, b, ab, b_samples, look,
                              pooled=self.book.spread(path, store, (config, scenario, metric)))
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
            admission.admit(v, bound, tolerance, ev)
            if ev.observed:  # kept with the workload and recorded with the bound: tomorrow is held to it
                v.workload = {**v.workload, "observed": dict(ev.observed)}
            v.provenance = provenance.as_entry()
            v.model = provenance.model
            out.append(v)
            # A regression, provisional or statistical, fails its gate item at the end of the run (report/gateitems.py).
            if v.verdict == Kind.NEW and self.strict and not ab:
                failures.append(v.line() + f"; --glm5-strict-baselines needs an entry in {path}")
        if not ab and (loud := _no_baselines(config, out, store, path, provenance)) and self.require:
            failures.append(loud + "; record them with --update-baselines, or set --glm5-baselines / the hardware "
                            "key to where they are (this fails under CI=true or --glm5-require-baselines)")
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
        """Whether another launch of the config tonight may decide one of these verdicts (decide.wants_launch), or
        the run-wide decision as it stands does not confirm a regression among them; never at the last look."""
        carries = self.history is not None and not self.statistics.ab
        if look.last:
            return False
        if any(decide.wants_launch(v, carries) for v in out) and (not carries or suspects.drops_together(out)):
            return True
        mine = {(v.config, v.scenario, v.metric) for v in out}
        others = [v for v in self.verdicts if (v.config, v.scenario, v.metric) not in mine]
        return not self.statistics.ab and not family.confirms(others, out, self.statistics.alpha)

    def pressing(self, config: str) -> bool:
        """Whether a round of this config is worth more tonight than a config merely due (suspects.pressing): with a
        history only, where a config left out runs on a later night."""
        if self.history is None or self.statistics.ab:
            return False
        return suspects.pressing([v for v in self.verdicts if v.config == config], self.statistics.alpha)

    def record(self, config: str, scenario: str, results: Sequence[BenchResult], checked: Checked) -> None:
        """Keep a scenario's final verdicts and results; judge the config against its compare_to config."""
        self.results[(config, scenario)] = list(results)
        self.verdicts.extend(checked.verdicts)
        if not self.statistics.ab and results:  # a derived metric (no results of its own) has no launches to test
            self.versus.extend(self._versus(config, scenario, checked.verdicts))

    def reference_short(self, config: str, scenario: str, results: Sequence[BenchResult],
                        metrics: Sequence[str] | None, provenance: Provenance) -> bool:
        """Recording: whether these launches are still too few to be a reference (ReferenceBook.reference_short)
        within a night's looks."""
        labels = [r.launch or "0" for r in results]
        return self.book.reference_short(config, scenario, lambda m: per_launch([r.metrics[m] for r in results],
                                                                                  labels),
                                         metrics, provenance, self.per_night())

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
