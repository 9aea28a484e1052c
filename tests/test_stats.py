"""The statistics of verdicts, checked by simulation: error rates are measured, not assumed."""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace
from typing import cast

import pytest
from scipy import stats as sps

from pytest_glm5.judge.decide import ab, against_reference, per_launch
from pytest_glm5.judge.family import family
from pytest_glm5.judge.looks import Look
from pytest_glm5.judge.stats import ab_decision, benjamini_hochberg, compare, launches_needed, order_ci, spent
from pytest_glm5.judge.verdicts import Bound, Kind, Verdict
from pytest_glm5.judge.verdicts import Test as Stat
from pytest_glm5.metrics import geometric_mean, requests_needed


def _draw(rng: random.Random, n: int, cv: float, level: float = 1000.0) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, cv)) for _ in range(n)]


def test_compare_matches_scipys_pooled_t_test_on_logs() -> None:
    new, ref = [95.1, 94.8, 96.0], [100.2, 99.1, 101.0, 100.4]
    c = compare(new, ref, higher_is_better=True)
    t = sps.ttest_ind([math.log(x) for x in new], [math.log(x) for x in ref], equal_var=True, alternative="less")
    assert c.p_worse == pytest.approx(t.pvalue, rel=1e-9)
    assert c.p_better == pytest.approx(1 - t.pvalue, rel=1e-9)
    assert c.ci_low < c.change < c.ci_high < 0
    # Latency: higher is worse, so the same numbers read as better.
    lat = compare(new, ref, higher_is_better=False)
    assert lat.p_better == pytest.approx(c.p_worse) and lat.gain == pytest.approx(-c.gain)


def test_a_reference_mean_with_its_own_error_widens_the_test_by_it() -> None:
    # A reference moved by the box's shift carries the shift's standard error: the test's is the launches' and
    # that one in quadrature, t on the launches' degrees of freedom; the CV said is still the launches'.
    new, ref = [95.1, 94.8, 96.0], [100.2, 99.1, 101.0, 100.4]
    plain, moved = compare(new, ref, True), compare(new, ref, True, extra=0.01 ** 2)
    d = math.log1p(plain.change)
    se0 = plain.cv * math.sqrt(1 / 3 + 1 / 4)
    t = sps.t.cdf(d / math.sqrt(se0 ** 2 + 0.01 ** 2), plain.df)
    assert moved.p_worse == pytest.approx(t, rel=1e-9) and moved.p_worse > plain.p_worse
    assert moved.cv == pytest.approx(plain.cv) and moved.change == pytest.approx(plain.change)
    assert moved.ci_low < plain.ci_low and moved.ci_high > plain.ci_high
    assert moved.change_bounds(0.95) == pytest.approx((moved.ci_low, moved.ci_high))


def test_one_launch_a_side_has_no_spread_and_says_so() -> None:
    c = compare([95.0], [100.0], higher_is_better=True)
    assert not c.testable and "no spread" in c.describe()
    assert ab_decision(c, 0.02, 0.01, 0.05) == "UNKNOWN"
    # A prior (recorded references of the same variance) supplies the spread.
    with_prior = compare([95.0], [100.0], True, prior=[[100.0, 101.0, 99.0, 100.5]])
    assert with_prior.testable and with_prior.p_worse < 0.05 and with_prior.df == 3


def test_spending_adds_up_to_alpha_and_a_naive_retest_would_not() -> None:
    assert sum(spent(0.01, k, 3) for k in (1, 2, 3)) == pytest.approx(0.01)
    assert spent(0.01, 1, 1) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        spent(0.01, 4, 3)


def test_many_looks_spend_a_tiny_alpha_early_never_zero() -> None:
    # --glm5-max-repeats 15 or more: at c979bd9 the first look's alpha rounded to 0.0 (1 - cdf) and every perf test
    # failed with ZeroDivisionError in decide.py.
    for looks in (15, 22, 50, 100):
        assert spent(0.01, 1, looks) > 0
        assert sum(spent(0.01, k, looks) for k in range(1, looks + 1)) == pytest.approx(0.01)
    bound = Bound("output_throughput", "floor", 100.0, 0.05, launches=(100.0, 101.0, 99.0, 100.5, 99.5))
    v = against_reference("c", "s", "output_throughput", [99.0], [99.0], bound, {}, Look(0.01, 1, 22, 0.05))
    assert v.verdict == "pass" and 0 <= v.stat["p_adj"] <= 1


