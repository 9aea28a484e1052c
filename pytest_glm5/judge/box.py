"""How the box reads its references now: the launches its latest nights made of each reference's own build,
against that reference, pooled per series kind over every config.

A reference is recorded in one session; the box it was recorded on drifts (a driver, a firmware, thermal paste, a
neighbour): the same build reads slower months later. A build judged against the recorded figure then carries the
box's drift as if it were its own, and a drift within the tolerance becomes a confirmed regression once enough
launches pile up (scripts/simulate_nights.py --drift: 1.6 nights in 100). The nights already hold the control: the
launches they made of the reference's own build (the build that was recorded), which a patch cannot have slowed.
Their mean log change from each series' recorded mean (+ is faster), per series kind (scenario and metric, over
every config: the box moves a throughput and a millisecond TTFT apart) and per recording session (the references
recorded together: the box moved since each session by its own amount), over the last BOX_NIGHTS nights that ran a
reference build, is the box's shift for that kind (a bad launch left out: `kept`). Read over at least BOX_LAUNCHES
launches of two configs or more, every reference of the kind is moved by it and the test carries its standard error
(stats.compare's `extra`): a build is judged against the box as it reads the reference's build now, and a drop that
arrives with a build is still a drop. Where the shift is beyond chance (two-sided, BOX_P) it is said in the summary:
a box that got slower is news.

Why always, with its error, and not only beyond chance: a pre-test that moves by the estimate or by nothing leaves a
drift within chance in every test (1.78 series in 100 nights read a false regression under a 3% drift at CV 5%, 3.89
once issue 39's rounds gave a drop more launches), and moves by a figure whose error no test counted. Moved always,
the error counted: 1.0 series and 0.44 nights in 100 (scripts/simulate_nights.py --drift 0.03, seeds 1-30), and at
CV 2% a 10% drop confirmed within 2 nights in 95% of 60 histories where the pre-test read 93%. A bad
launch of a reference's build is left out of the shift (`kept`): with it, one launch in 20 at -15% moved every
reference down by its share and a true drop read smaller (30% confirmed within 3 nights where the pre-test read 47%;
40% without it).

Why per session: references recorded on different days carry the box (and the host's share of a millisecond
figure) of their own day. On one quiet night of session 9 the single-stream median TTFT of the configs recorded on
2026-12-03 (1.8-2.3 ms) read 1.41-1.55 ms, about -33%, and of the two speculative configs recorded on 2026-12-06
(1.82, 1.92 ms) 1.47-1.49 ms, -20%. One shift over both moved the speculative configs' references by the older
session's amount: in session 8 an unchanged tp8-mtp read +38% against its reference moved 27% down, a confirmed
regression (scripts/unchanged_histories.py, issue 39).

    >>> f = factors([{"series": [dict(config="c", scenario="s", metric="output_throughput", build="b0", ref="r",
    ...                                launches=[97.0, 96.0], verdict="pass")]}],
    ...             lambda key, build, ref: (math.log(100.0), True, "d1") if (build, ref) == ("b0", "r") else None)
    >>> [(round(x, 4), night, config) for x, night, config in f[("s", "output_throughput", "d1")]]
    [(-0.0305, 0, 'c'), (-0.0408, 0, 'c')]
    >>> s = shift([-0.03, -0.028, -0.031, -0.027, -0.029, -0.032], 2, 3)
    >>> print(s.line())
    the box reads the references' own builds -2.9% on its last 3 nights (6 launches of 2 configs)
    >>> s.applies, shift([-0.03, 0.028, -0.031, 0.027, -0.029, 0.032], 2, 3).applies
    (True, False)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .carry import DECIDED, OPEN

BOX_NIGHTS = 5  # the latest nights that ran a reference's build: the box as it is now, not as it was a month ago
BOX_LAUNCHES = 6  # fewer launches cannot tell a shift of the box from one slow launch
BOX_OUTLIER = 3.0  # robust standard deviations: a launch beyond is a bad launch, not the box (a normal one: 1 in 370)
BOX_P = 0.01  # two-sided: a shift beyond chance at this level is news in the summary

# (config, scenario, metric), the entry's build, its reference digest -> the recorded reference's mean log value,
# whether higher is better and the session it was recorded in (verdicts.Bound.recorded); None where the entry is not
# of the reference's build or not against that reference.
Recorded = Callable[[tuple[str, str, str], str, str], tuple[float, bool, str] | None]
# (scenario, metric, recording session): the references one shift moves
SeriesKind = tuple[str, str, str]
ANY = "*"  # the scenario of a kind read over every scenario of its metric (for_series)


@dataclass(frozen=True)
class Shift:
    """The box's shift on the reference builds (log, + is faster), its standard error, and what it rests on."""

    shift: float
    se: float
    launches: int
    configs: int
    nights: int
    recorded: str = ""  # the recording session of the references it was read against ("": not said)

    @property
    def usable(self) -> bool:
        """Read over enough launches of two configs or more to move a reference by, with its standard error."""
        return self.launches >= BOX_LAUNCHES and self.configs >= 2 and self.se > 0 and math.isfinite(self.se)

    @property
    def applies(self) -> bool:
        """Beyond chance (two-sided at BOX_P): news for the summary."""
        from scipy import stats as sps
        if not self.usable:
            return False
        return abs(self.shift) / self.se > float(sps.t.ppf(1 - BOX_P / 2, self.launches - 1))

    @property
    def variance(self) -> float:
        """What moving a reference by the shift adds to the variance of its mean (log scale): the shift's error."""
        return self.se ** 2 if self.usable else 0.0

    def move(self, values: Sequence[float], higher_is_better: bool) -> tuple[float, ...]:
        """Reference values as the box reads them now."""
        k = math.exp(self.shift if higher_is_better else -self.shift)
        return tuple(x * k for x in values)

    def line(self) -> str:
        """What the shift is and what it rests on."""
        of = f" recorded {self.recorded}" if self.recorded else ""
        return (f"the box reads the references' own builds{of} {math.expm1(self.shift) * 100:+.1f}% on its last "
                f"{self.nights} nights ({self.launches} launches of {self.configs} configs)")

    def to_dict(self) -> dict[str, Any]:
        """As a verdict's test keeps it."""
        return {"shift": round(math.expm1(self.shift), 5), "se": round(self.se, 6), "launches": self.launches,
                "configs": self.configs, "nights": self.nights, "recorded": self.recorded, "beyond": self.applies}


