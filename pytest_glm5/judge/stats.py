"""The statistics of a verdict: launch-level samples compared on the log scale, with p-values, a 95% CI, the CV,
alpha spending over sequential looks, and the family-wise correction of one run.

The unit is a server launch: repeats inside one launch share its GPU clocks, memory placement and kernel choices,
so they say little about the next launch. A launch contributes one value (the geometric mean of its repeats); the
spread between launches is what a test uses.

    >>> c = compare([95.1, 94.8], [100.2, 99.1, 101.0, 100.4], higher_is_better=True)
    >>> c.describe()
    '-5.2% [-6.8%, -3.6%], p 0.00044, CV 0.7%, 2 vs 4 launches'
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

# scipy.stats is imported in the functions that use it: it costs about 0.45 s, which a collection, a plan, a
# usage error or `glm5 --help` never needs.
DEFAULT_ALPHA = 0.01  # per series: Pinpoint's low threshold
DEFAULT_EFFECT = 0.05  # the smallest change the gate must find: a SAME answer rules out at least this much


@dataclass(frozen=True)
class Comparison:
    """New launches against reference launches of one series, oriented so that `gain` > 0 is better."""

    change: float  # relative change of the geometric means, new / ref - 1 (raw direction)
    ci_low: float  # 95% two-sided CI of `change`
    ci_high: float
    p_worse: float  # one-sided p that new is worse than ref (nan: no spread to test with)
    p_better: float
    cv: float  # the between-launch CV (pooled sd of log values)
    n_new: int
    n_ref: int
    higher_is_better: bool
    df: int = 0
    pooled: str = ""  # where the variance came from besides the two sides (judge/variance.py Spread.describe)
    extra: float = 0.0  # variance of the reference's mean beyond its launches' (a shift it was moved by: judge/box.py)

    @property
    def gain(self) -> float:
        """The change with + meaning better."""
        return self.change if self.higher_is_better else -self.change

    @property
    def testable(self) -> bool:
        """Both sides together have spread to test with (at least one degree of freedom)."""
        return not math.isnan(self.p_worse)

    @property
    def se(self) -> float:
        """The standard error of the log change the test used: the launches' and the `extra` beyond them."""
        return math.sqrt(self.cv ** 2 * (1 / self.n_new + 1 / self.n_ref) + self.extra)

    def p_beyond(self, margin: float) -> float:
        """One-sided p that the change is worse by more than `margin` (a fraction): the p of a drop beyond it.

            >>> c = compare([95.1, 94.8], [100.2, 99.1, 101.0, 100.4], higher_is_better=True)
            >>> _p(c.p_worse), _p(c.p_beyond(0.01)), _p(c.p_beyond(0.05))
            ('0.00044', '0.00097', '0.24')
        """
        from scipy import stats as sps
        if not self.testable or self.df <= 0:
            return 1.0
        se = self.se
        gain = math.log1p(self.change) * (1 if self.higher_is_better else -1)
        if not se > 0:
            return 0.0 if gain < -math.log1p(margin) else 1.0
        return float(sps.t.cdf((gain + math.log1p(margin)) / se, self.df))

    def gain_bounds(self, confidence: float) -> tuple[float, float]:
        """Two-sided `confidence` interval of `gain`."""
        lo, hi = _interval(self, confidence)
        return (lo, hi) if self.higher_is_better else (-hi, -lo)

    def change_bounds(self, confidence: float) -> tuple[float, float]:
        """Two-sided `confidence` interval of `change` (the raw direction)."""
        return _interval(self, confidence)

    def describe(self, confidence: float = 0.95) -> str:
        """`-5.2% [-6.8%, -3.6%], p 0.00044, CV 0.7%, 2 vs 4 launches`; at another confidence than 95% the interval
        says its own (`[-7.1%, -3.3%] 98% CI`)."""
        p = min(self.p_worse, self.p_better)
        ptxt = "p n/a (one launch each: no spread)" if math.isnan(p) else f"p {_p(p)}"
        lo, hi = (self.ci_low, self.ci_high) if confidence == 0.95 else self.change_bounds(confidence)
        level = "" if confidence == 0.95 else f" {confidence * 100:g}% CI"
        pooled = f" ({self.pooled})" if self.pooled else ""
        return (f"{self.change * 100:+.1f}% [{lo * 100:+.1f}%, {hi * 100:+.1f}%]{level}, {ptxt}, "
                f"CV {self.cv * 100:.1f}%{pooled}, {self.n_new} vs {self.n_ref} launches")


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.4f}".rstrip("0").rstrip(".") if p < 0.1 else f"{p:.2f}"


