"""Service-level objectives (issue 32): whether requests met the latency a user feels, how many did, and the largest
load the box serves within it. A serving team buys "how many users within our SLO", not tok/s at a fixed load.

A request is **good** when it succeeded and its TTFT and TPOT (and end-to-end latency, where the SLO gives one) are
within the limits, as SGLang's bench_serving defines them; a failed or aborted request is a miss. **Attainment** is
good / sent, judged only with enough requests for its target: the fewest n whose all-good run has a one-sided 95%
Clopper-Pearson lower bound at the target (59 requests for 95%, 299 for 99%), else "not judged: needs N requests".
Per launch it carries its exact (Clopper-Pearson) bounds: it **meets** the target when the lower bound clears it,
**misses** when the upper bound falls short, and is otherwise **undecided**. **Capacity** at an SLO is the largest
ladder concurrency whose attainment clears the target, as a bracket [feasible, infeasible] with the limit that binds
at the first infeasible point, taken from the ladder a night already measures (no extra launch).

    >>> slo = Slo(ttft_ms=2000.0, tpot_ms=200.0)
    >>> needed(0.95), needed(0.99)
    (59, 299)
    >>> a = attainment(slo, [Request(True, 900.0, 150.0)] * 60)
    >>> a.state, round(a.lower, 3)
    ('meets', 0.951)
    >>> ladder = {1: a, 64: attainment(slo, [Request(True, 2500.0, 150.0)] * 60)}
    >>> capacity(ladder).line()
    'capacity 1 concurrent within TTFT <= 2000 ms, TPOT <= 200 ms at 95% (infeasible at 64: TTFT binds)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..metrics import RequestTiming
from .admission import JUDGED
from .verdicts import Kind, Test, Verdict

# scipy.stats is imported in the functions that use it: it costs about 0.45 s, which a collection, a plan, a
# usage error or `glm5 --help` never needs.
CONFIDENCE = 0.95  # one-sided, for each bound of an attainment
ATTAINMENT = "slo_attainment"  # the metric: a launch's share of requests within the SLO, gated as a floor
CAPACITY = "slo_capacity"  # the metric: the largest ladder concurrency within the SLO, gated as a floor


@dataclass(frozen=True)
class Slo:
    """The limits a request must keep to be good (ms; None: not part of this SLO) and the share that must."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    target: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"an SLO target is a share between 0 and 1 (0.95 for 95%), not {self.target}")
        if all(x is None for x in (self.ttft_ms, self.tpot_ms, self.e2e_ms)):
            raise ValueError("an SLO needs at least one limit: ttft_ms, tpot_ms or e2e_ms")
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"an SLO's {name} is a positive number of milliseconds, not {value}")

    def scaled(self, factor: float) -> Slo:
        """The same SLO on a clock `factor` times as fast (the emulator's rehearsal at 0.01: 2000 ms -> 20 ms)."""
        def by(ms: float | None) -> float | None:
            return None if ms is None else ms * factor
        return Slo(by(self.ttft_ms), by(self.tpot_ms), by(self.e2e_ms), self.target)

    def limits(self) -> dict[str, float]:
        """`{"TTFT": 2000.0, "TPOT": 200.0}`: the limits this SLO sets, by the name the line uses."""
        named = (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms), ("E2E", self.e2e_ms))
        return {name: value for name, value in named if value is not None}

    def describe(self) -> str:
        """`TTFT <= 2000 ms, TPOT <= 200 ms at 95%`."""
        return ", ".join(f"{k} <= {v:g} ms" for k, v in self.limits().items()) + f" at {self.target * 100:g}%"


@dataclass(frozen=True)
class Request:
    """What an SLO looks at in one request: whether it succeeded, its TTFT, its TPOT and its latency (ms; TPOT is
    None for a one-token reply, which has no time per output token and so cannot miss it)."""

    success: bool
    ttft_ms: float
    tpot_ms: float | None = None
    e2e_ms: float = 0.0


