"""What a run costs on the box: durations, the plan, the budget that bounds rounds, costs recorded with the
baselines, and `--glm5-plan` that launches nothing."""

from __future__ import annotations

import re

import pytest
from plugin_helpers import TWO_SCENARIOS, assert_no_server_left, report, said_lines, write_configs

from pytest_glm5.night.plan import (
    ASSUMED_CANARY_S,
    ASSUMED_S_PER_QUESTION,
    Budget,
    Checks,
    ConfigCost,
    Night,
    Plan,
    config_cost,
)
from pytest_glm5.settings import parse_duration


def test_durations_read_as_a_night_is_told() -> None:
    assert [parse_duration(x) for x in ("8h", "1.5h", "90m", "45min", "3600s", "3600")] == \
        [28800.0, 5400.0, 5400.0, 2700.0, 3600.0, 3600.0]
    for bad in ("", "8 hours", "-1h", "h", "1e9h"):
        with pytest.raises(ValueError, match="is not a duration: write 8h, 90m, 45min, 3600s or 3600"):
            parse_duration(bad)
    # A number it reads but cannot take is told so, not called "not positive" (1e9h was).
    for bad in ("0", "0h", "9000h"):
        with pytest.raises(ValueError, match="must be a duration above 0 and at most a year"):
            parse_duration(bad)


def _costs(n: int, load: float = 1800.0, measure: float = 840.0) -> list[ConfigCost]:
    return [ConfigCost(f"c{i}", 7, load, measure, "assumed") for i in range(n)]


def test_a_plan_says_what_fits_in_the_budget() -> None:
    # 13 configs at 30 min load + 14 min measuring: 9.5 h of first launches do not fit a night of 8 h.
    over = Plan(_costs(13), 8 * 3600, rounds=4).lines()[-1]
    assert over.startswith("13 configs: first launches 9.5 h; with up to 4 rounds each 47.7 h; budget 8.0 h: "
                           "NOT ENOUGH for the planned launches: 10 configs fit, c10, c11, c12 would not run")
    some = Plan(_costs(8), 8 * 3600, rounds=4).lines()[-1]
    assert some.endswith("budget 8.0 h: about 2 rounds fit after the planned launches (they go to unresolved "
                         "series in run order)")
    assert Plan(_costs(2), 8 * 3600, rounds=4).lines()[-1].endswith("budget 8.0 h: every round fits")
    assert "no budget" in Plan(_costs(2), None).lines()[-1]


def test_the_answer_checks_are_priced_per_launch_and_once_a_night() -> None:
    # Nothing recorded: the canary on each launch and the accuracy set on the first, at the assumed speeds.
    assumed = config_cost("tp8", 7, None, None, Checks(canary=True, questions=1319))
    assert assumed.canary_s == ASSUMED_CANARY_S and assumed.accuracy_s == pytest.approx(1319 * ASSUMED_S_PER_QUESTION)
    assert assumed.source.endswith("; canary and accuracy assumed")
    assert assumed.night_s(3) == pytest.approx(3 * (1800 + 30 + 840) + 1319 * 0.8)
    # What this box recorded: its canary and its seconds a question (the recorded set had 400), scaled to tonight's.
    stored = {"load_s": 2400.0, "measure_s": 700.0, "tests": 7, "canary_s": 9.0, "accuracy_s": 200.0,
              "questions": 400, "source": "measured 2026-12-04 over 3 launches"}
    got = config_cost("tp8", 7, stored, None, Checks(canary=True, questions=1319))
    assert (got.canary_s, got.accuracy_s, got.source) == (9.0, pytest.approx(659.5), stored["source"])
    assert got.launch_s == 2400 + 9 + 700
    off = config_cost("tp8", 7, stored, None, Checks(canary=False))
    assert (off.canary_s, off.accuracy_s, off.launch_s) == (0.0, 0.0, 3100.0)
    plan = Plan([got], 8 * 3600, rounds=4)
    assert plan.lines()[1].split()[:8] == ["tp8", "7", "40", "min", "9", "s", "12", "min"]
    assert plan.first_s == pytest.approx(got.launch_s + 659.5) and plan.most_s == pytest.approx(5 * got.launch_s +
                                                                                              659.5)
    night = Night(8 * 3600, 1, 4)
    night.make_plan([got])
    assert night.budget is not None and night.budget.first == {"tp8": pytest.approx(got.launch_s + 659.5)}


