"""The run's family decision (`family`): a config is one hypothesis a night, since its series share every launch,
tested by the Cauchy combination of its shared factor's test and its series' own tests; Holm across the configs
judged; within a config it confirms, Benjamini-Hochberg names the series. And which launches and reference a
verdict's test used (`tested`, `reference`), which the night's own spread check reads too (decide.against_the_night).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

from ..metrics import higher_is_better
from ..words import counted
from .stats import benjamini_hochberg, cauchy_combination, compare, holm
from .variance import Spread
from .verdicts import Kind, Test, Verdict

# A launch whose shared factor lies this many standard deviations of launches beyond the others' mean is an outlier
# launch: the config's p is taken with and without it, and the larger decides (a normal launch lies beyond 3 sd
# about once in 740).
OUTLIER = 3.0


def tested(v: Verdict) -> list[float]:
    """The launches a verdict's test used: earlier nights' with tonight's where it carried them, else tonight's."""
    return [float(x) for x in v.stat.get("tested") or v.launches]


def reference(v: Verdict) -> list[float]:
    """The reference launches a verdict's test used: the recorded ones and those later nights of its build grew, or
    the recorded ones as the box reads them now (moved by its shift: judge/box.py)."""
    if v.stat.get("reference"):
        return [float(x) for x in v.stat["reference"]]
    return [*(v.bound.launches if v.bound else ()), *(float(x) for x in v.stat.get("grown") or [])]


def extra(v: Verdict) -> float:
    """The variance a verdict's reference mean carries beyond its launches' (log scale): the standard error, squared,
    of the box's shift it was moved by (judge/box.py); 0 where it was not moved."""
    b = v.stat.get("box") if v.stat else None
    se = float(b.get("se") or 0.0) if isinstance(b, dict) else 0.0
    return se * se if math.isfinite(se) else 0.0


@dataclass
class Family:
    """The family decision of a run: how many series and configs it tested, and the verdicts as decided (copies:
    each changed one keeps what its own test said in `alone`, so shards can be decided again as one run)."""

    size: int
    verdicts: list[Verdict]
    configs: int = 0

    @property
    def confirmed(self) -> list[Verdict]:
        """The regressions the family confirmed: they fail the run."""
        return [v for v in self.verdicts if v.verdict == Kind.REGRESSION and v.stat]


def _config_p(vs: Sequence[Verdict], ps: Sequence[float], worse: bool, q: float,
              drop: int | None = None, rows: _Rows | None = None) -> float:
    """A config's one p: the Cauchy combination of its shared factor's test (half the weight: a drop in every
    series) and of its series' own tests (the other half, shared: a drop in one series alone). `drop`: the same
    without that launch of the config's sample (an outlier launch, `outlier`); `rows`: `_rows(vs)`, built once."""
    rows = rows if rows is not None else _rows(vs)
    if drop is not None:
        same = {id(v) for v in rows.use} if rows is not None else set()
        ps = [_without(v, drop, worse, q) if id(v) in same else p for v, p in zip(vs, ps, strict=True)]
    shared = shared_p(vs, worse, q, drop, rows)
    if shared is None:
        return cauchy_combination(ps)
    return cauchy_combination([shared, *ps], [0.5, *[0.5 / len(ps)] * len(ps)])


@dataclass(frozen=True)
class _Rows:
    """A config's series that share one sample shape, each launch's and each reference launch's log change from the
    series' reference mean (oriented: + is better), in launch order."""

    use: list[Verdict]
    new: list[list[float]]
    ref: list[list[float]]

    def factors(self, rows: Sequence[Sequence[float]], skip: int | None = None) -> list[float]:
        """Each launch's shared factor (its mean oriented log change over the series), `skip` left out."""
        return [sum(r[i] for r in rows) / len(rows) for i in range(len(rows[0])) if i != skip]


def _rows(vs: Sequence[Verdict]) -> _Rows | None:
    own = [v for v in vs if v.stat and v.bound is not None and "compare_to" not in v.stat and "answer" not in v.stat]
    new = {id(v): tested(v) for v in own}
    ref = {id(v): reference(v) for v in own}
    shapes = [(len(new[id(v)]), len(ref[id(v)])) for v in own]
    if not shapes:
        return None
    n, m = max(set(shapes), key=shapes.count)
    use = [v for v, shape in zip(own, shapes, strict=True) if shape == (n, m) and n >= 1 and m >= 1]
    if len(use) < 2 or n + m < 3 or any(x <= 0 for v in use for x in (*new[id(v)], *ref[id(v)])):
        return None

    def centred(v: Verdict, xs: Sequence[float]) -> list[float]:
        base = sum(math.log(x) for x in ref[id(v)]) / m
        sign = 1.0 if higher_is_better(v.metric) else -1.0
        return [sign * (math.log(x) - base) for x in xs]

    return _Rows(use, [centred(v, new[id(v)]) for v in use], [centred(v, ref[id(v)]) for v in use])