@pytest.mark.slow
def test_sequential_nightly_gate_keeps_its_false_alarm_rate() -> None:
    # No change, CV 2%, 8 reference launches, up to 3 new launches with alpha spending: the false-alarm rate
    # stays at most alpha (binomial slack for 4,000 trials: 0.01 + 3 sigma).
    rng = random.Random(7)
    trials, alarms = 4000, 0
    for _ in range(trials):
        ref = _draw(rng, 8, 0.02)
        bound = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(ref))
        new: list[float] = []
        for look in (1, 2, 3):
            new.append(_draw(rng, 1, 0.02)[0])
            v = against_reference("c", "s", "output_throughput", new, new, bound, {}, Look(0.01, look, 3))
            if v.verdict != "unresolved":
                break
        alarms += v.verdict == "regression"
    assert alarms / trials <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / trials)


def test_nightly_gate_finds_a_5_percent_drop_and_says_unresolved_when_it_cannot() -> None:
    rng = random.Random(3)
    ref = _draw(rng, 12, 0.02)
    bound = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(ref))
    slow = [x * 0.95 for x in _draw(rng, 3, 0.02)]
    v = against_reference("tp8", "single", "output_throughput", slow, slow, bound, {}, Look(0.01, 3, 3))
    assert v.verdict == "regression" and v.stat["p_worse"] < v.stat["alpha"]
    assert "vs 12 reference launches" in v.line() and "launches" in v.stat["describe"]
    # A 10% CV reference of 4 launches cannot rule out a 3% drop from one new launch, whatever it reads: never
    # "pass" (c979bd9 passed it), unresolved with what this run could see and what would resolve it.
    wide = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(_draw(rng, 4, 0.10)))
    for factor in (0.96, 1.0, 1.02):
        x = geometric_mean(wide.launches) * factor
        n = against_reference("tp8", "single", "output_throughput", [x], [x], wide, {}, Look(0.01, 1, 3))
        assert n.verdict == "unresolved", n.line()
        assert n.stat["worst"] is not None and n.stat["worst"] < -0.03
        assert f"rules out only a drop beyond {-n.stat['worst'] * 100:.1f}% (tolerance 3%)" in n.note
        assert "record more" in n.note or "would resolve it" in n.note or "more than a night affords" in n.note


@pytest.mark.slow
def test_pass_means_the_data_rule_out_a_drop_beyond_the_tolerance() -> None:
    # A drop of exactly the tolerance, at CVs 2-10%, with 1-5 new launches against 5 reference launches: "pass" in
    # at most 5% of trials (PASS_CONFIDENCE), where the old rule (observed change inside the tolerance) passed about
    # half of them. Unchanged series with tight data still pass.
    rng = random.Random(17)
    for cv in (0.02, 0.05, 0.10):
        trials, passed = 1500, 0
        for i in range(trials):
            ref = _draw(rng, 5, cv)
            bound = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(ref))
            new = [x * 0.97 for x in _draw(rng, 1 + i % 5, cv)]
            passed += against_reference("c", "s", "output_throughput", new, new, bound, {}, Look(0.01)).verdict \
                == "pass"
        assert passed / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials), (cv, passed)
    tight = tuple(_draw(rng, 8, 0.003))
    same = list(_draw(rng, 3, 0.003))
    v = against_reference("c", "s", "output_throughput", same, same,
                          Bound("output_throughput", "floor", 1000.0, 0.03, launches=tight), {}, Look(0.01))
    assert v.verdict == "pass" and v.stat["worst"] is not None and v.stat["worst"] > -0.03


def test_ab_answers_same_different_unknown() -> None:
    rng = random.Random(11)
    a, same = _draw(rng, 6, 0.01), _draw(rng, 6, 0.01)
    look = Look(0.01, 1, 1, 0.05)
    assert ab("c", "s", "output_throughput", a, same, ("base", "base"), same, look).stat["answer"] == "SAME"
    slow = [x * 0.9 for x in _draw(rng, 6, 0.01)]
    v = ab("c", "s", "output_throughput", a, slow, ("base", "slow"), slow, look)
    assert v.stat["answer"] == "DIFFERENT/worse" and v.verdict == "regression"
    two = ab("c", "s", "output_throughput", a[:2], slow[:2], ("base", "slow"), slow[:2], look)
    assert two.stat["answer"] in ("UNKNOWN", "DIFFERENT/worse")