def test_recorded_costs_hold_the_checks_apart_from_the_measuring() -> None:
    night = Night(None, 1, 4)
    night.measure_s["t"], night.tests_run["t"] = 1000.0, 2
    checks = {"t": {"first_s": 100.0, "canary_s": 10.0, "accuracy_s": 90.0, "questions": 64.0}}
    real = night.to_record({"t": [300.0, 320.0]}, {"t": None}, 1.0, "2026-12-04", {}, checks)["t"]
    # The first launch's measuring held its load and both checks: measuring alone is what is left.
    assert (real["measure_s"], real["canary_s"], real["accuracy_s"], real["questions"]) == (600.0, 10.0, 90.0, 64)
    sim = night.to_record({"t": [3.0]}, {"t": 1800.0}, 0.01, "2026-12-04", {}, checks)["t"]
    assert (sim["load_s"], sim["measure_s"], sim["canary_s"], sim["accuracy_s"]) == (1800.0, 89700.0, 1000.0, 9000.0)
    bare = night.to_record({"t": [300.0]}, {"t": None}, 1.0, "2026-12-04", {}, None)["t"]
    assert "canary_s" not in bare and "questions" not in bare and bare["measure_s"] == 700.0


def test_a_budget_keeps_the_first_launches_of_configs_not_yet_run() -> None:
    b = Budget(3600.0, {"a": 1000.0, "b": 1000.0})
    assert b.begin("a") is None and b.charged == 1000.0
    assert b.round("a", 1000.0) is None  # 2000 charged + b's 1000 kept = 3000 <= 3600
    why = b.round("a", 1000.0)
    assert why == ("budget 1.0 h: 33 min spent, a round costs about 17 min and 17 min is kept for the configs not "
                   "yet run")
    assert b.begin("b") is None and b.begin("b") is None and b.charged == 3000.0  # charged once
    assert b.begin("c") is None  # a config outside the plan costs nothing known: it may start
    assert b.round("b", 1000.0) is not None
    late = Budget(1500.0, {"a": 1000.0, "b": 1000.0})
    assert late.begin("a") is None
    assert late.begin("b") == "budget 25 min: 17 min planned so far, its launches need about 17 min; not run"


def test_the_launches_a_schedule_gives_are_drawn_by_rounds_and_optional_configs_yield_theirs() -> None:
    # "s" was given 2 launches beyond its first (a suspect's), charged when it begins; "o" is optional.
    b = Budget(4000.0, {"s": 3000.0, "o": 1000.0}, prepaid={"s": 2000.0}, optional={"o"})
    assert b.begin("s") is None and b.charged == 3000.0
    assert b.round("s", 1000.0) is None and b.charged == 3000.0  # drawn from what it was given
    # Its second given launch is not spent (the suspect cleared): the next config's start returns it.
    assert b.begin("o") is None and b.charged == 3000.0 and b.prepaid == {}
    # An optional config's time may go to a round of what an earlier config found; it then does not run.
    c = Budget(2500.0, {"a": 1000.0, "o": 1000.0}, optional={"o"})
    assert c.begin("a") is None and c.round("a", 1000.0) is None
    assert c.begin("o") == ("budget 42 min: 33 min planned so far, its launches need about 17 min; not run "
                            "(tonight's rounds took its time; the schedule runs it on a later night)")


