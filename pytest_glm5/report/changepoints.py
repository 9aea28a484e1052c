"""Change points of a nightly series, found by Apache Otava (E-Divisive means with a t-test, as MongoDB and
DataStax run it), with the step's size and its confidence interval.

Settings, measured on synthetic series of 90 nights at CV 2% (tests/test_changepoints.py's generator, 200 seeds
each): Otava's window 50 and p 1e-4, with a change point required to leave at least MIN_RUN nights on each side
(an outlier night is two steps one night apart), find a 5% step at night 60 within one night in 186 of 200
histories, and mark no change point in any of 200 flat histories or 200 with one night 15% low. Without the
MIN_RUN rule and at p 1e-3, 8% of flat histories had one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# scipy.stats is imported in the functions that use it: it costs about 0.45 s, which a collection, a plan, a
# usage error or `glm5 --help` never needs.
WINDOW = 50
MAX_PVALUE = 1e-4
MIN_RUN = 3  # nights on each side of a change point: a single bad night is not a new level
INSTALL_HINT = "pip install 'pytest-glm5[history]' (Apache Otava finds the change points)"


class ChangePointsUnavailable(Exception):
    """Apache Otava is not installed; the message says how to install it."""


@dataclass(frozen=True)
class Step:
    """A change point: the first run of the new level, and how big the step is."""

    index: int  # position in the series of the first run at the new level
    before: float  # geometric mean of the segment before
    after: float  # geometric mean of the segment after
    change: float  # after / before - 1
    ci: tuple[float, float]  # 95% CI of the change (Welch t on logs)
    p: float  # Otava's t-test p-value

    def describe(self) -> str:
        """`-5.1% [-5.9%, -4.3%], p 2e-12`."""
        lo, hi = self.ci
        return f"{self.change * 100:+.1f}% [{lo * 100:+.1f}%, {hi * 100:+.1f}%], p {self.p:.2g}"


def _step(values: Sequence[float], start: int, index: int, stop: int, p: float) -> Step:
    from scipy import stats
    left = [math.log(x) for x in values[start:index]]
    right = [math.log(x) for x in values[index:stop]]
    ml, mr = sum(left) / len(left), sum(right) / len(right)
    d = mr - ml
    vl = stats.tvar(left) / len(left) if len(left) > 1 else 0.0
    vr = stats.tvar(right) / len(right) if len(right) > 1 else 0.0
    se = math.sqrt(vl + vr)
    if se > 0:
        dof = (vl + vr) ** 2 / ((vl**2 / (len(left) - 1) if len(left) > 1 else 0.0)
                                + (vr**2 / (len(right) - 1) if len(right) > 1 else 0.0) or 1e-300)
        half = float(stats.t.ppf(0.975, max(dof, 1.0))) * se
    else:
        half = 0.0
    return Step(index, math.exp(ml), math.exp(mr), math.exp(d) - 1, (math.exp(d - half) - 1, math.exp(d + half) - 1),
                p)


def find(values: Sequence[float], window: int = WINDOW, max_pvalue: float = MAX_PVALUE,
         min_run: int = MIN_RUN) -> list[Step]:
    """The change points of a series (run order), each with its step; a level that lasts fewer than `min_run`
    runs on either side is not one."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise ChangePointsUnavailable(f"change points need Apache Otava: {INSTALL_HINT}") from None
    if len(values) < 2 * min_run:
        return []
    found, _ = compute_change_points(list(values), window_len=window, max_pvalue=max_pvalue)
    idx = [int(c.index) for c in found]
    edges = [0, *idx, len(values)]
    kept = [(k, i) for k, i in enumerate(idx)
            if edges[k + 1] - edges[k] >= min_run and edges[k + 2] - edges[k + 1] >= min_run]
    pvalue = {int(c.index): float(c.stats.pvalue) for c in found}
    cuts = [0, *(i for _, i in kept), len(values)]
    return [_step(values, cuts[n], i, cuts[n + 2], pvalue[i]) for n, (_, i) in enumerate(kept)]


def trend(values: Sequence[float], last: int = 14) -> float | None:
    """The recent drift: relative change per run over the last `last` runs (log-linear fit); None under 3 runs."""
    from scipy import stats
    tail = [math.log(x) for x in values[-last:]]
    if len(tail) < 3:
        return None
    fit = stats.linregress(range(len(tail)), tail)
    return math.exp(float(fit.slope)) - 1
