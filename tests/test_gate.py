"""Statistical verdicts, the A/B patch gate, `glm5 compare`, configs against their reference and known-issue
matching, through real pytest sessions on the emulator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from plugin_helpers import HARDWARE, TWO_SCENARIOS, assert_no_server_left, report, said_lines, write_configs

from pytest_glm5.cli import main as glm5

POINT = """
import pytest

@pytest.mark.server_config("{config}")
def test_point(perf):
    perf.check(perf.run("c1", concurrency=1, num_prompts=3, input_len=8, output_len=24, warmup=1, repeats=2),
               "c1", ["output_throughput"])
"""
BUILDS = """
[build.base]

[build.slow]
env = { GLM5_SIM_SLOWDOWN = "0.8" }
"""
# Launch-to-launch noise on the tiny profile (which has none of its own), as on a GPU box.
NOISE = ("--glm5-sim-noise", "0.02")


def _suite(pytester: pytest.Pytester, configs: str = "[config.t]\nflags = {}\n", config: str = "t") -> str:
    model = write_configs(pytester, configs + BUILDS)
    pytester.makepyfile(POINT.format(config=config))
    return model


def _answers(pytester: pytest.Pytester, name: str = "report.json") -> list[str]:
    return [v["test"]["answer"] for v in report(pytester, name)["verdicts"]]


@pytest.mark.slow
def test_ab_finds_a_slow_build_and_passes_an_unchanged_one(pytester: pytest.Pytester) -> None:
    model = _suite(pytester)
    slow = pytester.runpytest("--glm5-ab", "base,slow", "--glm5-report", "report.json", *NOISE)
    assert slow.ret == 1
    said_lines(slow, ["*t * c1 * output_throughput * build base * DIFFERENT/worse REGRESSION*",
                               "regressions (1):",
                               "  t c1 output_throughput * vs build base (* launches): -*(slow vs base*"])
    assert _answers(pytester) == ["DIFFERENT/worse"]
    runs = report(pytester)["results"][0]["runs"]
    # ABBA blocks: each arm visit its own server, A B B A, two repeats each; the first look spends almost no alpha
    # (O'Brien-Fleming), so at least two blocks ran.
    builds = [r["build"] for r in runs[::2]]
    assert builds[:4] == ["base", "slow", "slow", "base"] and len(builds) % 4 == 0 and len(builds) >= 8
    assert len({r["launch"] for r in runs}) == len(builds)
    assert [r["arm"] for r in runs[::2]][:4] == ["A", "B", "B", "A"]
    # The A/A at alpha 1e-4, not the default 0.01: at 0.01 the gate calls an unchanged build DIFFERENT in up to 1%
    # of runs by design (a fresh-clone CI of 2a442ed read -3.5%, p 0.00039 at CV 1.3%, 6 vs 6; 14 A/A runs here read
    # p_worse 0.037-0.94, about uniform), and a test must not fail 1 run in 100 of a correct gate.
    same = pytester.runpytest("--glm5-ab", "base,base", "--glm5-report", "same.json", "--glm5-alpha", "0.0001", *NOISE)
    assert same.ret == 0, same.stdout.str()
    assert _answers(pytester, "same.json") in (["SAME"], ["UNKNOWN"])
    # A real A/A: the arms are the ABBA positions, so each side holds its own launches and the change is a
    # measured one, not exactly 0 (at c979bd9 both arms were the pooled launches of "base": +0.0%, p 0.50).
    [v] = report(pytester, "same.json")["verdicts"]
    assert v["test"]["change"] != 0.0 and v["test"]["p_worse"] != 0.5
    assert sorted(v["test"]["launches_a"]) != sorted(v["launches"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_glm5_compare_agrees_with_the_ab_gate(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    _suite(pytester)
    for build, name in (("base", "base.json"), ("slow", "slow.json"), ("base", "base2.json")):
        # CV 1%: four launches a side are enough for SAME to rule out 5% at the emulator's own noise, but a CI run
        # under load read 1 unresolved (the host adds its share): six a side, as at CV 2%.
        result = pytester.runpytest("--glm5-build", build, "--glm5-launches", "6", "--glm5-report", name,
                                    "--glm5-sim-noise", "0.01")
        assert result.ret == 0, result.stdout.str()
    base, slow, base2 = (pytester.path / n for n in ("base.json", "slow.json", "base2.json"))
    capsys.readouterr()
    assert glm5(["compare", str(base), str(slow)]) == 1
    assert "REGRESSION t c1 output_throughput: DIFFERENT/worse: -" in capsys.readouterr().out
    assert glm5(["compare", str(base), str(base2)]) == 0
    assert "t c1 output_throughput: SAME" in capsys.readouterr().out
    (pytester.path / "bad.json").write_text("{not json")
    assert glm5(["compare", str(base), str(pytester.path / "bad.json")]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert glm5(["compare", str(base), str(pytester.path / "missing.json")]) == 2
    # Another machine's report is not compared without a word (at c979bd9 it was, silently).
    other = json.loads(base2.read_text())
    for v in other["verdicts"]:
        v["provenance"]["hardware"] = "8x-h200-sm90"
    (pytester.path / "h200.json").write_text(json.dumps(other))
    capsys.readouterr()
    assert glm5(["compare", str(base), str(pytester.path / "h200.json")]) == 2
    err = capsys.readouterr().err
    assert "two reports of different hardware or models" in err and "pass --mixed to compare anyway" in err, err
    assert glm5(["compare", str(base), str(pytester.path / "h200.json"), "--mixed"]) == 0
    # A merged report with a value that is not a number: one line, no traceback.
    broken = json.loads(base.read_text())
    broken["verdicts"][0]["measured"] = "fast"
    (pytester.path / "broken.json").write_text(json.dumps(broken))
    assert glm5(["merge", str(pytester.path / "broken.json")]) == 2
    assert "measured: 'fast' is not a number" in capsys.readouterr().err


def test_unknown_build_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest("--glm5-ab", "base,patched")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--glm5-ab: build 'patched' is not defined in *configs.toml; known: default, base, "
                                 "slow (add a [[]build.patched] table)"])
    result = pytester.runpytest("--glm5-ab", "base")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--glm5-ab = 'base' must be two build names, A,B*"])


@pytest.mark.slow
def test_nightly_gate_records_launches_then_finds_a_drop(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    recorded = pytester.runpytest("--update-baselines", "--glm5-launches", "4", *NOISE)
    assert recorded.ret == 0
    said_lines(recorded, ["  t c1 output_throughput: new -> * (new)"])
    path = next((pytester.path / "baselines").rglob("*.toml"))
    assert "launches = [" in path.read_text()
    # Four launches at least; on a busy machine their spread may not resolve the tolerance and the recording adds a
    # round (up to its cap), which it says in its launches line: every launch it made is a reference launch.
    made = int(re.search(r"^launches: t (\d+)\b", recorded.stdout.str(), re.M).group(1))  # type: ignore[union-attr]
    assert made >= 4
    quiet = pytester.runpytest("--glm5-report", "report.json", *NOISE)
    assert quiet.ret == 0, quiet.stdout.str()
    assert report(pytester)["verdicts"][0]["test"]["n_ref"] == made
    # A 20% slower decode: the test itself passes (no in-test statistics), the run's family decision fails it.
    slow = pytester.runpytest("--glm5-sim-slowdown", "0.8", "--glm5-report", "report.json", *NOISE)
    assert slow.ret == 1
    slow.assert_outcomes(passed=1, failed=1)  # the measurement passed; its gate item failed after the family decision
    said_lines(slow, ["1 series: 1 decided (1 regression); any false alarm among them held to 0.01*",
                      "regressions (1):", f"  t c1 output_throughput * vs {made} reference launches: -*"])




def _launches(pytester: pytest.Pytester, name: str = "report.json") -> dict[str, int]:
    return {c: x["launches"] for c, x in report(pytester, name)["run"]["launches"].items()}


@pytest.mark.slow
def test_a_launch_measures_every_scenario_of_its_config(pytester: pytest.Pytester) -> None:
    # Recording over 3 launches is 3 launches of the config, each measuring both scenarios (at c979bd9: 3 per
    # scenario, 6); a run whose series all resolve on the first launch launches the config once. At x2 time scale a
    # decode step outlasts a busy host's jitter (at x0.5 beside two busy processes c1 read client-bound).
    write_configs(pytester, "[config.t]\nflags = {}\n", scale=2.0)
    pytester.makepyfile(TWO_SCENARIOS)
    rec = pytester.runpytest("--update-baselines", "--glm5-launches", "3", "--glm5-report", "rec.json")
    assert rec.ret == 0, rec.stdout.str()
    # At least the 3 asked for: on a loaded machine the tiny emulator's launches can spread wider than a 3-launch
    # reference of the 5% tolerance allows, and recording then plans more (each still measuring both scenarios).
    assert _launches(pytester, "rec.json")["t"] >= 3
    said_lines(rec, ["glm5: t: round 2 (planned): a new launch measures c1, c2",
                     "glm5: t: round 3 (planned): a new launch measures c1, c2"])
    runs = {r["scenario"]: {x["launch"] for x in r["runs"]} for r in report(pytester, "rec.json")["results"]}
    # The 3 planned launches measured both; a round a busy machine adds goes to the series still unresolved alone.
    assert len(runs["c1"] & runs["c2"]) >= 3, runs
    # The tiny profile has no launch-to-launch noise: one launch resolves every series on a quiet machine, and the
    # config is launched once. A busy one may leave a series open: a round then measures only what is open.
    quiet = pytester.runpytest("--glm5-report", "report.json")
    assert quiet.ret == 0, quiet.stdout.str()
    rounds = [ln for ln in quiet.stdout.lines if re.match(r"glm5: t: round \d+ ", ln)]
    assert _launches(pytester) == {"t": 1 + len(rounds)}, quiet.stdout.str()
    assert all("unresolved" in ln for ln in rounds), rounds
    assert [v["verdict"] for v in report(pytester)["verdicts"]] == ["pass", "pass"]
    said_lines(quiet, ["2 series: 2 decided (2 pass); any false alarm among them held to 0.01*"])


@pytest.mark.slow
def test_unresolved_series_get_rounds_of_their_config(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    noisy = ("--glm5-sim-noise", "0.1")
    assert pytester.runpytest("--update-baselines", "--glm5-launches", "3", *noisy).ret == 0
    # A 20% drop against a 10% CV reference: one launch cannot resolve either series, so the config is launched again
    # for both together, up to the cap of 3 looks; neither may read "pass". (With a 6% drop a launch drawn 20% fast
    # rightly passed, about 1 run in 50: the pass rule bounds that only for drops beyond the tolerance's margin.)
    result = pytester.runpytest("--glm5-sim-slowdown", "0.8", *noisy, "--glm5-max-repeats", "3",
                                "--glm5-report", "report.json")
    assert result.ret in (0, 1)
    verdicts = report(pytester)["verdicts"]
    if all(v["test"].get("futile") for v in verdicts):
        # A first launch drawn fast (a 2-sigma draw at CV 10%, about 1 run in 40) rules out the 20% drop itself at
        # 95%; nothing two more looks could settle, so no round is spent, and the notes say so (issue 31's futility).
        assert _launches(pytester)["t"] == 1 and all(v["note"].endswith("no round is spent on it") for v in verdicts)
        return
    # A scenario whose first launch alone already rules out what its looks could settle gets no round (futility);
    # the others are measured again together, one launch of the config for all of them.
    again = sorted(v["scenario"] for v in verdicts if len(v["launches"]) > 1)
    assert again and all(v["test"].get("futile") for v in verdicts if len(v["launches"]) == 1), verdicts
    said_lines(result, [f"glm5: t: round 2 ({len(again)} scenario{'s' if len(again) > 1 else ''} unresolved): a new "
                        f"launch measures {', '.join(again)}"])
    assert 2 <= _launches(pytester)["t"] <= 3
    for v in report(pytester)["verdicts"]:
        assert v["verdict"] in ("unresolved", "regression"), v
        assert v["test"]["detectable"] > 0 and v["test"]["worst"] < 0
        if v["verdict"] == "unresolved" and "not significant across the run's" not in v["note"]:  # else: the family
            # At its last look, or stopped where the looks left could not reach the launches it needs (futility).
            assert (v["test"]["look"] == 3 and len(v["launches"]) == 3) or (
                v["test"].get("futile") and v["note"].endswith("no round is spent on it")), v
            assert "rules out only a drop beyond" in v["note"], v["note"]


@pytest.mark.slow
def test_config_judged_against_its_reference_config(pytester: pytest.Pytester) -> None:
    configs = """
