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
from .stats import benjamini_hochberg, cauchy_combination, compare, holm
from .verdicts import Kind, Test, Verdict


def tested(v: Verdict) -> list[float]:
    """The launches a verdict's test used: earlier nights' with tonight's where it carried them, else tonight's."""
    return [float(x) for x in v.stat.get("tested") or v.launches]


def reference(v: Verdict) -> list[float]:
    """The reference launches a verdict's test used: the recorded ones and those later nights of its build grew."""
    return [*(v.bound.launches if v.bound else ()), *(float(x) for x in v.stat.get("grown") or [])]


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


def _config_p(vs: Sequence[Verdict], ps: Sequence[float], worse: bool, q: float) -> float:
    """A config's one p: the Cauchy combination of its shared factor's test (half the weight: a drop in every
    series) and of its series' own tests (the other half, shared: a drop in one series alone)."""
    shared = shared_p(vs, worse, q)
    if shared is None:
        return cauchy_combination(ps)
    return cauchy_combination([shared, *ps], [0.5, *[0.5 / len(ps)] * len(ps)])


def shared_p(vs: Sequence[Verdict], worse: bool, q: float) -> float | None:
    """The p of a config's shared factor, on the scale of the run's alpha q: each launch's mean over the config's
    own series of its log change from that series' reference mean (oriented: + is better), tonight's launches
    against the reference's, one t-test. A slow launch moves every series of its config, so a drop in all of them
    shows here with the noise of about one series; None where fewer than two series share their launch counts."""
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

    rows_new = [centred(v, new[id(v)]) for v in use]
    rows_ref = [centred(v, ref[id(v)]) for v in use]
    y = [math.exp(sum(r[i] for r in rows_new) / len(use)) for i in range(n)]
    x = [math.exp(sum(r[j] for r in rows_ref) / len(use)) for j in range(m)]
    c = compare(y, x, higher_is_better=True)
    if not c.testable:
        return None
    level = min(float(v.stat.get("alpha", q)) for v in use)
    return min(1.0, (c.p_worse if worse else c.p_better) * q / level) if level > 0 else 1.0


def _by_config(alone: Sequence[Verdict], judged: Sequence[int], worse: bool, q: float) -> set[int]:
    """The series (indices) the config-level rule confirms in one direction (p_adj, or p_adj_better): each
    config one hypothesis (the Cauchy combination of its series' p), Holm at q across the configs (a night confirms
    an unchanged config at most q of the time), and within a config it confirms, Benjamini-Hochberg at q names which
    series (the config did regress; among the series named, a share of at most q did not)."""
    p = {i: float(alone[i].stat["p_adj"] if worse else alone[i].stat["p_adj_better"]) for i in judged}
    groups: dict[str, list[int]] = {}
    for i in judged:
        groups.setdefault(alone[i].config, []).append(i)
    names = list(groups)
    per_config = holm([_config_p([alone[i] for i in groups[c]], [p[i] for i in groups[c]], worse, q)
                       for c in names], q)
    out: set[int] = set()
    for name, level in zip(names, per_config, strict=True):
        if level is not None:
            idx = groups[name]
            named = benjamini_hochberg([p[i] for i in idx], q)
            out |= {i for i, r in zip(idx, named, strict=True) if r}
    return out


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
    worse = _by_config(alone, judged, True, q)
    better = _by_config(alone, judged, False, q)
    configs = len({alone[i].config for i in judged})
    why = (f"not significant across the run's {configs} config{'s' if configs != 1 else ''} ({len(judged)} series; "
           f"each config one test, the Cauchy combination of its series, Holm at {q:g})")
    out = list(alone)
    for i in judged:
        v = alone[i]
        if (v.verdict in (Kind.REGRESSION, Kind.KNOWN_COST) and i not in worse) or \
                (v.verdict == Kind.IMPROVEMENT and i not in better):
            stat = cast(Test, dict(v.stat))
            if "answer" in stat:
                stat["answer"] = "UNKNOWN"
            out[i] = replace(v, verdict=Kind.UNRESOLVED if v.verdict != Kind.IMPROVEMENT else Kind.PASS, note=why,
                             stat=stat,
                             alone=(v.verdict, v.note, v.stat.get("answer")))
    return Family(len(judged), out, configs)