def _without(v: Verdict, drop: int, worse: bool, q: float) -> float:
    """A series' p on the run's scale (as p_adj) with launch `drop` of its sample left out."""
    new = [x for i, x in enumerate(tested(v)) if i != drop]
    lent = Spread.from_dict(v.stat["pooled"]) if isinstance(v.stat.get("pooled"), dict) else None
    c = compare(new, reference(v), higher_is_better(v.metric), lent=lent.lent if lent else None, extra=extra(v))
    p = c.p_worse if worse else c.p_better
    level = float(v.stat.get("alpha", q))
    return min(1.0, p * q / level) if level > 0 and not math.isnan(p) else 1.0


def outlier(vs: Sequence[Verdict], worse: bool, rows: _Rows | None = None) -> tuple[int, str] | None:
    """The launch of a config's sample that lies alone beyond the rest: its shared factor more than OUTLIER standard
    deviations (the reference launches' and the other launches' own spread of shared factors) from the mean of the
    others, in the direction judged. A bad launch (a cold clock, a noisy neighbour) moves every series of its config
    at once, so the config's test reads it as a drop; a drop of the build moves every launch, and its launches agree.
    Its index in the sample and a line for the verdict; None where no launch stands apart (or fewer than two).

        >>> from .verdicts import Bound
        >>> ref = (100.0, 104.0, 97.0, 101.0, 99.0, 103.0, 98.0, 100.0)
        >>> def v(m, xs): return Verdict("c", "s", m, 0.0, Bound(m, "floor", 100.0, 0.05, launches=ref),
        ...                              Kind.REGRESSION, launches=list(xs), stat={"alpha": 0.01})
        >>> outlier([v("output_throughput", [100.0, 74.0]), v("total_throughput", [99.0, 76.0])], worse=True)[1]
        'launch 2 of 2 stands apart: -25.2% against -0.7% for the others (8.5 sd of launches)'
        >>> outlier([v("output_throughput", [90.0, 88.0]), v("total_throughput", [91.0, 89.0])], worse=True) is None
        True
    """
    rows = rows if rows is not None else _rows(vs)
    if rows is None or len(rows.new[0]) < 2:
        return None
    ys, xs = rows.factors(rows.new), rows.factors(rows.ref)
    k = min(range(len(ys)), key=lambda i: ys[i] if worse else -ys[i])
    others = [y for i, y in enumerate(ys) if i != k]
    mo = sum(others) / len(others)
    ss = sum((x - sum(xs) / len(xs)) ** 2 for x in xs) + sum((y - mo) ** 2 for y in others)
    df = len(xs) - 1 + len(others) - 1
    if df <= 0 or ss <= 0:
        return None
    sd = math.sqrt(ss / df)
    z = (ys[k] - mo) / (sd * math.sqrt(1 + 1 / len(others)))
    if (-z if worse else z) <= OUTLIER:
        return None
    return k, (f"launch {k + 1} of {len(ys)} stands apart: {math.expm1(ys[k]) * 100:+.1f}% against "
               f"{math.expm1(mo) * 100:+.1f}% for the others ({abs(z):.1f} sd of launches)")


def shared_p(vs: Sequence[Verdict], worse: bool, q: float, drop: int | None = None,
             rows: _Rows | None = None) -> float | None:
    """The p of a config's shared factor, on the scale of the run's alpha q: each launch's mean over the config's
    own series of its log change from that series' reference mean (oriented: + is better), tonight's launches
    against the reference's, one t-test. A slow launch moves every series of its config, so a drop in all of them
    shows here with the noise of about one series; None where fewer than two series share their launch counts.
    `drop`: that launch of the sample left out; `rows`: `_rows(vs)` where the caller built it."""
    rows = rows if rows is not None else _rows(vs)
    if rows is None:
        return None
    y = [math.exp(f) for f in rows.factors(rows.new, drop)]
    x = [math.exp(f) for f in rows.factors(rows.ref)]
    if not y:
        return None
    # Each series' reference moved by its kind's shift carries that shift's error; taken as one error (they rest on
    # the same launches), the factor's reference carries their mean.
    c = compare(y, x, higher_is_better=True, extra=(sum(math.sqrt(extra(v)) for v in rows.use) / len(rows.use)) ** 2)
    if not c.testable:
        return None
    level = min(float(v.stat.get("alpha", q)) for v in rows.use)
    return min(1.0, (c.p_worse if worse else c.p_better) * q / level) if level > 0 else 1.0