[config.ref]
flags = {}

[config.fused]
flags = { sim-slowdown = 0.5 }
compare_to = "ref"

[config.known]
flags = { sim-slowdown = 0.5 }
compare_to = "ref"
expected_slower = true
"""
    model = write_configs(pytester, configs)
    # What is held is a -50% comparison, not a 5% one: at the default 5% tolerance a CPU-shared CI box made `known`
    # client-bound once (the client's own delay 3.3% of its figure, over half the tolerance), which drops its
    # comparison line. At 10% the client's share must reach 5% before the point is not judged.
    book = pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml"
    book.parent.mkdir(parents=True)
    book.write_text("[defaults]\ntolerance = 0.1\n")
    pytester.makepyfile("""
import pytest

CFGS = [pytest.param(n, marks=pytest.mark.server_config(n)) for n in ("ref", "fused", "known")]

@pytest.mark.parametrize("cfg", CFGS)
def test_point(perf, cfg):
    perf.check(perf.run("c1", concurrency=1, num_prompts=3, input_len=8, output_len=24, warmup=1, repeats=2),
               "c1", ["output_throughput"])
""")
    # No recording: the comparison is the same run's, two launches a config, and no baseline takes part in it
    # (recording three launches each first took 19 of this test's 30 s; recording is held in tests of its own).
    result = pytester.runpytest("--glm5-launches", "2", "--glm5-max-repeats", "2", "--glm5-no-canary", *NOISE)
    assert result.ret == 1  # fused is half as fast as ref on both its launches and declares no known cost
    said_lines(result, ["configs against their reference (same run; compare_to in the configs file):",
                                 "  fused vs ref: c1 output_throughput -[45]*% *] REGRESSION",
                                 "  known vs ref: c1 output_throughput -[45]*% *] (known cost)"])


KNOWN = """
[config.k]
flags = {{ {flag} }}
known_issue = "the CUTLASS tile does not fit"
known_issue_match = "CUTLASS"
"""


def test_known_issue_holds_only_when_its_text_matches(pytester: pytest.Pytester) -> None:
    # A flag SGLang 0.5.23 does not have: the preflight fails, which is not the known CUTLASS failure.
    write_configs(pytester, KNOWN.format(flag='no-such-flag = 1'))
    pytester.makepyfile(POINT.format(config="k"))
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)  # the server fixture failed: an error in setup, not an expected failure
    said_lines(result, ["*known issue did not match: *no-such-flag* (known_issue_match = 'CUTLASS'*"])


@pytest.mark.slow
def test_known_issue_that_matches_stays_xfail(pytester: pytest.Pytester) -> None:
    # The emulator's glm5-sm120 profile fails warmup with a CUTLASS tile error for memory-safe EP8; its warmup is
    # cut to half a second (the profile's 20 s were 21 of this test's 22 s): the failure and its lines are the same.
    body = KNOWN.format(flag="tp-size = 8, ep-size = 8, mem-fraction-static = 0.75, sim-warmup-s = 0.5") \
        + 'sim_profile = "glm5-sm120"\n'
    write_configs(pytester, body)
    pytester.makepyfile(POINT.format(config="k"))
    result = pytester.runpytest("--glm5-sim-startup-s", "1")
    result.assert_outcomes(xfailed=1)


def test_emulator_lag_is_its_own_verdict(tmp_path: Path) -> None:
    from pytest_glm5.judge.gate import _behind
    from pytest_glm5.judge.verdicts import Bound

    class R:
        def __init__(self, lag_s: float) -> None:
            self.lag_s, self.metrics = lag_s, {"duration": 2.0}

    assert "fell behind its own model for 25% of the run" in str(_behind([R(0.5)], 0.02))  # type: ignore[list-item]
    assert _behind([R(0.01)], 0.02) is None  # type: ignore[list-item]
    assert Bound("output_throughput", "floor", 1.0, 0.03, launches=(1.0,)).provisional


def test_an_emulator_behind_its_model_judges_no_slo_attainment_either(tmp_path: Path) -> None:
    # The requests' TTFT and TPOT carry the host's delay: an attainment missed there is the host's, like a throughput.
    from pytest_glm5.judge.gate import PerfGate
    from pytest_glm5.judge.provenance import Provenance

    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "m.toml").write_text("[t.c16.slo_attainment]\nfloor = 1.0\ntolerance = 0.05\n"
                                            "tolerance_why = 'hand-set'\n")
    prov = Provenance("hw", "/models/m", "c0", "sim", "h")
    gate = PerfGate(tmp_path)
    path, store = gate.book.store("hw", "/models/m")
    for behind, verdict in ((None, "regression"), ("the emulator fell behind its own model", "emulator-bound")):
        [v] = gate._judge("t", "c16", {"slo_attainment": [0.5]}, ["l1"], [""], store, path, prov, gate.look(1),
                          behind).verdicts
        assert v.verdict == verdict, (behind, v.line())


def test_a_new_series_measured_behind_its_model_is_emulator_bound_and_never_recorded(tmp_path: Path) -> None:
    # A p99 TTFT with no reference yet, measured while the emulator fell behind: it read `new`, and
    # --update-baselines recorded the host's figure as the reference (the c1024 points of the rehearsal).
    from pytest_glm5.judge.baselines import select_updates
    from pytest_glm5.judge.gate import PerfGate
    from pytest_glm5.judge.provenance import Provenance

    prov = Provenance("hw", "/models/m", "c0", "sim", "h")
    gate = PerfGate(tmp_path)
    path, store = gate.book.store("hw", "/models/m")
    for behind, verdict in ((None, "new"), ("the emulator fell behind its own model", "emulator-bound")):
        [v] = gate._judge("t", "c1024", {"p99_ttft_ms": [120.0, 130.0]}, ["l1", "l2"], ["", ""], store, path, prov,
                          gate.look(2), behind).verdicts
        assert v.verdict == verdict, (behind, v.line())
        assert select_updates([v], "all") == ([v] if behind is None else [])


def test_a_busy_client_never_hides_a_workload_drift(tmp_path: Path) -> None:
    # CI, beside a busy worker: a drifted chat point's mean TTFT read client-bound instead of workload drift; were
    # every figure of the point client-bound, the drift (which fails the run) would not have been said at all.
    from pytest_glm5.judge import admission
    from pytest_glm5.judge.gate import PerfGate
    from pytest_glm5.judge.provenance import Provenance

    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "m.toml").write_text(
        "[t.chat.mean_ttft_ms]\nceiling = 10.0\ntolerance = 0.05\ntolerance_why = 'hand-set'\n"
        "workload = { input_len = 64, thinking = true, observed = { reasoning_tokens = 48.0 } }\n")
    prov = Provenance("hw", "/models/m", "c0", "sim", "h", workload={"input_len": 64, "thinking": True})
    gate = PerfGate(tmp_path)
    path, store = gate.book.store("hw", "/models/m")

    def busy(metric: str, tolerance: float) -> str:
        return "client-bound: the load client was kept from its CPU"

    for seen, verdict in (({"reasoning_tokens": 36.0}, "workload drift"), ({"reasoning_tokens": 47.0}, "client-bound"),
                          ({"reasoning_tokens": 47.0, "arrival_rate": 5.0, "arrival_rate_asked": 10.0},
                           "client-bound"),  # what a busy client holds back stays the client's
                          # What the server did is its own: a cache that stopped hitting (a CI run beside two busy
                          # loops read it client-bound), a prompt counted otherwise.
                          ({"reasoning_tokens": 47.0, "prefix_hit": 0.0, "prefix_ideal": 0.82}, "workload not held"),
                          ({"reasoning_tokens": 47.0, "input_tokens": 80.0}, "workload not held")):
        ev = admission.Evidence(client=busy, observed=seen, asked=prov.workload)
        [v] = gate._judge("t", "chat", {"mean_ttft_ms": [10.0]}, ["l1"], [""], store, path, prov, gate.look(1),
                          None, ev).verdicts
        assert v.verdict == verdict, (seen, v.line())


def test_one_launch_of_a_config_does_not_confirm_a_drop_against_its_reference() -> None:
    from pytest_glm5.judge.decide import against_config
    from pytest_glm5.judge.looks import Look

    prior = [[100.0, 101.0, 99.5, 100.4, 99.8], [100.2, 99.1, 100.9, 100.0, 99.6]]
    one = against_config("mscclpp", "c256", "output_throughput", [93.0], [100.0], "tp8", prior, 0.03, Look(0.01),
                         expected_slower=False)
    assert one.verdict == "unresolved" and "--glm5-launches 2" in one.note
    two = against_config("mscclpp", "c256", "output_throughput", [93.0, 93.5], [100.0, 100.3], "tp8", prior, 0.03,
                         Look(0.01), expected_slower=False)
    assert two.verdict == "regression"


TAILS = """
import pytest

