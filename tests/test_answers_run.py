"""A run checks what each launch answers (pytester sessions on the emulator): a fast and wrong build fails on the
canary and the accuracy drop with every throughput figure alone passing, --update-baselines refuses to record it,
a build wrong only late in its replies fails on accuracy, and unchanged launches with late-token nondeterminism
raise no alarm."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from plugin_helpers import OUTPUTS, outcome_agrees, report, said_lines, write_configs
from test_reports import page_data as htmlpage_data

POINT = """
import pytest
@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c4", concurrency=4, num_prompts=16, input_len=8, output_len=16), "c4", ["output_throughput"])
"""
BUILDS = '[build.late]\nenv = { GLM5_SIM_GARBAGE_LATE = "0.3" }\n'
ASK = ("--glm5-accuracy-set", "generated:150", "--glm5-sim-noise", "0.01")


def _recorded(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n" + BUILDS)
    pytester.makepyfile(POINT)
    # 5 reference launches and no more: a recording adds rounds while a CPU-noisy speed cannot resolve its
    # tolerance, and the canary's reference would then count them too.
    rec = pytester.runpytest("--update-baselines", "--glm5-launches", "5", "--glm5-max-repeats", "5", *ASK)
    assert rec.ret == 0, rec.stdout.str()[-2000:]
    said_lines(rec, ["  t: wrote *; launch cost (load * s, measuring * s over 1 tests, canary * s a launch, "
                     "accuracy * s over 150 questions)",
                     "  t: answers recorded in *.answers.json (canary: 5 reference launches)"])


@pytest.mark.slow
def test_the_plan_prices_the_checks_this_box_timed(pytester: pytest.Pytester) -> None:
    import tomllib

    from pytest_glm5.night.plan import hours

    _recorded(pytester)
    cost = tomllib.loads(next((pytester.path / "baselines").rglob("*.toml")).read_text())["costs"]["t"]
    assert cost["questions"] == 150 and cost["canary_s"] > 0 and cost["accuracy_s"] > 0
    plan = pytester.runpytest("--glm5-plan", *ASK)
    said_lines(plan, ["glm5: plan: t * 1 * rehearsal *: modeled load, measuring in model time"])
    assert "assumed" not in plan.stdout.str()
    # Ten times the questions tonight: the accuracy set is priced at the seconds a question this box recorded. (Half
    # of them was asked before, and at x0.5 both rounded to "1 s" in a CI run beside two busy loops.)
    more = pytester.runpytest("--glm5-plan", "--glm5-accuracy-set", "generated:1500")
    row = next(ln for ln in more.stdout.lines if ln.startswith("glm5: plan: t "))
    columns = re.findall(r"[\d.]+ (?:s|min|h)\b", row)  # load, canary, measure, launch, accuracy
    assert columns[4] == hours(float(cost["accuracy_s"]) / 150 * 1500), row
    off = pytester.runpytest("--glm5-plan", "--glm5-no-canary")
    said_lines(off, ["glm5: plan: t * 1 * 0 s * 0 s  rehearsal *"])


@pytest.mark.slow
def test_a_fast_and_wrong_build_fails_and_is_never_recorded(pytester: pytest.Pytester) -> None:
    _recorded(pytester)
    # One launch: what is held is the canary; a noisy CI box may leave the speed unresolved and its round would
    # read "held on 2 of 2".
    ok = pytester.runpytest("--glm5-max-repeats", "1", *ASK, *OUTPUTS)
    assert outcome_agrees(ok, pytester.path).startswith("PASSED: no regression")
    said_lines(ok, ["  t: canary held on 1 of 1 launches: canary: 16 of 16 prompts agree on their first * tokens (rule "
                    "from 5 reference launches)",
                    "  t: accuracy *% vs *% (+0.0 points): 0 questions lost, 0 gained, one-sided McNemar p=1 >= 0.01: "
                    "no drop shown"])
    # Tokens corrupted at 20% by a build 30% faster (so the figure alone reads pass even on a noisy box, where a
    # build at the reference's speed can read unresolved): the canary names prompt and token, accuracy drops, the
    # run fails. At 10% the 134 right answers of 150 lost 6 or fewer (McNemar's p >= 0.01: no drop shown) in 13 of
    # 300 launches of the emulator's own replies (mean 13.4 lost; a CI run read "6 questions lost, 0 gained,
    # p=0.016"); at 20%, in none of 300 (mean 26, fewest 13).
    wrong = pytester.runpytest("--glm5-sim-garbage", "0.2", "--glm5-sim-slowdown", "1.3", "--glm5-html", "r.html",
                               "--junitxml", "j.xml", *ASK, *OUTPUTS)
    line = outcome_agrees(wrong, pytester.path)
    assert line.startswith("FAILED: faster, but wrong: 1 config answered wrong (t: canary failed: "), line
    # Invalid comes first everywhere: the summary, the markdown, the page (with the run's outcome), JUnit.
    # What the figure alone would read is the run's own reading of it: pass, or client-bound where the host starved
    # the load client (a CI run beside two busy loops read "client-bound, +24.9%"); never unresolved or failed.
    said_lines(wrong, ["invalid, faster but wrong (1; the answers below say where):",
                       "  t c4 output_throughput * tok/s (the figure alone would read *, +*% from its bound)"])
    assert re.search(r"the figure alone would read (pass|client-bound), \+", wrong.stdout.str()), wrong.stdout.str()
    md = (pytester.path / "summary.md").read_text()
    assert md.index("Faster, but wrong") < md.index("| t | c4 | output_throughput"), md
    page = htmlpage_data(pytester.path / "r.html")
    assert page["outcome"]["line"] == line and page["counts"] == {"invalid": 1}
    assert "glm5: 1 invalid (faster, but wrong)" in (pytester.path / "r.html").read_text()
    # xunit2 (pytest's default) keeps properties on the suite, named by the test
    assert '::glm5.c4.output_throughput.verdict" value="invalid"' in (pytester.path / "j.xml").read_text()
    said_lines(wrong, ["  t: canary failed: * of 16 prompts diverged within their first * tokens (1 allowed; rule from "
                       "5 reference launches): prompt * at token *: * expected, * got*",
                       "  t: accuracy *: * questions lost, * gained, one-sided McNemar p=* < 0.01: a drop"])
    (v,) = report(pytester)["verdicts"]
    assert v["verdict"] == "invalid" and re.search(r"the figure alone would read (pass|client-bound)", v["note"]), \
        v["note"]
    # Recording it is refused: the baselines and the answers stay as they were.
    files = sorted(f for f in (pytester.path / "baselines").rglob("*") if f.is_file())
    before = [f.read_bytes() for f in files]
    refused = pytester.runpytest("--update-baselines", "--glm5-sim-garbage", "0.1", *ASK)
    assert refused.ret == 1
    said_lines(refused, ["  t: answers not recorded, nor its figures: faster, but wrong: canary failed: *"])
    assert [f.read_bytes() for f in files] == before


@pytest.mark.slow
def test_a_build_wrong_only_late_fails_on_the_canary_and_accuracy(pytester: pytest.Pytester) -> None:
    # The canary compared half the shortest agreed prefix, which ended before the answers: a build wrong only in
    # the second half of its replies held it and failed on accuracy alone. The whole agreed reply is compared now.
    _recorded(pytester)
    late = pytester.runpytest("--glm5-build", "late", *ASK, *OUTPUTS)
    line = outcome_agrees(late, pytester.path)
    assert line.startswith("FAILED: faster, but wrong: 1 config answered wrong (t: canary failed: "), line
    assert "prompts diverged late within their agreed replies" in line, line
    said_lines(late, ["  t: accuracy *% vs *% (-* points): * questions lost, * one-sided McNemar p=* a drop"])


@pytest.mark.slow
def test_late_ties_on_unchanged_launches_raise_no_alarm(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Half of all replies break at a late near-tie (batch-variant kernels), in the references and tonight.
    monkeypatch.setenv("GLM5_SIM_NONDETERMINISM", "0.5")
    _recorded(pytester)
    runs = pytester.runpytest("--glm5-launches", "10", *ASK, *OUTPUTS)
    assert outcome_agrees(runs, pytester.path).startswith("PASSED: no regression"), runs.stdout.str()[-3000:]
    said_lines(runs, ["  t: canary held on 10 of 10 launches: *"])
    answers = next((pytester.path / "baselines").rglob("*.answers.json"))
    assert len(json.loads(answers.read_text())["configs"]["t"]["canary"]["launches"]) == 5


UNGATED = """
import pytest
@pytest.mark.server_config("t")
def test_stable(perf):
    perf.stability(concurrency=4, num_prompts=8, input_len=8, output_len=16)