def factors(runs: Sequence[Mapping[str, Any]], recorded: Recorded, nights: int = BOX_NIGHTS
            ) -> dict[SeriesKind, list[tuple[float, int, str]]]:
    """Per (scenario, metric, recording session): each launch the last `nights` nights (that ran one) made of a
    reference's own build, as its oriented log change from the series' recorded mean, with the night (0: the newest)
    and the config. Per series kind, not per launch over a config's series: the box moves a throughput and a
    millisecond TTFT apart."""
    out: dict[SeriesKind, list[tuple[float, int, str]]] = {}
    used = 0
    for n, run in enumerate(reversed(runs)):
        any_here = False
        for s in run.get("series") or []:
            key = (str(s.get("config")), str(s.get("scenario")), str(s.get("metric")))
            got = recorded(key, str(s.get("build", "")), str(s.get("ref", "")))
            xs = [float(x) for x in s.get("launches") or [] if isinstance(x, int | float) and x > 0]
            if got is None or not xs or s.get("verdict") not in (*OPEN, *DECIDED):
                continue
            mean, up, session = got
            oriented = ((math.log(x) - mean) * (1 if up else -1) for x in xs)
            out.setdefault((key[1], key[2], session), []).extend((x, n, key[0]) for x in oriented)
            any_here = True
        used += any_here
        if used >= nights:
            break
    return out


def kept(values: Sequence[float]) -> list[float]:
    """The launch factors a shift is read from: those within BOX_OUTLIER robust standard deviations (1.4826 median
    absolute deviations) of their median. A bad launch (a cold clock, a neighbour) is not the box.

        >>> kept([0.01, -0.01, 0.0, 0.02, -0.02, 0.005, -0.15])
        [0.01, -0.01, 0.0, 0.02, -0.02, 0.005]
    """
    if len(values) < 4:
        return list(values)
    mid = statistics.median(values)
    mad = 1.4826 * statistics.median(abs(x - mid) for x in values)
    return [x for x in values if abs(x - mid) <= BOX_OUTLIER * mad] if mad > 0 else list(values)


def shift(values: Sequence[float], configs: int, nights: int, recorded: str = "") -> Shift:
    """The shift of these launch factors (outliers left out: `kept`): their mean and its standard error."""
    values = kept(values)
    n = len(values)
    mean = sum(values) / n if n else 0.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else math.nan
    return Shift(mean, sd / math.sqrt(n) if n > 1 else math.nan, n, configs, nights, recorded)


def of(runs: Sequence[Mapping[str, Any]], recorded: Recorded) -> dict[SeriesKind, Shift]:
    """The box's shift per (scenario, metric, recording session) from the history's runs (none where no launch of a
    reference's build reads it), and per (ANY, metric, session) over every scenario of the metric, which a kind too
    thin to read alone borrows (`for_series`)."""
    got = factors(runs, recorded)
    pooled: dict[SeriesKind, list[tuple[float, int, str]]] = {}
    for (_, metric, session), xs in got.items():
        pooled.setdefault((ANY, metric, session), []).extend(xs)
    return {kind: shift([x for x, _, _ in xs], len({c for _, _, c in xs}), len({n for _, n, _ in xs}), kind[2])
            for kind, xs in (*got.items(), *pooled.items())}


def for_series(shifts: Mapping[SeriesKind, Shift], scenario: str, metric: str, session: str) -> Shift | None:
    """The shift a series' reference is moved by: its own kind's where that is usable, else its metric's over every
    scenario. A scenario only one config runs (the reference config's own chat, agentic and trace scenarios) never
    reads two configs; without the borrowed shift its long samples read a drift of the box as a drop
    (scripts/simulate_nights.py --drift: the reference config's chat series confirmed -5% to -7% over 15-25 launches
    against references recorded before the box slowed 3%)."""
    own = shifts.get((scenario, metric, session))
    return own if own is not None and own.usable else shifts.get((ANY, metric, session))