def _logs(values: Sequence[float]) -> list[float]:
    bad = [v for v in values if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"values must be positive and finite to compare, got {bad[0]!r}")
    return [math.log(v) for v in values]


def _ss(logs: Sequence[float]) -> float:
    m = sum(logs) / len(logs)
    return sum((x - m) ** 2 for x in logs)


def _parts(new: Sequence[float], ref: Sequence[float], prior: Sequence[Sequence[float]] = (),
           lent: tuple[float, float] | None = None) -> tuple[float, float, int]:
    """Difference of log means, the launches' standard error of it (pooled variance, with the prior groups' spread
    and the variance a family lends: (variance, degrees of freedom)), degrees of freedom."""
    a, b = _logs(new), _logs(ref)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    groups = [_logs(g) for g in prior if len(g) >= 2]
    df = len(a) + len(b) - 2 + sum(len(g) - 1 for g in groups)
    ss = _ss(a) + _ss(b) + sum(_ss(g) for g in groups)
    if lent is not None and 0 < lent[1] < math.inf and math.isfinite(lent[0]):
        df0 = round(lent[1])
        ss, df = ss + df0 * lent[0], df + df0
    sd = math.sqrt(ss / df) if df > 0 else float("nan")
    return ma - mb, sd * math.sqrt(1 / len(a) + 1 / len(b)), df


def _interval(c: Comparison, confidence: float) -> tuple[float, float]:
    from scipy import stats as sps
    d = math.log1p(c.change)
    df = c.df
    if df <= 0 or c.cv == 0:
        return (c.change, c.change)
    se = c.se
    t = float(sps.t.ppf(0.5 + confidence / 2, df))
    return (math.expm1(d - t * se), math.expm1(d + t * se))


def compare(new: Sequence[float], ref: Sequence[float], higher_is_better: bool,
            prior: Sequence[Sequence[float]] = (), lent: tuple[float, float] | None = None,
            pooled: str = "", extra: float = 0.0) -> Comparison:
    """Pooled two-sample t-test on log values (equal variance: the same machine and server), one-sided both ways.
    `prior`: other launch groups of the same variance (recorded references) that add to the spread's estimate;
    `lent`: the variance and degrees of freedom the series' family lends it (judge/variance.py), a moderated t-test;
    `pooled`: where that came from, for the line; `extra`: a variance the reference's mean carries beyond its
    launches' (the standard error, squared, of the box's shift it was moved by: judge/box.py), added to the test's.

    With one launch per side and no prior there is no spread to test with: p is nan and the caller says so."""
    if not new or not ref:
        raise ValueError("need at least one launch on each side")
    d, se, df = _parts(new, ref, prior, lent)
    cv = se / math.sqrt(1 / len(new) + 1 / len(ref)) if df > 0 else 0.0
    if df > 0 and se > 0:
        return _tested(d, se, df, len(new), len(ref), higher_is_better, pooled if lent is not None else "", extra)
    if df <= 0:
        p_up = p_down = float("nan")
    else:
        p_up = 0.0 if d > 0 else (1.0 if d < 0 else 0.5)
        p_down = 0.0 if d < 0 else (1.0 if d > 0 else 0.5)
    p_worse, p_better = (p_down, p_up) if higher_is_better else (p_up, p_down)
    return Comparison(math.expm1(d), math.expm1(d), math.expm1(d), p_worse, p_better, cv, len(new), len(ref),
                      higher_is_better, df, pooled if lent is not None else "")


