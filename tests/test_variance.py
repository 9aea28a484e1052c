"""The box's variance model (judge/variance.py) and the run's config-level family decision (judge/decide.py family):
what a young series borrows, what a bad launch cannot do, honest degrees of freedom, and a config as one hypothesis
under the dependence a shared launch gives its series."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

from pytest_glm5.judge import decide, family
from pytest_glm5.judge.looks import Look
from pytest_glm5.judge.stats import cauchy_combination, compare, holm
from pytest_glm5.judge.variance import Spread, VarianceModel, fit_prior, nights_of
from pytest_glm5.judge.verdicts import Bound, Kind, Verdict
from pytest_glm5.judge.verdicts import Test as Stat


def _launches(rng: random.Random, n: int, cv: float, level: float = 100.0) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, cv)) for _ in range(n)]


def _family(rng: random.Random, configs: int, n: int, cv: float) -> dict[tuple[str, str, str], list[float]]:
    return {("single", "output_throughput", f"c{i}"): _launches(rng, n, cv) for i in range(configs)}


def test_a_young_series_borrows_its_familys_variance_and_a_stable_one_keeps_its_own() -> None:
    rng = random.Random(7)
    launches = _family(rng, 10, 12, 0.05)
    launches[("single", "output_throughput", "young")] = [100.0, 100.1]  # two launches that agree by luck
    m = VarianceModel.fit(launches)
    young = m.spread("single", "output_throughput", "young")
    assert young is not None and young.own_df == 1
    assert 0.035 < young.cv < 0.07  # the family's 5%, not its own 0.07%
    assert young.df > 60 and young.describe().startswith("pooled: 11 series, 122 launches, df ")
    # A series the family does not hold (another scenario) borrows the metric's, then the whole file's.
    other = m.spread("dual", "output_throughput", "c0")
    assert other is not None and other.family == "output_throughput" and other.own_df == 0


def test_the_family_lends_no_more_degrees_of_freedom_than_it_has() -> None:
    m = VarianceModel.fit(_family(random.Random(1), 3, 4, 0.03))
    sp = m.spread("single", "output_throughput", "c0")
    assert sp is not None and sp.df0 <= 2 * 3 and sp.df <= 3 * 3
    assert VarianceModel.fit(_family(random.Random(1), 2, 4, 0.03)).spread("single", "output_throughput", "c0") is None


def test_variances_that_disagree_lend_less_than_variances_that_agree() -> None:
    rng = random.Random(3)
    agree = [sum(rng.gauss(0, 1) ** 2 for _ in range(11)) / 11 for _ in range(40)]
    s0, d0 = fit_prior(agree, [11] * 40)
    assert d0 > 50 and 0.8 < s0 < 1.25  # one variance: the family lends much
    disagree = [v * (10.0 if i % 2 else 1.0) for i, v in enumerate(agree)]
    _, d1 = fit_prior(disagree, [11] * 40)
    assert d1 < 5  # a tenfold split: each series mostly keeps its own


def test_one_bad_launch_does_not_double_the_familys_variance() -> None:
    rng = random.Random(5)
    launches = _family(rng, 10, 12, 0.02)
    clean = VarianceModel.fit(launches).spread("single", "output_throughput", "c1")
    launches[("single", "output_throughput", "c0")][3] *= 0.85  # one launch 15% slow: 8 standard deviations
    bad = VarianceModel.fit(launches).spread("single", "output_throughput", "c1")
    assert clean is not None and bad is not None
    assert bad.var0 < 1.3 * clean.var0


def test_a_moderated_test_finds_a_drop_its_own_spread_alone_cannot_confirm() -> None:
    rng = random.Random(11)
    ref, new = _launches(rng, 12, 0.05), _launches(rng, 3, 0.05, 90.0)
    alone = compare(new, ref, higher_is_better=True)
    pooled = compare(new, ref, higher_is_better=True, lent=(0.05 ** 2, 200.0), pooled="pooled: 20 series")
    assert pooled.df == alone.df + 200
    assert "CV" in pooled.describe() and "(pooled: 20 series), 3 vs 12 launches" in pooled.describe()
    # The same data: the critical t at 13 degrees of freedom is about 1.4 times that at 213.
    assert pooled.p_worse < alone.p_worse


def test_a_verdict_says_where_its_variance_came_from() -> None:
    rng = random.Random(2)
    model = VarianceModel.fit(_family(rng, 6, 12, 0.04))
    sp = model.spread("single", "output_throughput", "c0")
    ref = tuple(_launches(rng, 12, 0.04))
    bound = Bound("output_throughput", "floor", 100.0, 0.05, launches=ref)
    v = decide.against_reference("c0", "single", "output_throughput", [88.0, 89.0], [88.0, 89.0], bound, {},
                                 Look(0.01), sp)
    assert "(pooled: 6 series, 72 launches, df " in v.stat["describe"]
    assert v.stat["pooled"]["series"] == 6 and v.stat["pooled"]["df"] == sp.df if sp else False


def _night(rng: random.Random, configs: int, series: int, drop: dict[int, float]) -> list[Verdict]:
    """One night's verdicts as their own tests left them: each series' one-sided p from a z that shares 70% of its
    variance with its config's other series (a launch moves them all); `drop`: config -> its z shift (all series)."""
    out = []
    for c in range(configs):
        shared = rng.gauss(0.0, 1.0)
        for s in range(series):
            z = math.sqrt(0.7) * shared + math.sqrt(0.3) * rng.gauss(0.0, 1.0) + drop.get(c, 0.0)
            p = NormalDist().cdf(-z)
            st = Stat(p_adj=p, p_adj_better=1 - p, p_worse=p, gain=-0.1 if p < 0.01 else 0.0, tolerance=0.05)
            out.append(Verdict(f"c{c}", f"s{s}", "output_throughput", 1.0, None,
                               Kind.REGRESSION if p < 0.01 else Kind.PASS, stat=st))
    return out