def test_a_pressing_round_keeps_only_the_lead_s_time() -> None:
    # "d" found a drop its config test already holds (judge/suspects.pressing); "r" is a reference (the schedule's
    # lead), "m" merely due. A plain round keeps both first launches; a pressing one keeps only the lead's.
    def night() -> Budget:
        return Budget(3500.0, {"d": 1000.0, "r": 1000.0, "m": 1000.0}, lead={"r"})
    plain = night()
    assert plain.begin("d") is None
    assert plain.round("d", 1000.0) == ("budget 58 min: 17 min spent, a round costs about 17 min and 33 min is kept "
                                        "for the configs not yet run")
    b = night()
    assert b.begin("d") is None and b.round("d", 1000.0, pressing=True) is None and b.yielded == {"m"}
    assert b.round("d", 1000.0, pressing=True) is not None  # the lead's launch is kept
    assert b.begin("r") is None
    assert b.begin("m") == ("budget 58 min: 50 min planned so far, its launches need about 17 min; not run (a "
                            "pressing drop's rounds took its time; the schedule runs it on a later night)")
    # Without a schedule (no lead: every config runs tonight or on no night) pressing changes nothing.
    alone = Budget(3500.0, {"d": 1000.0, "r": 1000.0, "m": 1000.0})
    assert alone.begin("d") is None and alone.round("d", 1000.0, pressing=True) is not None and not alone.yielded
    # Where the round fits anyway, nothing is yielded.
    roomy = Budget(9000.0, {"d": 1000.0, "m": 1000.0}, lead=set())
    assert roomy.begin("d") is None and roomy.round("d", 1000.0, pressing=True) is None and not roomy.yielded




def test_plan_prints_and_launches_nothing(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    result = pytester.runpytest("--glm5-plan", "--glm5-budget", "8h")
    assert result.ret == 0
    said_lines(result, ["glm5: plan: config * tests * load * canary * measure * launch *accuracy  source",
                        "glm5: plan: t * 2 * 0 s * 30 s * 0 s  load modeled by profile tiny, 2 min a test assumed; "
                        "canary assumed",
                        "glm5: plan: 1 config: first launches *; budget 8.0 h: every round fits",
                        "glm5: plan: no history (--glm5-history DIR): nothing carries from earlier nights*"])
    assert "passed" not in result.stdout.str()
    assert_no_server_left(model, wait=0.5)
    bad = pytester.runpytest("--glm5-budget", "tonight")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["*--glm5-budget = 'tonight' is not a duration: write 8h, 90m, 45min, 3600s or 3600*"])