def _tested(d: float, se: float, df: int, n_new: int, n_ref: int, higher_is_better: bool, pooled: str,
            extra: float = 0.0) -> Comparison:
    """The t test of a difference of log means `d` with the launches' standard error `se` (and `extra` variance
    beyond it) on `df` degrees of freedom: both one-sided p values and the 95% interval, as a Comparison."""
    from scipy import stats as sps
    cv = se / math.sqrt(1 / n_new + 1 / n_ref)
    extra = extra if extra > 0 and math.isfinite(extra) else 0.0  # the one place every test's error is made
    se = math.sqrt(se ** 2 + extra)
    t = d / se
    p_up, p_down = float(sps.t.sf(t, df)), float(sps.t.cdf(t, df))  # new higher than ref; lower
    q = float(sps.t.ppf(0.975, df))
    p_worse, p_better = (p_down, p_up) if higher_is_better else (p_up, p_down)
    return Comparison(math.expm1(d), math.expm1(d - q * se), math.expm1(d + q * se), p_worse, p_better,
                      cv, n_new, n_ref, higher_is_better, df, pooled, extra)


def welch(new: Sequence[float], ref: Sequence[float], higher_is_better: bool, new_var: tuple[float, float],
          ref_var: tuple[float, float], pooled: str = "", extra: float = 0.0) -> Comparison:
    """New launches against reference launches where the two come from sessions of different spread (a night
    noisier than the session that recorded the reference): each side's variance of log values with its degrees of
    freedom, `new_var` and `ref_var`, Welch's standard error and Satterthwaite's degrees of freedom.

        >>> c = welch([93.0, 92.0], [100.0] * 12, True, (0.05 ** 2, 6), (0.02 ** 2, 40))
        >>> round(c.change, 3), round(c.p_worse, 4), c.df
        (-0.075, 0.0362, 6)
    """
    a, b = _logs(new), _logs(ref)
    d = sum(a) / len(a) - sum(b) / len(b)
    va, vb = new_var[0] / len(a), ref_var[0] / len(b)
    df = max(1, math.floor((va + vb) ** 2 / (va ** 2 / max(new_var[1], 1) + vb ** 2 / max(ref_var[1], 1))))
    if not va + vb > 0:
        return compare(new, ref, higher_is_better, extra=extra)
    return _tested(d, math.sqrt(va + vb), df, len(a), len(b), higher_is_better, pooled, extra)


def mean_log(values: Sequence[float]) -> float:
    """The mean of the positive values' logs (nan where none is positive).

        >>> round(mean_log([1.0, math.e ** 2]), 6)
        1.0
    """
    logs = [math.log(v) for v in values if v > 0]
    return sum(logs) / len(logs) if logs else math.nan


def log_var(values: Sequence[float]) -> tuple[float, int] | None:
    """The sample variance of the positive values' logs and its degrees of freedom; None under two values.

        >>> v, df = log_var([100.0, 110.0, 121.0])
        >>> round(v, 5), df
        (0.00908, 2)
    """
    logs = [math.log(v) for v in values if v > 0]
    return (_ss(logs) / (len(logs) - 1), len(logs) - 1) if len(logs) >= 2 else None


def spent(alpha: float, look: int, looks: int) -> float:
    """The alpha of look `look` (1-based) of at most `looks`: Lan-DeMets O'Brien-Fleming-type spending,
    2 - 2 Phi(z_(1-alpha/2) / sqrt(t)) at information fraction t = look / looks, its increment used as the look's
    level. The increments add up to alpha, so over all looks the false-alarm rate stays at most alpha (a union
    bound); a plain re-test at alpha on every look would not (about 1.8% for a nominal 1%). Early looks get little,
    so the last keeps nearly all of alpha and with it the power of a fixed design."""
    from scipy import stats as sps
    if not 1 <= look <= looks:
        raise ValueError(f"look {look} is outside 1..{looks}")
    z = float(sps.norm.ppf(1 - alpha / 2))

    def cumulative(t: float) -> float:
        # The survival function, not 1 - cdf: an early look of many gets ~1e-23, which 1 - cdf rounds to 0.
        return 0.0 if t <= 0 else min(alpha, float(2 * sps.norm.sf(z / math.sqrt(t))))

    return cumulative(look / looks) - cumulative((look - 1) / looks)