def test_a_config_is_one_hypothesis_a_night_under_any_dependence() -> None:
    rng = random.Random(17)
    nights = 3000
    false = sum(bool(family.family(_night(rng, 10, 15, {}), 0.01).confirmed) for _ in range(nights))
    # At most 1% of unchanged nights confirm anything (95% binomial bound over 3000 nights: 1.4%).
    assert false / nights <= 0.014, false


def test_a_drop_in_one_series_alone_is_still_found() -> None:
    vs = _night(random.Random(4), 10, 15, {})
    vs = [v for v in vs if v.verdict != Kind.REGRESSION]  # a night with no other alarm
    one = next(v for v in vs if v.config == "c3")
    one.verdict, one.stat = Kind.REGRESSION, Stat(p_adj=1e-6, p_adj_better=1.0, p_worse=1e-6, gain=-0.1)
    fam = family.family(vs, 0.01)
    assert [(v.config, v.scenario) for v in fam.confirmed] == [("c3", one.scenario)]
    assert fam.configs == 10 and fam.size == len(vs)


def test_what_the_family_does_not_confirm_says_why() -> None:
    vs = _night(random.Random(8), 10, 15, {})
    weak = next(v for v in vs if v.config == "c0")
    weak.verdict, weak.stat = Kind.REGRESSION, Stat(p_adj=0.004, p_adj_better=1.0, p_worse=0.004, gain=-0.1)
    [after] = [v for v in family.family(vs, 0.01).verdicts if v is not weak and v.config == "c0"
               and v.scenario == weak.scenario]
    assert after.verdict == Kind.UNRESOLVED and after.alone is not None and after.alone[0] == Kind.REGRESSION
    assert "not significant across the run's 10 configs (150 series; each config one test" in after.note


def test_the_combination_and_holm_on_their_own() -> None:
    assert cauchy_combination([]) == 1.0 and cauchy_combination([math.nan, 0.5]) == 0.5
    assert cauchy_combination([1e-20, 0.5]) == 2e-20  # past tan's precision: the tail
    assert holm([], 0.01) == [] and holm([0.02], 0.01) == [None]


def test_nights_noisier_than_the_recording_session_widen_the_model() -> None:
    rng = random.Random(9)
    refs = _family(rng, 8, 12, 0.02)  # recorded in one quiet session
    quiet = VarianceModel.fit(refs).spread("single", "output_throughput", "c0")
    runs = [{"series": [{"config": f"c{i}", "scenario": "single", "metric": "output_throughput", "build": "b",
                         "workload": "w", "ref": "r", "launches": _launches(rng, 1, 0.05)} for i in range(8)]}
            for _ in range(10)]  # ten nights at CV 5%, one launch each
    runs.append({"series": [{"config": "c0", "scenario": "single", "metric": "output_throughput", "launches": [1.0]}]})
    noisy = variance_of_nights(refs, runs)
    assert quiet is not None and noisy is not None
    assert quiet.cv < 0.03 and noisy.cv > 1.4 * quiet.cv  # the nights' spread is the box's too
    # What the series' test adds to its quiet reference: its own nine nights' degrees of freedom at their spread.
    assert noisy.nights_df == 9 and math.sqrt(noisy.lent[0]) > 1.5 * math.sqrt(quiet.lent[0])
    assert noisy.series == 8  # each config's reference and its nights are one series; a line without a build is none