@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c1", concurrency=1, num_prompts=12, input_len=8, output_len=8, warmup=0), "c1",
               ["p99_ttft_ms", "p90_ttft_ms", "median_ttft_ms"])
"""


def test_a_percentile_needs_the_requests_it_is_taken_over(pytester: pytest.Pytester) -> None:
    # 12 requests per launch: a p99 of them is their maximum (it needs 100), a p90 has the 10 it needs.
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TAILS)
    result = pytester.runpytest("--glm5-report", "report.json")
    assert result.ret == 0, result.stdout.str()
    verdicts = {v["metric"]: v for v in report(pytester)["verdicts"]}
    assert verdicts["p99_ttft_ms"]["verdict"] == "too few requests"
    assert verdicts["p99_ttft_ms"]["note"] == (
        "p99_ttft_ms from 12 requests per launch: a p99 needs 100 (one expected above it), else it is a "
        "figure of the count; not judged: raise num_prompts to 100 or judge p90_ttft_ms")
    assert verdicts["p90_ttft_ms"]["verdict"] == "new" and verdicts["median_ttft_ms"]["verdict"] == "new"
    lo, hi = verdicts["median_ttft_ms"]["spread"]["order_ci95"]
    assert lo <= verdicts["median_ttft_ms"]["measured"] <= hi and verdicts["median_ttft_ms"]["spread"]["requests"] == 12
    said_lines(result, ["not judged, a percentile from fewer requests than it needs (1):", "  t c1: p99_ttft_ms"])


def test_a_derived_metric_is_judged_only_where_its_inputs_were(tmp_path: Path) -> None:
    # Beside two busy loops a rehearsal failed on tp8-graphs dual-stream scaling_2x -11.0% (samples 1.846 and 1.455)
    # against a provisional floor recorded from one launch with a 3% tolerance, while the dual-stream throughput it
    # is derived from was emulator-bound and not judged.
    from pytest_glm5.judge.gate import PerfGate
    from pytest_glm5.judge.provenance import Provenance
    from pytest_glm5.judge.verdicts import Verdict

    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "m.toml").write_text(
        "[defaults]\ntolerance = 0.05\n"
        "[tp8.dual-stream.scaling_2x]\nfloor = 1.854\ntolerance = 0.03\ntolerance_why = 'hand-set'\n")
    prov = Provenance("hw", "/models/m", "c0", "sim", "h")
    gate = PerfGate(tmp_path)
    bound_by_emulator = Verdict("tp8", "dual-stream", "output_throughput", 19.0, None, "emulator-bound")
    gate.verdicts.append(bound_by_emulator)
    inputs = [("dual-stream", "output_throughput"), ("single-stream", "output_throughput")]
    skipped = gate.judge_values("tp8", "dual-stream", "scaling_2x", [1.846, 1.455], prov, "l1", inputs)
    [v] = skipped.verdicts
    assert v.verdict == "emulator-bound" and not skipped.failures
    assert v.note == "derived from dual-stream output_throughput, which was emulator-bound: not judged either"
    # Its inputs judged: a provisional bound is held to the file's default 5%, not the entry's 3%: -4% passes.
    bound_by_emulator.verdict = "pass"
    [ok] = gate.judge_values("tp8", "dual-stream", "scaling_2x", [1.78, 1.78], prov, "l1", inputs).verdicts
    assert ok.verdict == "pass" and ok.bound is not None and ok.bound.tolerance == 0.05
    assert "provisional: recorded from 1 launch" in ok.line()
    [low] = gate.judge_values("tp8", "dual-stream", "scaling_2x", [1.70, 1.70], prov, "l1", inputs).verdicts
    assert low.verdict == "regression"  # -8.3%: beyond the default tolerance too


@pytest.mark.slow
def test_glm5_compare_finds_a_drop_between_two_ordinary_nightly_reports(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    # Two nightly reports of one launch each, a 10% slowdown between them: compare found 1 of 4 drops that the
    # nightly itself found 4 of 4, printed no outcome line, and judged values the nightly had called client-bound.
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TWO_SCENARIOS)
    # CV 1%: one launch a side against the references' spread shows the drop (the 0.8 decode factor slows output by
    # about 15% on the tiny profile). The host's own noise adds to the emulator's: at 0.9 (about 8%) a fresh-clone CI
    # beside busy loops read the references at CV 2.0-3.1% and left both drops UNKNOWN (p 0.0053 and 0.033, 1 vs 1
    # launches), as the session with a third worker had: right for those launches, and not what this test is about.
    noise = ("--glm5-sim-noise", "0.01")
    assert pytester.runpytest("--update-baselines", "--glm5-launches", "6", *noise).ret == 0
    assert pytester.runpytest("--glm5-report", "a.json", "--glm5-max-repeats", "1", *noise).ret == 0
    pytester.runpytest("--glm5-report", "b.json", "--glm5-max-repeats", "1", "--glm5-sim-slowdown", "0.8", *noise)
    a, b = pytester.path / "a.json", pytester.path / "b.json"
    assert all(len(v["launches"]) == 1 for v in json.loads(b.read_text())["verdicts"])
    # The report keeps the variance model the run fitted, per baselines file: here two series, which no family of
    # three (variance.MIN_SERIES) holds, so nothing is lent and the JSON says so.
    [(file, model)] = json.loads(a.read_text())["statistics"]["variance"].items()
    assert file.startswith(f"{HARDWARE}/") and file.endswith(".toml") and model == {"families": []}, (file, model)
    capsys.readouterr()
    assert glm5(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    # Every series both runs judged is found (a busy host can make a run call a point client-bound, which compare
    # then leaves unjudged as the run did: a CI run beside other work read 1 of 1 judged, and failed on "2").
    host = ("client-bound", "emulator-bound")
    judged = [v for v in json.loads(b.read_text())["verdicts"] if v["verdict"] not in host and not any(
        w["verdict"] in host for w in json.loads(a.read_text())["verdicts"] if w["scenario"] == v["scenario"])]
    assert judged and sum(line.startswith("REGRESSION t c") for line in out) == len(judged), out
    if len(judged) == 2:  # the regressions in the order the run decided them: both named, either first
        both = r"FAILED: 2 regressions \(t c[12] output_throughput -\d+\.\d%, t c[12] output_throughput"
        assert re.match(both, out[-1]), out[-1]
    # What the head run did not judge is not judged here either.
    doc = json.loads(b.read_text())
    doc["verdicts"][0]["verdict"] = "client-bound"
    (pytester.path / "c.json").write_text(json.dumps(doc))
    assert glm5(["compare", str(a), str(pytester.path / "c.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("REGRESSION") for line in out) == 1
    assert any(line.startswith("not judged, as the run that measured them did not judge them: 1 (e.g. t c1 "
                               "output_throughput: client-bound in c.json)") for line in out), out
    # Without references or what a family lent, and with one launch each, it says what would let it decide.
    for v in doc["verdicts"]:
        v["bound"], v["verdict"] = None, "new"
        (v.get("test") or {}).pop("pooled", None)
    (pytester.path / "d.json").write_text(json.dumps(doc))
    bare = json.loads(a.read_text())
    for v in bare["verdicts"]:
        v["bound"] = None
        (v.get("test") or {}).pop("pooled", None)
    (pytester.path / "e.json").write_text(json.dumps(bare))
    assert glm5(["compare", str(pytester.path / "e.json"), str(pytester.path / "d.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any("cannot decide 2 series: one launch each and no reference launches in either report" in line
               and "--glm5-launches 3" in line for line in out), out
    assert out[-1].startswith("PASSED: no regression; 2 series: 0 decided, 2 not (2 unresolved)"), out[-1]


def test_compare_of_one_launch_reports_borrows_the_spread_their_runs_were_lent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two one-launch nightly reports of a 10% slower build, with no reference launches kept: without the variance
    # model "cannot decide: one launch each"; with what each series' family lent it in the runs (CV 2% on 100
    # degrees of freedom, test.pooled), DIFFERENT/worse on that spread, and the line says where it came from.
    lent = {"var0": 0.02 ** 2, "df0": 100.0, "series": 40, "launches": 300, "family": "c1 output_throughput"}

    def doc(value: float, pooled: dict[str, object] | None) -> dict[str, object]:
        return {"format": 1, "run": {}, "verdicts": [
            {"config": "t", "scenario": "c1", "metric": "output_throughput", "measured": value, "verdict": "pass",
             "launches": [value], "bound": None, "test": {"pooled": pooled} if pooled else {},
             "provenance": {"hardware": "hw", "model": "m"}}]}

    for name, value in (("a", 100.0), ("b", 90.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc(value, lent)))
        (tmp_path / f"bare-{name}.json").write_text(json.dumps(doc(value, None)))
    assert glm5(["compare", str(tmp_path / "bare-a.json"), str(tmp_path / "bare-b.json")]) == 0
    assert "cannot decide 1 series: one launch each" in capsys.readouterr().out
    assert glm5(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("REGRESSION t c1 output_throughput: DIFFERENT/worse: -10.0%"), out
    assert "pooled: 40 series, 300 launches, df 100" in out[1], out


def test_compare_says_what_would_decide_an_unknown_series(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def doc(values: list[float]) -> dict[str, object]:
        return {"format": 1, "run": {}, "verdicts": [
            {"config": "t", "scenario": "c1", "metric": "output_throughput", "measured": values[0], "verdict": "pass",
             "launches": values, "bound": {"launches": [100.0, 104.0, 97.0, 101.0, 99.0, 103.0]},
             "provenance": {"hardware": "hw", "model": "m"}}]}

    (tmp_path / "a.json").write_text(json.dumps(doc([100.0])))
    (tmp_path / "b.json").write_text(json.dumps(doc([95.5])))
    assert glm5(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "not SAME (the 98% CI" in out[1] and "not DIFFERENT (" in out[1], out
    assert out[-2].startswith("cannot decide 1 series on these launches; reports of nights run with --glm5-launches ")
    assert out[-1].startswith("PASSED: no regression; 1 series: 0 decided, 1 not (1 unresolved)")