@functools.lru_cache(maxsize=512)
def night_level(alpha: float, carried: int, looks: int) -> float:
    """The one-sided level of each of a night's `looks` at a sample that holds `carried` launches of earlier nights
    before tonight's first: Pocock's constant boundary, computed exactly for these information fractions (look k
    tests carried + k launches), so that the night confirms a false drop with probability at most alpha. The looks
    of one sample share its launches: with many carried they nearly coincide and each keeps nearly all of alpha,
    where a spending function's union bound would split it five ways.

        >>> [round(night_level(0.01, c, 5), 4) for c in (0, 5, 20)]
        [0.0029, 0.0042, 0.0057]
        >>> night_level(0.01, 7, 1)
        0.01
    """
    from scipy import optimize
    from scipy import stats as sps
    if looks <= 1:
        return alpha
    c = optimize.brentq(lambda z: _crossing(z, carried, looks) - alpha, float(sps.norm.isf(alpha)),
                        float(sps.norm.isf(alpha / looks)), xtol=1e-6)
    return float(sps.norm.sf(c))


def _crossing(c: float, carried: int, looks: int, grid: int = 2001) -> float:
    """The chance that any of the looks' z statistics S_k / sqrt(n_k) reaches c under no change, n_k = carried + k
    and S the sum of the launches' standardized values: the density of S below the boundary carried look to look
    (Armitage, McPherson and Rowe's recursive integration) on a grid."""
    import numpy as np
    from scipy import stats as sps
    top = math.sqrt(carried + looks)
    x = np.linspace(-8 * top, c * top, grid)
    dx = float(x[1] - x[0])
    half = int(8 / dx)
    kernel = sps.norm.pdf(np.arange(-half, half + 1) * dx) * dx  # one launch's step
    density = sps.norm.pdf(x, 0.0, math.sqrt(carried + 1))
    density[x >= c * math.sqrt(carried + 1)] = 0.0
    for k in range(2, looks + 1):
        density = np.convolve(density, kernel, mode="full")[half:half + grid]
        density[x >= c * math.sqrt(carried + k)] = 0.0
    return float(1.0 - density.sum() * dx)


def launches_needed(cv: float, effect: float, alpha: float, n_ref: int | None, power: float = 0.95) -> int | None:
    """New launches that find a drop of `effect` with `power` at this CV: against `n_ref` reference launches, or
    per arm of an A/B when n_ref is None. None: a reference this small cannot get there; record more launches."""
    from scipy import stats as sps
    if cv <= 0:
        return 1
    z = float(sps.norm.ppf(1 - alpha) + sps.norm.ppf(power))
    sigma_d = math.log1p(effect) / z  # the standard error the difference may have
    if n_ref is None:
        return max(2, math.ceil(2 * (cv / sigma_d) ** 2))
    room = (sigma_d / cv) ** 2 - 1 / n_ref
    if room <= 0:
        return None
    return max(1, math.ceil(1 / room))


def detectable_drop(cv: float, n_new: int, alpha: float, n_ref: int | None, power: float = 0.95) -> float:
    """The smallest drop (a fraction) that n_new launches find with `power` at this CV: the inverse of
    launches_needed, what a run could see with the launches it had."""
    from scipy import stats as sps
    z = float(sps.norm.ppf(1 - alpha) + sps.norm.ppf(power))
    se = cv * math.sqrt(2 / max(n_new, 1)) if n_ref is None else cv * math.sqrt(1 / max(n_new, 1) + 1 / n_ref)
    return math.expm1(z * se)


