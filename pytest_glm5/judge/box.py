"""How the box reads its references now: the launches its latest nights made of each reference's own build,
against that reference, pooled over every series and config.

A reference is recorded in one session; the box it was recorded on drifts (a driver, a firmware, thermal paste, a
neighbour): the same build reads slower months later. A build judged against the recorded figure then carries the
box's drift as if it were its own, and a drift within the tolerance becomes a confirmed regression once enough
launches pile up (scripts/simulate_nights.py --drift: 1.6 nights in 100). The nights already hold the control: the
launches they made of the reference's own build (the build that was recorded), which a patch cannot have slowed.
Their shared factor (each launch's mean, over a config's series, of its log change from each series' recorded
mean; + is faster) over the last BOX_NIGHTS nights that ran a reference build is the box's shift. Where it is
beyond chance (two-sided, BOX_P, over at least BOX_LAUNCHES launches of two configs or more), every reference is
moved by it: a build is judged against the box as it reads the reference's build now, and a drop that arrives with
a build is still a drop. The shift is said, beside the verdict and in the summary: a box that got slower is news.

    >>> f = factors([{"series": [dict(config="c", scenario="s", metric="output_throughput", build="b0", ref="r",
    ...                                launches=[97.0, 96.0], verdict="pass")]}],
    ...             lambda key, build, ref: (math.log(100.0), True) if (build, ref) == ("b0", "r") else None)
    >>> [round(x, 4) for x in f]
    [-0.0305, -0.0408]
    >>> s = shift([-0.03, -0.028, -0.031, -0.027, -0.029, -0.032], 2, 3)
    >>> print(s.line())
    the box reads the references' own builds -2.9% on its last 3 nights (6 launches of 2 configs)
    >>> s.applies, shift([-0.03, 0.028, -0.031, 0.027, -0.029, 0.032], 2, 3).applies
    (True, False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .carry import DECIDED, OPEN

BOX_NIGHTS = 5  # the latest nights that ran a reference's build: the box as it is now, not as it was a month ago
BOX_LAUNCHES = 6  # fewer launches cannot tell a shift of the box from one slow launch
BOX_P = 0.01  # two-sided: the shift is applied only where it is beyond chance at this level

# (config, scenario, metric), the entry's build, its reference digest -> the recorded reference's mean log value and
# whether higher is better; None where the entry is not of the reference's build or not against that reference.
Recorded = Callable[[tuple[str, str, str], str, str], tuple[float, bool] | None]


@dataclass(frozen=True)
class Shift:
    """The box's shift on the reference builds (log, + is faster), its standard error, and what it rests on."""

    shift: float
    se: float
    launches: int
    configs: int
    nights: int

    @property
    def applies(self) -> bool:
        """Beyond chance (two-sided at BOX_P) over enough launches of two configs or more."""
        from scipy import stats as sps
        if self.launches < BOX_LAUNCHES or self.configs < 2 or not self.se > 0:
            return False
        return abs(self.shift) / self.se > float(sps.t.ppf(1 - BOX_P / 2, self.launches - 1))

    def move(self, values: Sequence[float], higher_is_better: bool) -> tuple[float, ...]:
        """Reference values as the box reads them now."""
        k = math.exp(self.shift if higher_is_better else -self.shift)
        return tuple(x * k for x in values)

    def line(self) -> str:
        """What the shift is and what it rests on."""
        return (f"the box reads the references' own builds {math.expm1(self.shift) * 100:+.1f}% on its last "
                f"{self.nights} nights ({self.launches} launches of {self.configs} configs)")

    def to_dict(self) -> dict[str, Any]:
        """As a verdict's test keeps it."""
        return {"shift": round(math.expm1(self.shift), 5), "se": round(self.se, 5), "launches": self.launches,
                "configs": self.configs, "nights": self.nights}


def factors(runs: Sequence[Mapping[str, Any]], recorded: Recorded, nights: int = BOX_NIGHTS,
            counted: list[tuple[int, str]] | None = None) -> list[float]:
    """The shared factor of each launch the last `nights` nights (that ran one) made of a reference's own build,
    newest night first. `counted`: filled with (night index, config) of each launch's night and config."""
    out: list[float] = []
    used = 0
    for n, run in enumerate(reversed(runs)):
        per: dict[str, list[list[float]]] = {}  # config -> each series' oriented log changes, one per launch
        for s in run.get("series") or []:
            key = (str(s.get("config")), str(s.get("scenario")), str(s.get("metric")))
            got = recorded(key, str(s.get("build", "")), str(s.get("ref", "")))
            xs = [float(x) for x in s.get("launches") or [] if isinstance(x, int | float) and x > 0]
            if got is None or not xs or s.get("verdict") not in (*OPEN, *DECIDED):
                continue
            mean, up = got
            per.setdefault(key[0], []).append([(math.log(x) - mean) * (1 if up else -1) for x in xs])
        for config, rows in per.items():
            width = max(len(r) for r in rows)
            rows = [r for r in rows if len(r) == width]  # the series that share the config's launches
            for i in range(width):
                out.append(sum(r[i] for r in rows) / len(rows))
                if counted is not None:
                    counted.append((n, config))
        used += bool(per)
        if used >= nights:
            break
    return out


def shift(values: Sequence[float], configs: int, nights: int) -> Shift:
    """The shift of these launch factors: their mean and its standard error."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else math.nan
    return Shift(mean, sd / math.sqrt(n) if n > 1 else math.nan, n, configs, nights)


def of(runs: Sequence[Mapping[str, Any]], recorded: Recorded) -> Shift | None:
    """The box's shift from the history's runs (None: no launch of a reference's build to read it from)."""
    counted: list[tuple[int, str]] = []
    values = factors(runs, recorded, counted=counted)
    if not values:
        return None
    return shift(values, len({c for _, c in counted}), len({n for n, _ in counted}))