def test_benjamini_hochberg_and_the_family_downgrade() -> None:
    assert benjamini_hochberg([0.001, 0.02, 0.03, 0.9], 0.05) == [True, True, True, False]
    assert benjamini_hochberg([0.02, 0.02], 0.01) == [False, False]
    rng = random.Random(5)
    ref = _draw(rng, 8, 0.02)
    bound = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(ref))
    # One series 4% low at p just under its own alpha, among 40 unchanged series: not confirmed over the family.
    vs = [against_reference("c", f"s{i}", "output_throughput", [x], [x], bound, {}, Look(0.01))
          for i, x in enumerate(_draw(rng, 40, 0.02))]
    weak = next((v for v in vs if v.verdict == "regression"), None)
    if weak is None:  # none this seed: plant one just under its own alpha
        weak = vs[0] = replace(vs[0], verdict=Kind.REGRESSION,
                               stat=cast(Stat, {**vs[0].stat, "p_adj": 0.009, "p_worse": 0.009}))
    decided = family(vs, 0.01).verdicts[vs.index(weak)]
    assert decided.verdict == "unresolved" and "not significant across the run's 1 config (" in decided.note


def test_launches_needed_follows_the_normal_formula() -> None:
    # Two-sample: n = 2 (z_a + z_b)^2 (CV / d)^2 = 2 * (2.326 + 1.645)^2 * (0.02 / 0.0488)^2 = 5.3 -> 6.
    assert launches_needed(0.02, 0.05, 0.01, None) == 6
    assert launches_needed(0.02, 0.05, 0.01, 20) == 4
    assert launches_needed(0.05, 0.05, 0.01, 4) is None  # the reference itself is too small


def test_per_launch_takes_the_geometric_mean_of_each_launch() -> None:
    assert per_launch([1.0, 4.0, 9.0], ["a", "a", "b"]) == pytest.approx([2.0, 9.0])


def test_latency_ceilings_bind_with_their_slack() -> None:
    # p99 TTFT of about 2 ms recorded over 6 launches, 0.5 ms slack: a 4x rise is a regression, jitter is not.
    rng = random.Random(2)
    ref = _draw(rng, 6, 0.06, level=2.0)
    bound = Bound("p99_ttft_ms", "ceiling", 2.0, 0.03, slack=0.5, launches=tuple(ref))
    four = [8.1, 7.9]
    v = against_reference("tp8", "single-stream", "p99_ttft_ms", four, four, bound, {}, Look(0.01, 2, 5))
    assert v.verdict == "regression" and v.stat["change"] > 2.5
    jitter = [2.3, 2.25]  # +14%: inside the slack's 25% of 2 ms, never a regression
    assert against_reference("tp8", "single-stream", "p99_ttft_ms", jitter, jitter, bound, {},
                             Look(0.01, 2, 5)).verdict in ("pass", "unresolved")
    steady = [2.05, 2.1]  # +4%: the data rule out a rise beyond the slack
    assert against_reference("tp8", "single-stream", "p99_ttft_ms", steady, steady, bound, {},
                             Look(0.01, 2, 5)).verdict == "pass"


@pytest.mark.parametrize(("cv", "n_ref"), [(0.02, 5), (0.05, 8), (0.14, None), (0.03, None)])
def test_detectable_drop_is_what_launches_needed_asks_for(cv: float, n_ref: int | None) -> None:
    from pytest_glm5.judge.stats import detectable_drop, launches_needed

    for n in (1, 2, 4, 8):
        if n_ref is None and n < 2:
            continue
        seen = detectable_drop(cv, n, 0.01, n_ref)
        # n launches suffice for the drop they can see, and not for a clearly smaller one.
        assert (launches_needed(cv, seen * 1.001, 0.01, n_ref) or 10**9) <= n
        assert (launches_needed(cv, seen * 0.8, 0.01, n_ref) or 10**9) > n


def test_order_statistics_bound_a_quantile_without_a_distribution() -> None:
    # Ranks of Binomial(n, q): for the median of 1..99, the 95% CI is the 40th..60th values (39..59 0-based + 1).
    lo, hi = order_ci([float(x) for x in range(1, 100)], 0.5) or (0.0, 0.0)
    assert (lo, hi) == (40.0, 60.0)
    assert order_ci([1.0, 2.0, 3.0], 0.99) is None  # three values say nothing of a p99
    assert [requests_needed(q) for q in (0.5, 0.9, 0.95, 0.99)] == [2, 10, 20, 100]


def test_an_order_ci_brackets_the_percentile_of_the_same_values() -> None:
    # The page prints a pooled percentile beside its CI: the interpolated percentile must lie between the ranks.
    from pytest_glm5.metrics import percentile

    rng = random.Random(3)
    for n in (2, 3, 10, 40, 100, 128, 257, 384, 1000, 3072):
        xs = sorted(rng.lognormvariate(0, 0.5) for _ in range(n))
        for q in (0.5, 0.9, 0.95, 0.99):
            ci = order_ci(xs, q)
            if ci is not None:
                assert ci[0] <= percentile(xs, q * 100) <= ci[1], (n, q, ci)