def variance_of_nights(refs: dict[tuple[str, str, str], list[float]], runs: list[dict[str, object]]) -> Spread | None:
    return VarianceModel.fit({**refs, **nights_of(runs)}).spread("single", "output_throughput", "c0")


def test_a_series_that_improved_does_not_cancel_a_drop_beside_it() -> None:
    # A CI run: throughput -48% at p 3e-10 and the same config's TTFT 21% better (p 1.0): the p near 1 added a term
    # near minus infinity to the Cauchy sum, and the drop read "not significant across the run's 1 config".
    drop = Verdict("t", "c2", "output_throughput", 1.0, None, Kind.REGRESSION,
                   stat=Stat(p_adj=4e-10, p_adj_better=1.0, p_worse=2.6e-10, gain=-0.48, tolerance=0.3))
    better = Verdict("t", "c2", "median_ttft_ms", 1.0, None, Kind.IMPROVEMENT,
                     stat=Stat(p_adj=1.0, p_adj_better=1e-4, p_worse=1.0, gain=0.21, tolerance=0.3))
    fam = family.family([drop, better], 0.01)
    assert [v.metric for v in fam.confirmed] == ["output_throughput"]
    assert cauchy_combination([1e-6, 1.0]) < 1e-5


def _config_night(rng: random.Random, tonight: list[float], cv: float = 0.05,
                  series: int = 8) -> list[Verdict]:
    """One config's verdicts: each series' 12 reference launches and tonight's (`tonight`: each launch's shared
    change, every series), 70% of a launch's variance shared, judged as the gate judges them, with the family's
    spread lent."""
    def launch(change: float) -> list[float]:
        shared = rng.gauss(0.0, 1.0)
        return [100.0 * (1 + change) * math.exp(cv * (math.sqrt(0.7) * shared + math.sqrt(0.3) * rng.gauss(0, 1)))
                for _ in range(series)]

    refs = list(zip(*(launch(0.0) for _ in range(12)), strict=True))
    new = list(zip(*(launch(c) for c in tonight), strict=True))
    model = VarianceModel.fit({("sweep", "output_throughput", f"s{i}"): list(r) for i, r in enumerate(refs)})
    out = []
    for i in range(series):
        bound = Bound("output_throughput", "floor", 100.0, 0.05, launches=refs[i])
        out.append(decide.against_reference("c", f"s{i}", "output_throughput", list(new[i]), list(new[i]), bound, {},
                                            Look(0.01), model.spread("sweep", "output_throughput", f"s{i}")))
    return out


def test_one_outlier_launch_does_not_confirm_alone_and_a_drop_every_launch_shares_does() -> None:
    # At issue 39's heavy tail (1 launch in 20 15% slow on every series) the config's test read one such launch,
    # -25% beside a normal one, as a drop of every series: 8.4 false series-regressions per 100 nights.
    rng = random.Random(1)
    bad = _config_night(rng, [0.0, -0.25])  # without the rule (OUTLIER off) these launches confirm
    assert any(v.verdict == Kind.REGRESSION for v in bad)  # each series' own test reads it
    fam = family.family(bad, 0.01)
    assert not fam.confirmed
    assert all("launch 2 of 2 stands apart: -2" in v.note and "an outlier launch does not confirm alone" in v.note
               for v in fam.verdicts if v.alone and v.alone[0] == Kind.REGRESSION)
    # A drop every launch shares is confirmed on two launches, and with an outlier beside it on three.
    # (-15% and -14% at CV 5% are confirmed in 39 of 40 seeds with the rule; -12%, -11% and -35%: 31 of 40.)
    assert family.family(_config_night(rng, [-0.15, -0.14]), 0.01).confirmed
    assert family.family(_config_night(rng, [-0.15, -0.14, -0.40]), 0.01).confirmed


