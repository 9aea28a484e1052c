"""One variance model of the box: each series' launch-to-launch variance on the log scale, pooled across the series of
its family (the same scenario and metric on every config; else the metric; else the whole file) with empirical-Bayes
shrinkage, as limma moderates a gene's variance (Smyth 2004).

Why: a series that estimates its spread from its own ~12 reference launches tests on 11 degrees of freedom, where a
one-sided t at p 1e-4 needs 5.45; pooled over a family of ten such series it needs about 3.8, which is worth about twice
the launches. Why shrinkage and not a plain pool: a series with a stable history of its own keeps its own variance
(its weight is its degrees of freedom), a young one borrows its family's, and how much the family lends (its prior
degrees of freedom d0) is estimated from how much the series' variances disagree: where they agree beyond what their
own sampling explains, d0 is large; where they differ, small. The moderated variance of a series is

    s~2 = (d0 s0^2 + d s^2) / (d0 + d), tested on d0 + d degrees of freedom,

with s0^2 and d0 fitted to the family's log variances by moments (limma's fitFDist). Honest degrees of freedom: d0 is
never more than the family's own degrees of freedom besides the series (a family cannot lend more evidence than it
has). Robust to a bad launch: a launch further than CLIP family standard deviations from its series' median is
clipped there before the series' variance is taken, so one launch at -15% on a box of CV 2% does not double a month of
variances.

    >>> m = VarianceModel.fit({("single", "tok_s", f"c{i}"): [100.0, 102.0, 98.0, 101.0, 99.0] for i in range(6)})
    >>> sp = m.spread("single", "tok_s", "c0")
    >>> sp.describe()
    'pooled: 6 series, 30 launches, df 24'
    >>> round(sp.cv, 4), sp.df
    (0.0177, 24)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .baselines import BaselineStore

# A launch further than this many family standard deviations from its series' median is clipped there when the
# series' variance is estimated (a normal launch lies beyond 4 sd about once in 16,000).
CLIP = 4.0
TRIM = 3.0  # a series' log variance this many robust sd from its family's median does not shape the family's prior
MIN_SERIES = 3  # a family of fewer series cannot say how much its variances disagree: the next wider family is used
# The level at which a spread (the family's nights, tonight's launches) is found wider than the one it replaces.
NOISIER = 0.05

Key = tuple[str, str, str]  # scenario, metric, config


@dataclass(frozen=True)
class Spread:
    """What the family lends one series: its prior variance (log scale) and degrees of freedom, and where they came
    from. A series' test adds its own sum of squares and degrees of freedom to these."""

    var0: float
    df0: float
    series: int
    launches: int
    family: str
    own_var: float = math.nan
    own_df: int = 0
    nights_var: float = math.nan  # the series' own samples over the nights of its history (not its reference)
    nights_df: int = 0
    box_var: float = math.nan  # every sample of the family's nights, pooled: the nights' spread, not the references'
    box_df: int = 0

    @property
    def noisier(self) -> bool:
        """The family's nights spread wider than its prior (mostly its references' sessions) beyond chance: a
        one-sided F test at NOISIER."""
        from scipy import stats as sps
        if self.box_df <= 0 or not self.var0 > 0 or not self.df0 > 0 or not math.isfinite(self.box_var):
            return False
        df0 = min(self.df0, 1e6)
        return self.box_var / self.var0 > float(sps.f.ppf(1 - NOISIER, self.box_df, df0))

    @property
    def lent(self) -> tuple[float, float]:
        """What a test of this series adds to its reference's and tonight's spread: the family's prior, or where the
        family's nights spread wider (`noisier`) the nights' pooled spread in its place, and the series' own nights
        (a reference recorded in one quiet session does not speak for noisier nights)."""
        var0, df0 = (self.box_var, float(self.box_df)) if self.noisier else (self.var0, self.df0)
        nights = self.nights_var * self.nights_df if self.nights_df > 0 else 0.0
        df = df0 + self.nights_df
        return ((df0 * var0 + nights) / df if df > 0 else math.nan), df

    @property
    def df(self) -> int:
        """The moderated variance's degrees of freedom: the family's lent ones and the series' own."""
        return (round(self.df0) if math.isfinite(self.df0) else 0) + self.own_df

    @property
    def var(self) -> float:
        """The moderated variance of the series' launches on the log scale."""
        own = self.own_var * self.own_df if self.own_df > 0 else 0.0
        return (self.df0 * self.var0 + own) / (self.df0 + self.own_df) if self.df0 + self.own_df > 0 else math.nan

    @property
    def cv(self) -> float:
        """The moderated launch-to-launch CV (the log-scale standard deviation)."""
        return math.sqrt(self.var)

    def describe(self) -> str:
        """`pooled: 96 series, 310 launches, df 214`: where a verdict's variance came from."""
        return f"pooled: {self.series} series, {self.launches} launches, df {self.df}"

    def to_dict(self) -> dict[str, object]:
        """As a report's JSON keeps it."""
        return {"var0": self.var0, "df0": self.df0, "series": self.series, "launches": self.launches,
                "family": self.family, "own_var": self.own_var, "own_df": self.own_df, "nights_var": self.nights_var,
                "nights_df": self.nights_df, "box_var": self.box_var, "box_df": self.box_df, "cv": self.cv,
                "df": self.df}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Spread | None:
        """From to_dict's form (a report read back); None where it is not one."""
        try:
            return cls(float(d["var0"]), float(d["df0"]), int(d["series"]), int(d["launches"]), str(d["family"]),
                       float(d.get("own_var", math.nan)), int(d.get("own_df", 0)),
                       float(d.get("nights_var", math.nan)), int(d.get("nights_df", 0)),
                       float(d.get("box_var", math.nan)), int(d.get("box_df", 0)))
        except (KeyError, TypeError, ValueError):
            return None


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0 and math.isfinite(v)]