@pytest.mark.server_config("t")
def test_bench(bench):
    assert bench(concurrency=2, num_prompts=4, input_len=8, output_len=16).failed == 0
"""


@pytest.mark.slow
def test_stability_and_bench_tests_fail_on_a_launch_that_answers_wrong(pytester: pytest.Pytester) -> None:
    # No figure of theirs is gated, so nothing would mark them invalid: crash-free and wrong must not pass.
    _recorded(pytester)
    pytester.makepyfile(test_ungated=UNGATED)
    ok = pytester.runpytest("test_ungated.py", "--glm5-sim-noise", "0.01")
    ok.assert_outcomes(passed=2)
    said_lines(ok, ["  t: canary held on 1 of 1 launches: *"])
    wrong = pytester.runpytest("test_ungated.py", "--glm5-sim-garbage", "0.1")
    wrong.assert_outcomes(failed=2)
    said_lines(wrong, ["*t: faster, but wrong: canary failed: * of 16 prompts diverged*"])
    assert wrong.stdout.str().count("t: faster, but wrong: canary failed") >= 2


def _answers_file(pytester: pytest.Pytester) -> Any:
    return next((pytester.path / "baselines").rglob("*.answers.json"))


def _cut(text: str) -> str:
    return text[:len(text) // 2]


def _other_shape(text: str) -> str:
    data = json.loads(text)
    data["configs"]["t"]["canary"]["launches"] = [[1, 2, 3]]  # numbers where replies belong
    return json.dumps(data)


def _other_prompts(text: str) -> str:
    data = json.loads(text)
    data["configs"]["t"]["canary"]["asked"] = "0123456789ab"  # recorded for other prompts
    return json.dumps(data)


@pytest.mark.slow
@pytest.mark.parametrize(("spoil", "said"), [
    (_cut, "*.answers.json: not an answers file (*); restore it from git (git checkout -- *.answers.json) or delete "
           "it and record again with --update-baselines"),
    (lambda text: "[1, 2]", "*.answers.json: not an answers file (no 'configs' object)*"),
    (_other_shape, "*.answers.json: not an answers file (configs.t.canary.launches is not a list of launches, each a "
                   "reply per prompt)*"),
    (_other_prompts, "*.answers.json: the canary replies of t answered other prompts (digest 0123456789ab; this "
                     "version asks *): record them again with --update-baselines, or restore the file from git"),
])
def test_an_answers_file_that_cannot_hold_the_check_stops_the_run_before_any_launch(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, spoil: Any, said: str) -> None:
    # Truncated, of another shape or recorded for other prompts, it turned the check off: a garbage build passed
    # with exit 0 under CI=true (issue 40). Now the run stops before a launch, naming the file and the fix.
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    rec = pytester.runpytest("--update-baselines", "--glm5-max-repeats", "2", "--glm5-sim-noise", "0.01")
    assert rec.ret == 0, rec.stdout.str()[-2000:]
    path = _answers_file(pytester)
    path.write_text(spoil(path.read_text()))
    monkeypatch.setenv("CI", "true")
    bad = pytester.runpytest("--glm5-sim-garbage", "0.3", "--glm5-sim-noise", "0.01")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR, bad.stdout.str()[-2000:]
    bad.stderr.fnmatch_lines([f"*glm5: {said}"])
    assert "launched pid" not in bad.stdout.str()


@pytest.mark.slow
def test_a_deleted_answers_file_reads_no_reference_answers_and_fails_under_ci(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    rec = pytester.runpytest("--update-baselines", "--glm5-max-repeats", "2", "--glm5-sim-noise", "0.01")
    assert rec.ret == 0, rec.stdout.str()[-2000:]
    _answers_file(pytester).unlink()
    # Without CI: the run goes on, and its outcome says no check held the answers.
    plain = pytester.runpytest("--glm5-max-repeats", "1", "--glm5-sim-noise", "0.01", *OUTPUTS)
    line = outcome_agrees(plain, pytester.path)
    assert line.startswith("PASSED: no regression; NO REFERENCE ANSWERS for t (correctness not checked: no reference "
                           "replies yet"), line
    # Under CI=true a garbage build, and even an unchanged one, fails: nothing held its answers.
    monkeypatch.setenv("CI", "true")
    for garbage in ("0.3", "0"):
        ci = pytester.runpytest("--glm5-max-repeats", "1", "--glm5-sim-noise", "0.01", "--glm5-sim-garbage", garbage)
        assert ci.ret != 0, ci.stdout.str()[-2000:]
        said_lines(ci, ["FAILED: NO REFERENCE ANSWERS for t (correctness not checked: no reference replies yet*"])


SUITE_CHECKS = """
def pytest_glm5_suite(config):
    return {"defaults": {"glm5-accuracy-set": "generated:20"}}