def misses(slo: Slo, r: Request) -> list[str]:
    """The limits this request broke (`["TTFT"]`); a failed request misses them all."""
    if not r.success:
        return list(slo.limits())
    got = {"TTFT": r.ttft_ms, "TPOT": r.tpot_ms, "E2E": r.e2e_ms}
    return [name for name, limit in slo.limits().items() if (x := got[name]) is not None and x > limit]


def needed(target: float, confidence: float = CONFIDENCE) -> int:
    """The fewest requests whose all-good run shows `target` attainment at `confidence` (one-sided Clopper-Pearson:
    the lower bound of n good of n is (1 - confidence)^(1/n))."""
    return math.ceil(math.log(1 - confidence) / math.log(target) - 1e-9)


def clopper_pearson(good: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact one-sided bounds of a binomial share at `confidence` each: (lower, upper)."""
    from scipy import stats as sps
    if n <= 0 or not 0 <= good <= n:
        raise ValueError(f"{good} good of {n} requests is not a count")
    alpha = 1 - confidence
    lower = 0.0 if good == 0 else float(sps.beta.ppf(alpha, good, n - good + 1))
    upper = 1.0 if good == n else float(sps.beta.ppf(1 - alpha, good + 1, n - good))
    return lower, upper


@dataclass(frozen=True)
class Attainment:
    """One point's attainment: good of sent, its exact bounds, and what they say against the target."""

    slo: Slo
    good: int
    sent: int
    lower: float
    upper: float
    binding: str  # the limit most misses broke ("" when none missed)

    @property
    def rate(self) -> float:
        """good / sent."""
        return self.good / self.sent if self.sent else 0.0

    @property
    def state(self) -> str:
        """`not judged` (too few requests), `meets`, `misses` or `undecided`."""
        if self.sent < needed(self.slo.target):
            return "not judged"
        if self.lower >= self.slo.target:
            return "meets"
        return "misses" if self.upper < self.slo.target else "undecided"

    @property
    def clears(self) -> bool:
        """Whether this point serves within the SLO, as capacity counts it (enough requests, the share at target)."""
        return self.state != "not judged" and self.rate >= self.slo.target

    def line(self) -> str:
        """`95.0% of 60 requests within TTFT <= 2000 ms, TPOT <= 200 ms at 95% (exact bounds 90.9%..98.3%): meets`."""
        if self.state == "not judged":
            return (f"{self.good} of {self.sent} requests within {self.slo.describe()}: not judged: needs "
                    f"{needed(self.slo.target)} requests")
        why = f"; {self.binding} binds" if self.binding and self.state != "meets" else ""
        return (f"{self.rate * 100:.1f}% of {self.sent} requests within {self.slo.describe()} (exact bounds "
                f"{self.lower * 100:.1f}%..{self.upper * 100:.1f}%): {self.state}{why}")


def attainment(slo: Slo, requests: Sequence[Request]) -> Attainment:
    """The attainment of these requests (every request sent counts; a failed one is a miss)."""
    counts: dict[str, int] = {}
    good = 0
    for r in requests:
        broke = misses(slo, r)
        good += not broke
        for name in broke:
            counts[name] = counts.get(name, 0) + 1
    n = len(requests)
    lower, upper = clopper_pearson(good, n) if n else (0.0, 1.0)
    binding = max(counts, key=lambda k: counts[k]) if counts else ""
    return Attainment(slo, good, n, lower, upper, binding)


@dataclass(frozen=True)
class Capacity:
    """The largest ladder concurrency within the SLO and the next one that is not: the bracket the true capacity
    lies in, with the limit that binds there."""

    slo: Slo
    feasible: int | None  # None: not even the lowest point clears
    infeasible: int | None  # None: every point measured clears (capacity is at least `feasible`)
    binding: str
    unjudged: tuple[int, ...] = ()  # points with too few requests to count

    def line(self) -> str:
        """`capacity 64 concurrent within ... (infeasible at 128: TTFT binds)`."""
        within = f"within {self.slo.describe()}"
        head = f"capacity {self.feasible} concurrent {within}" if self.feasible is not None else \
            f"capacity below the lowest point measured {within}"
        tail = f"infeasible at {self.infeasible}: {self.binding} binds" if self.infeasible is not None else \
            "every point measured is within it: at least that"
        skipped = f"; not judged at {', '.join(map(str, self.unjudged))} (too few requests)" if self.unjudged else ""
        return f"{head} ({tail}{skipped})"


def capacity(ladder: Mapping[int, Attainment]) -> Capacity:
    """The capacity bracket from a ladder's attainments (concurrency -> attainment): the largest point that clears,
    below the first that misses the target beyond doubt (its exact upper bound below it), so the bracket moves down
    only on evidence. Points with too few requests, and points below the target that their bounds leave undecided,
    neither clear nor break the ladder."""
    if not ladder:
        raise ValueError("capacity needs at least one measured point of the ladder")
    slo = next(iter(ladder.values())).slo
    feasible: int | None = None
    unjudged = tuple(c for c, a in sorted(ladder.items()) if a.state == "not judged")
    for c, a in sorted(ladder.items()):
        if a.state == "misses":
            return Capacity(slo, feasible, c, a.binding or "failures", unjudged)
        if a.clears:
            feasible = c
    return Capacity(slo, feasible, None, "", unjudged)


def missed_beyond_doubt(reference: float, launches: Sequence[Attainment], alpha: float) -> str | None:
    """Why an attainment series regressed on exact bounds (None: it did not show that): the reference met the target
    and every launch tonight misses it with its one-sided Clopper-Pearson upper bound at 1 - alpha below the target.
    A share of requests has its binomial error, which a t-test over a reference of identical launches (every one at
    100%) cannot see."""
    if not launches or reference < launches[0].slo.target:
        return None
    slo = launches[0].slo
    uppers = [clopper_pearson(a.good, a.sent, 1 - alpha)[1] for a in launches if a.sent]
    if len(uppers) < len(launches) or max(uppers) >= slo.target:
        return None
    return (f"the reference met the SLO ({reference * 100:.1f}%) and every launch tonight misses it beyond doubt "
            f"(exact upper bound {max(uppers) * 100:.1f}% < {slo.target * 100:g}% at {(1 - alpha) * 100:g}%): "
            f"{launches[-1].line()}")


def judge_attainment(verdicts: Sequence[Verdict], tonight: Sequence[Attainment], complete: bool,
                     alpha: float) -> None:
    """An SLO attainment that the reference met and every launch tonight misses beyond doubt is a regression on
    exact binomial bounds, whatever a t-test over identical reference launches left open; one below its floor but
    not beyond doubt is unresolved (changed in place). `complete`: every launch has its attainment."""
    for v in verdicts:
        if v.metric != ATTAINMENT or v.bound is None or v.verdict not in JUDGED or not complete or not tonight:
            continue
        why = missed_beyond_doubt(v.bound.value, tonight, alpha)
        if why is not None:
            v.verdict, v.note, v.stat, v.alone = Kind.REGRESSION, why, Test(), None
        elif v.verdict == Kind.REGRESSION:
            v.verdict, v.note = Kind.UNRESOLVED, ("below its floor, but not beyond doubt on exact bounds (the SLO "
                                                  "is missed beyond doubt or not at all): " + tonight[-1].line())


def requests_of(records: Sequence[RequestTiming]) -> list[Request]:
    """What an SLO looks at in each measured request (bench_serving's TPOT: the time after the first token over the
    tokens after it)."""
    return [Request(r.success, r.ttft * 1000.0,
                    (r.latency - r.ttft) * 1000.0 / (r.output_len - 1) if r.output_len > 1 else None,
                    r.latency * 1000.0) for r in records]