def _one_config(vs: Sequence[Verdict], own: Sequence[float], worse: bool, q: float) -> tuple[float, str | None]:
    """A config's p (`_config_p`), taken at the larger of its p with and without an outlier launch of its sample
    (`outlier`), and that outlier's line where it decided."""
    rows = _rows(vs)
    apart = outlier(vs, worse, rows)
    pc = _config_p(vs, own, worse, q, rows=rows)
    if apart is None:
        return pc, None
    # An outlier launch does not decide alone: the config's p with and without it.
    without = _config_p(vs, own, worse, q, apart[0], rows)
    return max(pc, without), apart[1] if without > pc else None


def config_p(vs: Sequence[Verdict], q: float) -> float | None:
    """One config's p of a drop on what its series have now, on the scale of the run's alpha q: the test the family
    holds it to (before Holm across the run's configs); None where none of its series was tested."""
    alone = [a for v in vs if (a := v.undecided()).stat and "p_adj" in a.stat]
    if not alone:
        return None
    return _one_config(alone, [float(v.stat["p_adj"]) for v in alone], True, q)[0]


def _by_config(alone: Sequence[Verdict], judged: Sequence[int], worse: bool, q: float,
               set_apart: dict[str, str]) -> set[int]:
    """The series (indices) the config-level rule confirms in one direction (p_adj, or p_adj_better): each
    config one hypothesis (the Cauchy combination of its series' p), Holm at q across the configs (a night confirms
    an unchanged config at most q of the time), and within a config it confirms, Benjamini-Hochberg at q names which
    series (the config did regress; among the series named, a share of at most q did not). A config whose sample
    has an outlier launch (`outlier`) is taken at the larger of its p with and without it; `set_apart` gets, per
    config where that decided, the outlier's line."""
    p = {i: float(alone[i].stat["p_adj"] if worse else alone[i].stat["p_adj_better"]) for i in judged}
    groups: dict[str, list[int]] = {}
    for i in judged:
        groups.setdefault(alone[i].config, []).append(i)
    names = list(groups)
    ps = []
    for c in names:
        pc, apart = _one_config([alone[i] for i in groups[c]], [p[i] for i in groups[c]], worse, q)
        if apart is not None:
            set_apart[c] = apart
        ps.append(pc)
    per_config = holm(ps, q)
    out: set[int] = set()
    for name, level in zip(names, per_config, strict=True):
        if level is not None:
            idx = groups[name]
            named = benjamini_hochberg([p[i] for i in idx], q)
            out |= {i for i, r in zip(idx, named, strict=True) if r}
    return out


def confirms(others: Sequence[Verdict], out: Sequence[Verdict], q: float) -> bool:
    """Whether the run-wide decision as it stands (`family` over the other verdicts judged so far and `out`)
    confirms each regression among `out`: rounds follow the family decision, not each series' own test."""
    mine = {(v.config, v.scenario, v.metric) for v in out if v.verdict == Kind.REGRESSION and v.stat}
    if not mine:
        return True
    decided = family([*others, *out], q)
    return all(v.verdict == Kind.REGRESSION for v in decided.verdicts if (v.config, v.scenario, v.metric) in mine)


def family(verdicts: Sequence[Verdict], q: float) -> Family:
    """The run's family decision at q: a config is one hypothesis (its series share every launch), tested by the
    Cauchy combination of its series' p-values, Holm across the configs (any false regression at most q a night,
    under any dependence), and within a config it confirms, Benjamini-Hochberg at q across its series to name which.
    A regression (or improvement) it does not confirm becomes unresolved (an improvement: pass), with the reason.
    Verdicts already decided are decided again from what their own test said; the given verdicts are not changed."""
    alone = [v.undecided() for v in verdicts]
    judged = [i for i, v in enumerate(alone) if v.stat]
    if not judged:
        return Family(0, alone)
    apart: dict[str, str] = {}
    worse = _by_config(alone, judged, True, q, apart)
    better = _by_config(alone, judged, False, q, {})
    configs = len({alone[i].config for i in judged})
    why = (f"not significant across the run's {counted(configs, 'config')} ({len(judged)} series; "
           f"each config one test, the Cauchy combination of its series, Holm at {q:g})")
    out = list(alone)
    for i in judged:
        v = alone[i]
        if (v.verdict in (Kind.REGRESSION, Kind.KNOWN_COST) and i not in worse) or \
                (v.verdict == Kind.IMPROVEMENT and i not in better):
            stat = cast(Test, dict(v.stat))
            if "answer" in stat:
                stat["answer"] = "UNKNOWN"
            note = why if v.config not in apart or v.verdict == Kind.IMPROVEMENT else (
                f"{apart[v.config]}: an outlier launch does not confirm alone, another launch decides ({why})")
            out[i] = replace(v, verdict=Kind.UNRESOLVED if v.verdict != Kind.IMPROVEMENT else Kind.PASS, note=note,
                             stat=stat,
                             alone=(v.verdict, v.note, v.stat.get("answer")))
    return Family(len(judged), out, configs)