def _clipped_var(logs: Sequence[float], scale: float) -> float:
    """The sample variance of these log values with each further than CLIP x `scale` from their median clipped."""
    med = statistics.median(logs)
    lim = CLIP * scale if scale > 0 else math.inf
    xs = [min(max(x, med - lim), med + lim) for x in logs]
    return statistics.variance(xs)


def fit_prior(variances: Sequence[float], dfs: Sequence[int]) -> tuple[float, float]:
    """limma's fitFDist: the prior variance s0^2 and prior degrees of freedom d0 of sample variances `variances` on
    `dfs` degrees of freedom, by moments of their logs. d0 is inf where they disagree no more than sampling explains."""
    from scipy import special

    pairs = [(s, d) for s, d in zip(variances, dfs, strict=True) if s > 0 and d > 0]
    if not pairs:
        return math.nan, 0.0
    e = [math.log(s) - float(special.digamma(d / 2)) + math.log(d / 2) for s, d in pairs]
    if len(e) >= 2 * MIN_SERIES:
        # Robust (as limma's robust fit): a log variance further than TRIM robust sd from the median (two launches
        # that agreed by luck, a series that crashed half its launches) would decide d0 alone; it is left out.
        med = statistics.median(e)
        mad = 1.4826 * statistics.median(abs(x - med) for x in e)
        if mad > 0:
            keep = [i for i, x in enumerate(e) if abs(x - med) <= TRIM * mad]
            e, pairs = [e[i] for i in keep], [pairs[i] for i in keep]
    mean = sum(e) / len(e)
    if len(e) < 2:
        return math.exp(mean + 0.0), 0.0
    spread = sum((x - mean) ** 2 for x in e) / (len(e) - 1) - sum(float(special.polygamma(1, d / 2))
                                                                   for _, d in pairs) / len(e)
    if spread <= 0:
        return math.exp(mean), math.inf
    d0 = 2 * _trigamma_inverse(spread)
    return math.exp(mean + float(special.digamma(d0 / 2)) - math.log(d0 / 2)), d0