def order_ci(values: Sequence[float], q: float, confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free CI of the q-quantile from order statistics (the ranks a Binomial(n, q) count falls
    between with `confidence`); None when n is too small for any."""
    from scipy import stats as sps
    xs = sorted(values)
    n = len(xs)
    if n < 2:
        return None
    lo = int(sps.binom.ppf((1 - confidence) / 2, n, q))  # ranks, 0-based after the -1 below
    hi = int(sps.binom.ppf(1 - (1 - confidence) / 2, n, q)) + 1
    if lo < 1 or hi > n:
        return None
    return xs[lo - 1], xs[hi - 1]


def benjamini_hochberg(pvalues: Sequence[float], q: float) -> list[bool]:
    """Which hypotheses BH rejects at false-discovery rate q. When nothing changed (every null true) this bounds the
    chance of any false alarm across the whole family by q, as Holm would; when much changed it keeps the power
    that Holm and Bonferroni lose."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m = len(pvalues)
    cut = 0
    for rank, i in enumerate(order, start=1):
        if pvalues[i] <= q * rank / m:
            cut = rank
    rejected = [False] * m
    for i in order[:cut]:
        rejected[i] = True
    return rejected


CAUCHY_CAP = 0.99  # the largest p the Cauchy combination takes (its term then is -31.8, not minus infinity)


def cauchy_combination(pvalues: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """One p-value for a family of tests that may depend on each other in any way (Liu and Xie 2020): the mean of
    tan((0.5 - p) pi) is standard Cauchy under the null whatever the dependence, in the tail that decides. A config's
    series share every launch (a slow launch moves them all), so the config is one hypothesis, not fifteen; a drop in
    one series alone still carries it (about m times that series' p, as Bonferroni within the config), a drop in all
    of them about their common p. `weights` (default equal) share the combination among the tests.

        >>> round(cauchy_combination([0.001, 0.5, 0.5, 0.5]), 4)
        0.004
        >>> round(cauchy_combination([0.002] * 5), 4)
        0.002
    """
    ws = list(weights) if weights is not None else [1.0] * len(pvalues)
    # A p near 1 (a series that improved) would add a term near minus infinity and cancel any drop beside it: a CI
    # run read a -48% throughput drop at p 3e-10 as not significant because its config's TTFT improved (p 1.0).
    # Capped at CAUCHY_CAP, such a series counts as no evidence either way (ACAT caps p the same way).
    pairs = [(min(max(p, 1e-300), CAUCHY_CAP), w) for p, w in zip(pvalues, ws, strict=True)
             if not math.isnan(p) and w > 0]
    if not pairs:
        return 1.0
    total = sum(w for _, w in pairs)
    if min(p for p, _ in pairs) < 1e-15:  # tan overflows its precision: the tail is w / (pi p) summed
        return min(1.0, min(p * total / w for p, w in pairs))
    t = sum(w * math.tan((0.5 - p) * math.pi) for p, w in pairs) / total
    return min(1.0, max(0.0, 0.5 - math.atan(t) / math.pi))


def holm(pvalues: Sequence[float], alpha: float) -> list[float | None]:
    """The level at which Holm's step-down rejects each hypothesis at family-wise error alpha (under any
    dependence); None: not rejected.

        >>> holm([0.001, 0.02, 0.003, 0.5], 0.01)
        [0.0025, None, 0.0033333333333333335, None]
    """
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m = len(pvalues)
    levels: list[float | None] = [None] * m
    for rank, i in enumerate(order):
        if not pvalues[i] <= alpha / (m - rank):
            break
        levels[i] = alpha / (m - rank)
    return levels


def ab_decision(c: Comparison, tolerance: float, alpha: float, effect: float, same_alpha: float = DEFAULT_ALPHA) -> str:
    """SAME / DIFFERENT / UNKNOWN, as Pinpoint answers, with a stated design: DIFFERENT when p < alpha (this look's
    level) and the change exceeds the tolerance; SAME when the (1 - 2 same_alpha) CI of the change lies inside
    +-effect (two one-sided tests at same_alpha: with the run's 1%, a 98% CI, so a real 5% drop is called SAME
    rarely and the gate keeps looking instead); else UNKNOWN."""
    if not c.testable:
        return "UNKNOWN"
    if (c.p_worse < alpha and -c.gain > tolerance) or (c.p_better < alpha and c.gain > tolerance):
        return "DIFFERENT"
    lo, hi = c.gain_bounds(1 - 2 * same_alpha)
    if -effect < lo and hi < effect:
        return "SAME"
    return "UNKNOWN"


SPREAD_CONFIDENCE = 0.8  # a reference's spread is judged by its upper bound at this confidence, not its estimate


def cv_upper(cv: float, n: int, confidence: float = SPREAD_CONFIDENCE) -> float:
    """The one-sided upper confidence bound of a spread estimated from `n` values (chi-square on n - 1 degrees of
    freedom): two launches that happen to agree say little (on the H200 two launches at 35.0 and 34.0 tok/s read CV
    2%, while 11 more of the same build in the same hour spread 13%)."""
    from scipy import stats as sps
    if n < 2:
        return float("inf")
    return cv * math.sqrt((n - 1) / float(sps.chi2.ppf(1 - confidence, n - 1)))
