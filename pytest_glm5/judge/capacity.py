"""`glm5 capacity`: the largest concurrency within an SLO, bisected between two points of a ladder.

The nightly suite's capacity is the bracket its ladder shows (slo.capacity), from points the night measures anyway.
Finer is a search against a running server: each step measures the middle concurrency with enough requests to show
the target (slo.needed) and keeps the half the boundary is in, until the bracket is `resolution` wide. A middle point
that its exact bounds cannot call (undecided) ends the search there, said so: a guess would be a capacity nobody
measured. The price comes before anything is sent (points, requests, output tokens), since on the box a point of
64 chat requests is minutes.

    >>> most_steps(16, 64, 4)
    4
    >>> from .slo import Slo, Attainment
    >>> slo = Slo(tpot_ms=300)
    >>> def measure(c: int) -> Attainment:  # within the SLO up to 40
    ...     return Attainment(slo, 64, 64, 0.95, 1.0, "") if c <= 40 else Attainment(slo, 0, 64, 0.0, 0.05, "TPOT")
    >>> found = bisect(16, 64, 4, measure)
    >>> [s.concurrency for s in found.steps], found.line()
    ([40, 52, 46, 43], 'capacity 40 concurrent within TPOT <= 300 ms at 95% (infeasible at 43: TPOT binds)')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .slo import Attainment, Slo


def most_steps(low: int, high: int, resolution: int) -> int:
    """How many middle points a search from [low, high] down to `resolution` wide measures at most."""
    return max(0, math.ceil(math.log2(max(1, high - low) / resolution)))


@dataclass
class Step:
    """One middle point measured: its concurrency and what its requests said against the SLO."""

    concurrency: int
    attained: Attainment


@dataclass
class Search:
    """The bracket a search narrowed [feasible, infeasible], each point it measured, and why it stopped early."""

    slo: Slo
    feasible: int
    infeasible: int
    steps: list[Step] = field(default_factory=list)
    stopped: str = ""  # why the search ended before the resolution ("" when it got there)
    binding: str = ""

    def line(self) -> str:
        """`capacity 40 concurrent within TPOT <= 300 ms at 95% (infeasible at 43: TPOT binds)`."""
        tail = f"infeasible at {self.infeasible}" + (f": {self.binding} binds" if self.binding else "")
        stop = f"; {self.stopped}" if self.stopped else ""
        return f"capacity {self.feasible} concurrent within {self.slo.describe()} ({tail}{stop})"


def bisect(low: int, high: int, resolution: int, measure: Callable[[int], Attainment]) -> Search:
    """Narrow [low, high] (low within the SLO, high not) to `resolution` wide by measuring middle points."""
    if not 1 <= low < high:
        raise ValueError(f"the bracket needs two concurrencies, the lower first (1 <= low < high), got {low}, {high}")
    if resolution < 1:
        raise ValueError(f"the resolution is a whole number of concurrent requests >= 1, got {resolution}")
    search: Search | None = None
    lo, hi = low, high
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        got = measure(mid)
        if search is None:
            search = Search(got.slo, lo, hi)
        search.steps.append(Step(mid, got))
        if got.state == "meets":
            lo = mid
        elif got.state == "misses":
            hi, search.binding = mid, got.binding or "failures"
        else:
            search.stopped = f"stopped at {mid}: {got.line()}"
            break
        search.feasible, search.infeasible = lo, hi
    if search is None:
        raise ValueError(f"[{low}, {high}] is already within the resolution {resolution}: nothing to measure")
    return search