def test_a_night_noisier_than_its_reference_cannot_pass_on_one_lucky_launch() -> None:
    from pytest_glm5.judge.decide import against_the_night

    rng = random.Random(9)
    bound = Bound("output_throughput", "floor", 1000.0, 0.03, launches=tuple(_draw(rng, 5, 0.01)))
    lucky = [geometric_mean(bound.launches) * 1.01]  # one launch, 10% slower code on a +11% launch factor
    v = against_reference("mscclpp", "c1", "output_throughput", lucky, lucky, bound, {}, Look(0.01))
    assert v.verdict == "pass"  # against its reference's 1% spread alone
    night = [Verdict(c, "c1", "output_throughput", 1.0, bound, "unresolved", launches=_draw(rng, 5, 0.10),
                     stat={"cv": 0.1}) for c in ("tp8", "ep8")]  # tonight, other configs' launches spread 10%
    judged = against_the_night([v, *night])
    assert judged[0].verdict == "unresolved" and v.verdict == "pass"  # a copy; the given one is unchanged
    assert "this run's launches spread wider than the test saw" in judged[0].note
    assert judged[0].stat["worst"] is not None and judged[0].stat["worst"] < -0.03
    quiet = [Verdict(c, "c1", "output_throughput", 1.0, bound, "unresolved", launches=_draw(rng, 5, 0.005),
                     stat={"cv": 0.005}) for c in ("tp8", "ep8")]
    assert against_the_night([v, *quiet])[0] is v  # a night as quiet as the reference changes nothing
    # Drafts accepted are the text's, not the box's speed: a noisy night leaves an acceptance verdict alone.
    accept = Bound("spec_accept_length", "floor", 2.56, 0.03, launches=(2.56,) * 12)
    a = against_reference("tp8-mtp", "c1", "spec_accept_length", [2.56], [2.56], accept, {}, Look(0.01))
    assert a.verdict == "pass" and against_the_night([a, *night])[0] is a


def test_an_ab_line_gives_each_threshold_once_on_the_rules_own_interval() -> None:
    # On the H200 an A/B line read "rules out only a drop beyond 2.9% (tolerance 5%) ...; tolerance 2%" under a
    # table column "95% CI" while SAME is decided on a 98% CI, and an UNKNOWN read as if inside the tolerance.
    from pytest_glm5.judge.decide import ab
    from pytest_glm5.judge.looks import Look
    from pytest_glm5.report.terminal import verdict_table

    look = Look(alpha=0.01, look=1, looks=2, effect=0.05)
    v = ab("tp8", "c1", "output_throughput", [100.0, 104.0, 97.0, 101.0], [95.0, 99.0, 92.0, 97.0], ("base", "slow"),
           [95.0, 99.0, 92.0, 97.0], look)
    assert v.verdict == "unresolved" and v.stat["answer"] == "UNKNOWN"
    line = v.line()
    # Two thresholds, each with one value wherever it is named: SAME's margin and DIFFERENT's tolerance.
    assert set(re.findall(r"\+-(\d+)%", line)) == {"5"} and re.findall(r"beyond (\d+)%", line) == ["2"], line
    assert line.count("CV ") == 1 and "98% CI" in line
    assert "SAME if the 98% CI lies inside +-5%, DIFFERENT if p < " in line
    lo, hi = v.stat["ci"]
    assert f"not SAME (the 98% CI {lo * 100:+.1f}%..{hi * 100:+.1f}% is not inside +-5%)" in line
    assert "not DIFFERENT (" in line and "per-arm launch" in line
    assert lo < -0.05  # the interval it shows is the one that keeps it from SAME
    assert "change (98% CI)" in verdict_table([v])[1]


def test_a_references_spread_is_judged_by_its_upper_bound() -> None:
    from pytest_glm5.judge.stats import cv_upper

    # Two launches that agree by luck (the H200's 35.0 and 34.0 tok/s: CV 2%) bound the spread near 8% at 80%.
    assert cv_upper(0.02, 2) == pytest.approx(0.0789, abs=1e-3)
    assert cv_upper(0.02, 12) < cv_upper(0.02, 4) < cv_upper(0.02, 2) and cv_upper(0.02, 12) > 0.02
    assert cv_upper(0.02, 1) == float("inf") and cv_upper(0.0, 5) == 0.0