@pytest.mark.slow
def test_recording_keeps_the_costs_and_a_budget_stops_rounds(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    noisy = ("--glm5-sim-noise", "0.1")
    # The tiny profile has no launch-to-launch spread: two launches are a reference that resolves its tolerance.
    assert pytester.runpytest("--update-baselines", "--glm5-launches", "2").ret == 0
    text = next((pytester.path / "baselines").rglob("*.toml")).read_text()
    assert "[costs.t]" in text and "tests = 2" in text and "launches = " in text  # 2, or more on a loaded machine
    plan = pytester.runpytest("--glm5-plan")
    said_lines(plan, ["glm5: plan: t * 2 *rehearsal *: modeled load, measuring in model time"])
    # Recording one of its two tests measures a part of a launch: the cost stays the whole launch's, and says why.
    part = pytester.runpytest("--update-baselines", "-k", "c1")
    said_lines(part, ["  t: * launch cost (not recorded: this run left out some of its tests (-k, -m), and a part is "
                      "no launch)*"])
    assert next((pytester.path / "baselines").rglob("*.toml")).read_text().split("[costs.t]")[1] == \
        text.split("[costs.t]")[1]
    # A budget the first launch fits in and no round: a halving seen on one launch is not confirmed (that needs a
    # second), the run says why there is none and ends with what it has.
    first = sum(float(text.split(f"{key} = ")[1].split()[0]) for key in ("load_s", "measure_s", "canary_s"))
    tight = pytester.runpytest("--glm5-budget", f"{first * 1.5:.3f}s", "--glm5-sim-slowdown", "0.5", *noisy,
                               "--glm5-report", "report.json")
    said_lines(tight, ["glm5: t: no round 2 (2 series left unresolved): budget *: * spent, a round costs about *"])
    assert report(pytester)["run"]["launches"]["t"]["launches"] == 1
    said_lines(tight, ["launches: t 1; 1 launches in *; * of the budget's * as the plan prices them"])


@pytest.mark.slow
def test_recording_measures_until_the_reference_can_resolve_its_tolerance(pytester: pytest.Pytester) -> None:
    import math
    import statistics
    import tomllib

    from pytest_glm5.judge.decide import to_resolve
    from pytest_glm5.judge.stats import detectable_drop
    from pytest_glm5.perf.fixture import RECORDING_CAP

    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    rec = pytester.runpytest("--update-baselines", "--glm5-sim-noise", "0.1", "--glm5-report", "report.json")
    assert rec.ret == 0, rec.stdout.str()
    doc = tomllib.loads(next((pytester.path / "baselines").rglob("*.toml")).read_text())
    for scenario in ("c1", "c2"):
        entry = doc["t"][scenario]["output_throughput"]
        launches = entry["launches"]
        cv = statistics.stdev(math.log(x) for x in launches)
        # Stopped early only where the reference resolves the 5% tolerance within a night's 5 looks; else at the cap.
        n = to_resolve(cv, 0.05, len(launches))
        assert len(launches) == RECORDING_CAP or (n is not None and n <= 5), (launches, cv)
        assert entry["detectable"] == pytest.approx(detectable_drop(cv, 1, 0.01, len(launches)), abs=1e-4)
    assert report(pytester)["run"]["launches"]["t"]["launches"] >= 2


@pytest.mark.slow
def test_unresolved_advice_is_priced_in_time_on_this_box(pytester: pytest.Pytester) -> None:
    import tomlkit

    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    assert pytester.runpytest("--update-baselines", "--glm5-launches", "2").ret == 0
    path = next((pytester.path / "baselines").rglob("*.toml"))
    doc = tomlkit.parse(path.read_text())
    for scenario in ("c1", "c2"):  # a reference of 8 launches spread 4% around its floor: one new launch that
        entry = doc["t"][scenario]["output_throughput"]  # lands on it can rule out only about an 8% drop
        floor = float(entry["floor"])
        entry["launches"] = [round(floor * f, 4) for f in (0.94, 1.05, 0.98, 1.06, 0.95, 1.0, 1.03, 0.99)]
    path.write_text(tomlkit.dumps(doc))
    result = pytester.runpytest("--glm5-max-repeats", "1", "--glm5-report", "report.json")
    unresolved = [v for v in report(pytester)["verdicts"] if v["verdict"] == "unresolved"]
    assert len(unresolved) == 2, result.stdout.str()
    for v in unresolved:
        # One count: the launches to add, priced (it said "about 5 new launches would resolve it ...; another
        # launch of tp8 may resolve it: 44 min", two counts for one quantity).
        assert re.search(r"; about (\d+) more new launch(es)? would resolve it \(80% power\): [\d.]+ \w+ on this box",
                         v["note"]), v["note"]
        assert v["note"].count("launch") == 3 and v["note"].endswith("a launch, the plan's price)"), v["note"]


@pytest.mark.slow
def test_recording_ends_with_what_it_wrote_and_spends_no_round_that_cannot_change_it(
        pytester: pytest.Pytester) -> None:
    # A night without a win spent 20 rounds on two configs whose references already held 12 launches, recorded none
    # of them, wrote [costs] without a commit in their provenance, and said nothing about what it wrote.
    import tomlkit

    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    first = pytester.runpytest("--update-baselines", "--glm5-launches", "2")
    assert first.ret == 0
    said_lines(first, ["--update-baselines, per config (review with git diff baselines/):",
                       "  t: wrote 2 (2 new); launch cost (load * s, measuring * s over 2 tests, canary * s a launch)"])
    path = next((pytester.path / "baselines").rglob("*.toml"))
    doc = tomlkit.parse(path.read_text())
    provenance = doc["costs"]["t"]["provenance"]
    assert provenance["commit"] and provenance["hardware"] == path.parent.name and provenance["build"] == "default"
    for scenario in ("c1", "c2"):  # references at the recording cap (12 launches), spread 5%
        entry = doc["t"][scenario]["output_throughput"]
        floor = float(entry["floor"])
        entry["launches"] = [round(floor * (1 + 0.05 * ((i % 5) - 2) / 2), 4) for i in range(12)]
    path.write_text(tomlkit.dumps(doc))
    again = pytester.runpytest("--update-baselines", "--glm5-report", "r.json")
    assert again.ret == 0, again.stdout.str()
    assert report(pytester, "r.json")["run"]["launches"]["t"]["launches"] == 1  # no round
    said_lines(again, ["  t c1: no rounds: its references already hold 12 launches (the cap), so another launch "
                       "tonight cannot change what is recorded",
                       "  t c2: no rounds: *"])
    said_lines(again, ["  t: wrote 0; launch cost (*); left 2 as they were (*)"])
