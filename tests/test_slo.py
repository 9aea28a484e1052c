"""SLO attainment and capacity (judge/slo.py): the exact bounds keep their coverage, attainment is judged only with
enough requests, and capacity is the bracket the ladder shows, with the limit that binds."""

from __future__ import annotations

import pytest
from scipy import stats as sps

from pytest_glm5.judge.slo import Attainment, Request, Slo, attainment, capacity, clopper_pearson, misses, needed

SLO = Slo(ttft_ms=2000.0, tpot_ms=200.0)
GOOD = Request(True, 900.0, 150.0, 5000.0)
SLOW_FIRST = Request(True, 2500.0, 150.0, 6000.0)
SLOW_DECODE = Request(True, 900.0, 250.0, 9000.0)


def test_enough_requests_is_the_fewest_whose_all_good_run_shows_the_target() -> None:
    for target, n in ((0.95, 59), (0.99, 299), (0.9, 29)):
        assert needed(target) == n
        assert clopper_pearson(n, n)[0] >= target > clopper_pearson(n - 1, n - 1)[0]


@pytest.mark.parametrize("n", [20, 59, 100, 299])
def test_the_exact_bounds_cover_the_true_share_at_least_95_percent_of_the_time(n: int) -> None:
    # Coverage computed exactly over the binomial, not sampled: each one-sided bound must hold for every share.
    for p in (0.5, 0.8, 0.9, 0.95, 0.97, 0.99):
        pmf = [float(sps.binom.pmf(k, n, p)) for k in range(n + 1)]
        bounds = [clopper_pearson(k, n) for k in range(n + 1)]
        below = sum(w for w, (lo, _) in zip(pmf, bounds, strict=True) if lo <= p)
        above = sum(w for w, (_, hi) in zip(pmf, bounds, strict=True) if hi >= p)
        assert below >= 0.95 - 1e-9 and above >= 0.95 - 1e-9, (n, p, below, above)


def test_a_request_misses_what_it_broke_and_a_failure_misses_everything() -> None:
    assert misses(SLO, GOOD) == [] and misses(SLO, SLOW_FIRST) == ["TTFT"] and misses(SLO, SLOW_DECODE) == ["TPOT"]
    assert misses(SLO, Request(False, 0.0)) == ["TTFT", "TPOT"]
    assert misses(SLO, Request(True, 900.0, None)) == []  # a one-token reply has no TPOT to miss
    assert misses(Slo(e2e_ms=5500.0), SLOW_FIRST) == ["E2E"]


def test_attainment_says_meets_misses_undecided_or_how_many_requests_it_needs() -> None:
    assert attainment(SLO, [GOOD] * 60).state == "meets"
    few = attainment(SLO, [GOOD] * 40)
    assert few.state == "not judged" and few.line() == ("40 of 40 requests within TTFT <= 2000 ms, TPOT <= 200 ms at "
                                                        "95%: not judged: needs 59 requests")
    missing = attainment(SLO, [GOOD] * 40 + [SLOW_FIRST] * 15 + [SLOW_DECODE] * 5)
    assert missing.state == "misses" and missing.binding == "TTFT" and missing.line().endswith(": misses; TTFT binds")
    between = attainment(SLO, [GOOD] * 57 + [SLOW_DECODE] * 3)  # 95% of 60: the bounds straddle the target
    assert between.state == "undecided" and between.clears and between.lower < 0.95 < between.upper


def test_capacity_is_the_bracket_the_ladder_shows() -> None:
    ok, slow = [GOOD] * 60, [GOOD] * 40 + [SLOW_DECODE] * 20
    ladder = {1: attainment(SLO, ok), 16: attainment(SLO, ok), 64: attainment(SLO, slow), 256: attainment(SLO, slow)}
    c = capacity(ladder)
    assert (c.feasible, c.infeasible, c.binding) == (16, 64, "TPOT")
    assert c.line() == ("capacity 16 concurrent within TTFT <= 2000 ms, TPOT <= 200 ms at 95% (infeasible at 64: TPOT "
                        "binds)")
    # A point with too few requests neither clears nor breaks the ladder; it is named.
    thin = capacity({1: attainment(SLO, ok), 8: attainment(SLO, [GOOD] * 10), 16: attainment(SLO, ok)})
    assert (thin.feasible, thin.infeasible, thin.unjudged) == (16, None, (8,))
    assert thin.line().endswith("(every point measured is within it: at least that; not judged at 8 (too few "
                                "requests))")
    none = capacity({4: attainment(SLO, [Request(False, 0.0)] * 60)})
    assert none.feasible is None and none.line().startswith("capacity below the lowest point measured")


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"ttft_ms": 100.0, "target": 95.0}, "between 0 and 1 (0.95 for 95%), not 95.0"),
    ({}, "needs at least one limit"),
    ({"tpot_ms": -1.0}, "tpot_ms is a positive number of milliseconds, not -1.0"),
])
def test_a_wrong_slo_says_what_is_wrong(kwargs: dict[str, float], says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        Slo(**kwargs)


def test_a_bisection_stops_where_the_bounds_cannot_call_a_point_and_says_so() -> None:
    from pytest_glm5.judge.capacity import bisect, most_steps

    slo = Slo(ttft_ms=2000)
    meets, unsure = Attainment(slo, 64, 64, 0.95, 1.0, ""), Attainment(slo, 60, 64, 0.85, 0.98, "TTFT")
    found = bisect(16, 64, 2, lambda c: meets if c < 40 else unsure)
    assert [s.concurrency for s in found.steps] == [40]
    assert (found.feasible, found.infeasible) == (16, 64)
    assert found.stopped.startswith("stopped at 40: 93.8% of 64 requests within TTFT <= 2000 ms at 95% (exact")
    assert found.stopped.endswith("): undecided; TTFT binds")
    # Within the resolution at once, or a bracket upside down: nothing is measured, and the error says why.
    for args, says in (((16, 18, 4), "already within the resolution 4"), ((64, 16, 4), "the lower first"),
                       ((16, 64, 0), "resolution is a whole number")):
        with pytest.raises(ValueError, match=says):
            bisect(*args, lambda c: meets)
    assert most_steps(16, 64, 1) == 6 and most_steps(16, 17, 1) == 0