def _trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (y > 0), by limma's Newton iteration."""
    from scipy import special

    if y > 1e7:
        return 1 / math.sqrt(y)
    if y < 1e-6:
        return 1 / y
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = float(special.polygamma(1, x))
        step = tri * (1 - tri / y) / float(special.polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


@dataclass(frozen=True)
class _Member:
    var: float  # over every group of the series: its reference and its nights' samples
    df: int
    nights_var: float  # over its nights' samples alone (nan: none)
    nights_df: int


@dataclass(frozen=True)
class _Family:
    var0: float
    df0: float
    members: dict[str, _Member]
    launches: int
    box_var: float = math.nan  # the members' nights samples pooled
    box_df: int = 0


@dataclass
class VarianceModel:
    """The box's variance model from the launches of every series it knows (a baselines file's references, and each
    sample's launches over the nights of its history): `spread()` answers for one series."""

    by_scenario: dict[tuple[str, str], _Family]
    by_metric: dict[str, _Family]
    whole: _Family | None

    @classmethod
    def fit(cls, launches: Mapping[Key, Sequence[float]]) -> VarianceModel:
        """The model of these series' launch values (scenario, metric, config -> values; two or more count). A
        config named `config@sample` is a sample of that config's nights (nights_of): a group of the same series."""
        by_scenario: dict[tuple[str, str], dict[str, list[_Group]]] = {}
        by_metric: dict[str, dict[str, list[_Group]]] = {}
        whole: dict[str, list[_Group]] = {}
        for (scenario, metric, name), values in launches.items():
            lg = _logs(values)
            if len(lg) < 2:
                continue
            config, _, sample = name.partition("@")
            group = _Group(lg, bool(sample))
            by_scenario.setdefault((scenario, metric), {}).setdefault(config, []).append(group)
            by_metric.setdefault(metric, {}).setdefault(f"{scenario}/{config}", []).append(group)
            whole.setdefault(f"{scenario}/{metric}/{config}", []).append(group)
        return cls({k: f for k, g in by_scenario.items() if (f := _family(g)) is not None},
                   {k: f for k, g in by_metric.items() if (f := _family(g)) is not None}, _family(whole))

    def to_dict(self) -> dict[str, object]:
        """As a report's JSON keeps it: each family's prior (CV and degrees of freedom) and what it was fitted from.

            >>> m = VarianceModel.fit({("single", "tok_s", f"c{i}"): [100.0, 102.0, 98.0] for i in range(3)})
            >>> m.to_dict()["families"][0]
            {'family': 'single tok_s', 'cv0': 0.0267, 'df0': 6.0, 'series': 3, 'launches': 9}
        """
        named = [*((f"{sc} {m}", f) for (sc, m), f in self.by_scenario.items()),
                 *((m, f) for m, f in self.by_metric.items()), *((("every series", self.whole),) if self.whole else ())]
        return {"families": [{"family": name, "cv0": round(math.sqrt(f.var0), 4),
                              "df0": round(min(f.df0, float(sum(m.df for m in f.members.values()))), 1),
                              "series": len(f.members), "launches": f.launches} for name, f in named]}

    def spread(self, scenario: str, metric: str, config: str) -> Spread | None:
        """What the family lends this series (its own variance and df included where the model holds it); None where
        no family of MIN_SERIES series holds it or its kind."""
        for fam, name, member in ((self.by_scenario.get((scenario, metric)), f"{scenario} {metric}", config),
                                  (self.by_metric.get(metric), metric, f"{scenario}/{config}"),
                                  (self.whole, "every series", f"{scenario}/{metric}/{config}")):
            if fam is None:
                continue
            me = fam.members.get(member, _Member(math.nan, 0, math.nan, 0))
            # Honest degrees of freedom: never more than the family holds besides this series.
            others = sum(m.df for key, m in fam.members.items() if key != member)
            return Spread(fam.var0, min(fam.df0, float(others)), len(fam.members), fam.launches, name, me.var,
                          me.df, me.nights_var, me.nights_df, fam.box_var, fam.box_df)
        return None


@dataclass(frozen=True)
class _Group:
    logs: list[float]
    night: bool  # a sample of nights, not a recorded reference


def _family(members: Mapping[str, list[_Group]]) -> _Family | None:
    if len(members) < MIN_SERIES:
        return None
    scale = math.sqrt(statistics.median(statistics.variance(g.logs) for gs in members.values() for g in gs))

    def pooled(groups: Sequence[_Group]) -> tuple[float, int]:
        df = sum(len(g.logs) - 1 for g in groups)
        ss = sum(_clipped_var(g.logs, scale) * (len(g.logs) - 1) for g in groups)
        return (ss / df, df) if df > 0 else (math.nan, 0)

    own = {m: _Member(*pooled(gs), *pooled([g for g in gs if g.night])) for m, gs in members.items()}
    # The prior is fitted from series of three launches or more where MIN_SERIES of them exist: a variance on one
    # degree of freedom says little and, near zero, much on the log scale.
    fitted = [m for m in own.values() if m.df >= 2]
    fitted = fitted if len(fitted) >= MIN_SERIES else list(own.values())
    var0, df0 = fit_prior([m.var for m in fitted], [m.df for m in fitted])
    if not math.isfinite(var0):
        return None
    box = pooled([g for gs in members.values() for g in gs if g.night])
    return _Family(var0, df0, own, sum(len(g.logs) for gs in members.values() for g in gs), *box)


def variance_of(store: BaselineStore, runs: Sequence[Mapping[str, Any]] = ()) -> VarianceModel:
    """The model of every reference a baselines file holds (two launches or more) and of the nights its history
    holds (nights_of): re-estimated as nights arrive, so nights noisier than the session that recorded the
    references widen it."""
    launches: dict[Key, Sequence[float]] = {}
    for config, scenario, metric, _ in store.entries():
        bound = store.bound(config, scenario, metric)
        if bound is not None and len(bound.launches) >= 2:
            launches[(scenario, metric, config)] = bound.launches
    return VarianceModel.fit({**launches, **nights_of(runs)})


def nights_of(runs: Sequence[Mapping[str, Any]]) -> dict[Key, list[float]]:
    """Each sample's launches over the nights of a history (one build, workload and reference: what judge/carry.py
    pools), as a series of the model of its own: `config@build` beside the references' `config`.

        >>> line = {"series": [{"config": "tp8", "scenario": "single", "metric": "tok_s", "launches": [10.1],
        ...                     "build": "b1", "workload": "w", "ref": "r"}]}
        >>> nights_of([line, line])
        {('single', 'tok_s', 'tp8@b1/w/r'): [10.1, 10.1]}
    """
    groups: dict[Key, list[float]] = {}
    for run in runs:
        for e in run.get("series") or []:
            if not isinstance(e, Mapping) or not e.get("build"):
                continue
            xs = [float(x) for x in e.get("launches") or [] if isinstance(x, (int, float)) and x > 0]
            key = (str(e.get("scenario")), str(e.get("metric")),
                   f"{e.get('config')}@{e.get('build')}/{e.get('workload')}/{e.get('ref')}")
            groups.setdefault(key, []).extend(xs)
    return {k: v for k, v in groups.items() if len(v) >= 2}