"""


@pytest.mark.slow
def test_the_suite_asks_its_accuracy_set_unless_turned_off_and_the_outcome_says_so(pytester: pytest.Pytester) -> None:
    # Issue 40: the real night asked no accuracy set, so a build that broke reasoning but not the canary passed.
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    pytester.makeconftest(SUITE_CHECKS)
    asked = pytester.runpytest("--glm5-max-repeats", "1", "--glm5-sim-noise", "0.01")
    said_lines(asked, ["  t: accuracy * of 20 right (*%) on generated:20:*: no reference yet (--update-baselines)"])
    assert "correctness:" not in asked.stdout.lines[-2]
    off = pytester.runpytest("--glm5-max-repeats", "1", "--glm5-sim-noise", "0.01", "--glm5-no-accuracy", *OUTPUTS)
    line = outcome_agrees(off, pytester.path)
    assert line.endswith("; correctness: canary only"), line
    assert "accuracy" not in off.stdout.str().split("answers (checked before")[-1]
    plan = pytester.runpytest("--glm5-plan", "--glm5-no-accuracy")
    said_lines(plan, ["glm5: plan: t * 0 s  *"])


@pytest.mark.slow
def test_a_recording_whose_answers_cannot_be_written_records_nothing_of_that_config(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from pytest_glm5.correctness import answers

    def full_disk(path: Any, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    monkeypatch.setattr(answers, "atomic_write", full_disk)
    rec = pytester.runpytest("--update-baselines", "--glm5-max-repeats", "2", "--glm5-sim-noise", "0.01")
    assert rec.ret == 1, rec.stdout.str()[-2000:]
    said_lines(rec, ["*not written: [[]Errno 28] No space left on device; nothing of t recorded (its correctness could "
                     "not be established)*"])
    toml = list((pytester.path / "baselines").rglob("*.toml"))
    assert not toml or "[t." not in toml[0].read_text(), toml[0].read_text()  # no figure of t without its answers


@pytest.mark.slow
@pytest.mark.parametrize(("build", "head"), [
    ("default", "PASSED: no regression"),
    ("off-by-one", "FAILED: faster, but wrong: 2 configs answered wrong (tp8: accuracy "),
    ("changed-at-20", "FAILED: faster, but wrong: 2 configs answered wrong (tp8: canary failed: 16 of 16 prompts "
                      "diverged late within their"),
])
def test_the_wrong_builds_of_issue_40_fail_the_suite_with_no_option_added(build: str, head: str) -> None:
    # The suite as a user runs it, on the rehearsal's recorded answers: each passed with exit 0 before (the canary
    # compared half the agreed prefix; the real night asked no accuracy set).
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")}
    p = subprocess.run([sys.executable, "-m", "pytest", "-m", "sm120", "--glm5-sim", "-k",
                        "tp8 and single and not trtllm and not cutedsl and not decode4 and not mtp", "-p",
                        "no:cacheprovider",
                        "--glm5-max-repeats", "1", "--glm5-build", build], cwd=root, env=env, capture_output=True,
                       text=True, timeout=600)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith(("PASSED:", "FAILED:")))
    assert line.startswith(head), p.stdout[-3000:]
    assert p.returncode == (0 if build == "default" else 1), p.stdout[-3000:]