def test_a_family_whose_nights_spread_wider_than_its_references_lends_the_nights_spread() -> None:
    # Issue 39's cell "references recorded at CV 2%, nights at 5%": the family's prior came from the references (12
    # launches a series, against 2-3 a night's sample), so every test of a night read a CV of about 2.5% and
    # confirmed unchanged configs in 9.6 nights of 100.
    rng = random.Random(3)
    refs = _family(rng, 8, 12, 0.02)
    runs = [{"series": [{"config": f"c{i}", "scenario": "single", "metric": "output_throughput", "build": f"b{k}",
                         "workload": "w", "ref": "r", "launches": _launches(rng, 2, 0.05)} for i in range(8)]}
            for k in range(3)]  # three builds, a sample of two launches each: 24 degrees of freedom of nights
    noisy = variance_of_nights(refs, runs)
    assert noisy is not None and noisy.noisier and noisy.box_df == 24
    assert 0.035 < math.sqrt(noisy.lent[0]) < 0.07 and noisy.lent[1] == 24 + noisy.nights_df
    quiet = variance_of_nights(refs, [{"series": [{**e, "launches": _launches(rng, 2, 0.02)} for e in r["series"]]}
                                      for r in runs])
    assert quiet is not None and not quiet.noisier  # nights like the references: the prior lends as before
    assert Spread.from_dict(noisy.to_dict()) == noisy  # the report keeps it


def test_a_night_noisier_than_the_references_holds_its_confirmations() -> None:
    # Issue 39's cell again, on night 1 (no history): tp8-cutedsl's two launches against tp8's one, each config's
    # reference recorded at CV 2%, the night at 5%: "-13.9%, p 1e-09" on the references' spread. Every config's
    # first launch against its reference says the night spreads wider; at that spread it is not confirmed.
    rng = random.Random(12)
    refs = {c: _launches(rng, 8, 0.02) for c in ("a", "b", "c", "d", "e", "f")}
    tonight = {"a": [96.2, 90.3], "b": [108.3], **{c: _launches(rng, 1, 0.05) for c in ("c", "d", "e", "f")}}
    tonight["c"], tonight["d"] = [107.0], [93.5]  # a night at CV 5% spreads like this

    def own(c: str) -> Verdict:
        bound = Bound("output_throughput", "floor", 100.0, 0.05, launches=tuple(refs[c]))
        return decide.against_reference(c, "sweep", "output_throughput", tonight[c], tonight[c], bound, {},
                                        Look(0.01))

    verdicts = [own(c) for c in refs]
    versus = decide.against_config("a", "sweep", "output_throughput", tonight["a"], tonight["b"], "b",
                                   [refs["a"], refs["b"]], 0.05, Look(0.01), False)
    assert versus.verdict == Kind.REGRESSION and versus.stat["p_worse"] < 1e-4  # on the references' spread
    *_, held = decide.against_the_night(verdicts, [versus])
    assert held.verdict == Kind.UNRESOLVED and held.stat["p_worse"] > 1e-3, held.stat["p_worse"]
    assert "this run's launches spread wider than the test saw" in held.note
    # A night as quiet as the references keeps it.
    tonight.update({"c": [101.0], "d": [99.0], "e": [100.5], "f": [98.8]})
    quiet = decide.against_the_night([own(c) for c in refs], [versus])[-1]
    assert quiet.verdict == Kind.REGRESSION


def test_a_build_that_slows_every_config_is_not_the_nights_spread() -> None:
    # The night's spread reads each config's change from its reference about the other configs' mean change: a
    # kernel every config runs, 10% slower, moves them together. Read about no change, the same night had spread
    # "wider" (every config -10%) and undone every config's confirmation.
    rng = random.Random(21)
    refs = {c: _launches(rng, 8, 0.02) for c in "abcdef"}

    def own(c: str) -> Verdict:
        bound = Bound("output_throughput", "floor", 100.0, 0.05, launches=tuple(refs[c]))
        xs = _launches(rng, 2, 0.02, level=90.0)
        return decide.against_reference(c, "sweep", "output_throughput", xs, xs, bound, {}, Look(0.01))

    verdicts = [own(c) for c in refs]
    assert all(v.verdict == Kind.REGRESSION for v in verdicts)
    held = decide.against_the_night(verdicts)
    assert [v.verdict for v in held] == [Kind.REGRESSION] * 6, [v.note for v in held]
