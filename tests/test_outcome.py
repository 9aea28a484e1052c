"""The run's outcome: every way a run can end, decided once, and the terminal's last line, the exit status, the JSON
report and the markdown summary all saying the same thing."""

from __future__ import annotations

import json
import re

import pytest
from plugin_helpers import FAKE_NVML, OUTPUTS, outcome_agrees, write_configs

from pytest_glm5.judge.verdicts import NO_BASELINES, Bound, Reason, Verdict
from pytest_glm5.report.outcome import Facts, decide


def v(kind: str, config: str = "tp8", note: str | None = None, change: float = -0.12,
      reason: Reason | None = None) -> Verdict:
    bound = Bound("output_throughput", "floor", 10.0, 0.05)
    out = Verdict(config, "single-stream", "output_throughput", 9.0, bound, kind)
    out.note, out.reason = note, reason
    out.stat = {"change": change}  # type: ignore[typeddict-item]
    return out


NO_TP8 = "NO BASELINES: tp8 has no entry"


def test_every_way_a_run_can_end_is_one_outcome() -> None:
    passed = decide(Facts(verdicts=[v("pass"), v("unresolved")]))
    assert (passed.status, passed.failed) == ("PASSED", False)
    assert passed.line == "PASSED: no regression; 2 series: 1 decided (1 pass), 1 not (1 unresolved)"
    reg = decide(Facts(verdicts=[v("regression"), v("pass")], regressed=[v("regression")]))
    assert reg.failed and reg.line.startswith("FAILED: 1 regression (tp8 single-stream output_throughput -12.0%)")
    bare = decide(Facts(verdicts=[v("new", note=NO_TP8, reason=Reason(NO_BASELINES, NO_TP8))]))
    assert bare.status == "PASSED" and "NO BASELINES for tp8 (nothing gated there)" in bare.line
    # Under CI=true the same run fails its tests: the outcome counts pytest's failures and never reads PASSED.
    required = decide(Facts(verdicts=[v("new", note=NO_TP8, reason=Reason(NO_BASELINES, NO_TP8))], failed_tests=4))
    assert required.failed and required.line.startswith("FAILED: 4 tests failed; NO BASELINES for tp8")
    crash = decide(Facts(problems={"ep8": "died", "tp8-trtllm": "tile"}, known=frozenset({"tp8-trtllm"})))
    assert crash.line == "FAILED: 1 config crashed or could not run (ep8); 1 known issue crashed as expected"
    known_only = decide(Facts(verdicts=[v("pass")], problems={"tp8-trtllm": "tile"}, known=frozenset({"tp8-trtllm"})))
    assert known_only.status == "PASSED"
    budget = decide(Facts(verdicts=[v("pass")], not_run={"sbo": "budget 8 h: ...; not run (--glm5-budget)"}))
    assert budget.status == "PASSED" and "1 config not run (sbo: budget 8 h" in budget.line
    dead = decide(Facts(verdicts=[v("pass")], unfinished=["t.py::test_a[ep8]", "t.py::test_b[ep8]"]))
    assert dead.failed and "2 tests never finished (a worker died): t.py::test_a[ep8], t.py::test_b[ep8]" in dead.line
    lost = decide(Facts(verdicts=[v("pass")], errors=["cannot write --glm5-html x: Permission denied"]))
    assert lost.failed and "1 file not written (cannot write --glm5-html x" in lost.line
    why = "all 89 sm120 tests skipped (sm120: needs compute capability 12.0 GPUs; found no NVML)"
    quiet = decide(Facts(nothing_measured=why))
    assert (quiet.status, quiet.failed) == ("SKIPPED", False)
    assert quiet.line == (f"SKIPPED: nothing measured: {why}; CI=true or --glm5-require-baselines fails such a run")
    loud = decide(Facts(nothing_measured=why, require=True))
    assert loud.failed and loud.line == f"FAILED: nothing measured: {why}"
    assert decide(Facts(verdicts=[v("pass")], interrupted=True)).line.startswith("FAILED: interrupted")


GATED = """
import pytest
@pytest.mark.sm120
@pytest.mark.server_config("t")
@pytest.mark.parametrize("c", [1, 2])
def test_point(perf, c):
    perf.check(perf.run(f"c{c}", concurrency=c, num_prompts=4, input_len=8, output_len=16, warmup=0), f"c{c}",
               ["output_throughput"])
"""




def test_a_night_without_gpus_says_so_and_fails_where_required(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makeconftest("def pytest_glm5_suite(config):\n    return {'gated_markers': {'sm120': '12.0'}}\n")
    pytester.makepyfile(test_gated=GATED)
    monkeypatch.setenv("GLM5_NVML_MODULE", "no_such_nvml_module")
    # Without -rs: the reason is on the outcome line.
    plain = pytester.runpytest(*OUTPUTS)
    plain.assert_outcomes(skipped=2)
    line = outcome_agrees(plain, pytester.path)
    assert line.startswith("SKIPPED: nothing measured: all 2 sm120 tests skipped (sm120: needs compute capability "
                           "12.0 GPUs; found no NVML")
    monkeypatch.setenv("CI", "true")
    ci = pytester.runpytest(*OUTPUTS)
    assert ci.ret == pytest.ExitCode.TESTS_FAILED
    assert outcome_agrees(ci, pytester.path).startswith("FAILED: nothing measured: all 2 sm120 tests skipped")
    monkeypatch.delenv("CI")
    flag = pytester.runpytest("--glm5-require-baselines", *OUTPUTS)
    assert flag.ret == pytest.ExitCode.TESTS_FAILED
    # With GPUs the same tests run, and the line says what they measured (NO BASELINES here: nothing recorded).
    pytester.makepyfile(fake_nvml=FAKE_NVML.format(gpus=[("NVIDIA RTX PRO 6000 Blackwell", (12, 0))] * 8))
    pytester.syspathinsert()
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml")
    ran = pytester.runpytest("--glm5-sim", *OUTPUTS)
    assert outcome_agrees(ran, pytester.path).startswith("PASSED: no regression; NO BASELINES for t")


def test_outcomes_agree_across_outputs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n[config.ep8]\nflags = { ep-size = 8 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("t")
@pytest.mark.parametrize("c", [1, 2])
def test_point(perf, c):
    perf.check(perf.run(f"c{c}", concurrency=c, num_prompts=4, input_len=8, output_len=16, warmup=0), f"c{c}",
               ["output_throughput"])
""")
    # Under CI=true without baselines, pytest failed 2 tests and exited 1 while the line read "PASSED".
    monkeypatch.setenv("CI", "true")
    bare = pytester.runpytest(*OUTPUTS)
    assert bare.ret == pytest.ExitCode.TESTS_FAILED
    assert outcome_agrees(bare, pytester.path).startswith("FAILED: 2 tests failed; NO BASELINES for t")
    monkeypatch.delenv("CI")
    assert pytester.runpytest("--update-baselines").ret == 0
    same = pytester.runpytest(*OUTPUTS)
    assert outcome_agrees(same, pytester.path).startswith("PASSED: no regression; 2 series:")
    # Unresolved: references spread 30% either side, so one new launch can neither rule a 5% drop out nor (even
    # from a busy machine that slows a tiny run by a fifth) prove one: only more launches could decide.
    import tomlkit

    path = next((pytester.path / "baselines").rglob("*.toml"))
    doc = tomlkit.parse(path.read_text())
    saved = path.read_text()
    for scenario in ("c1", "c2"):
        entry = doc["t"][scenario]["output_throughput"]
        floor = float(entry["floor"])
        entry["launches"] = [round(floor * f, 4) for f in (0.7, 1.3, 0.8, 1.25, 0.75, 1.0, 1.2, 0.9)]
    path.write_text(tomlkit.dumps(doc))
    open_ = pytester.runpytest("--glm5-max-repeats", "1", "-k", "not test_crash", *OUTPUTS)
    # Neither decided: unresolved, or client-bound where a loaded CI box kept the client from its CPU (the gate
    # must say so rather than judge the server); either way the run passes and every output says the same.
    undecided = outcome_agrees(open_, pytester.path)
    assert re.fullmatch(r"PASSED: no regression; 2 series: 0 decided, 2 not \((2 unresolved|2 client-bound|1 "
                        r"client-bound, 1 unresolved)\)", undecided), undecided
    path.write_text(saved)
    # three launches of the slowed build: on 2 vs 2 such a drop can meet its look's alpha and miss the run's line
    slow = pytester.runpytest("--glm5-sim-slowdown", "0.3", "--glm5-launches", "3", *OUTPUTS)
    line = outcome_agrees(slow, pytester.path)  # the regressions in the order the run decided them
    both = r"FAILED: 2 regressions \(t c[12] output_throughput -\d+\.\d%, t c[12] output_throughput"
    assert re.match(both, line), line
    # A crash under load (the emulator's EP8 dies of CUDA OOM at concurrency 256).
    pytester.makepyfile(test_crash="""
import pytest
@pytest.mark.server_config("ep8")
def test_load(perf):
    perf.stability(concurrency=256, num_prompts=256, input_len=8, output_len=16)
""")
    crash = pytester.runpytest("test_crash.py", *OUTPUTS)
    assert outcome_agrees(crash, pytester.path).startswith("FAILED: 1 config crashed or could not run (ep8); 1 test "
                                                            "failed")


@pytest.mark.slow
def test_a_dead_worker_is_named_and_never_passed(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = {}\n")
    pytester.makepyfile("""
import os, signal
import pytest
@pytest.mark.parametrize("cfg", [pytest.param(n, marks=pytest.mark.server_config(n)) for n in "ab"])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_point(perf, cfg, c):
    if cfg == "b" and c == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-config, as an OOM killer would take it
    perf.check(perf.run(f"c{c}", concurrency=c, num_prompts=2, input_len=8, output_len=8, warmup=0), f"c{c}",
               ["output_throughput"])
""")
    result = pytester.runpytest("-n", "2", "--max-worker-restart", "0", *OUTPUTS)
    line = outcome_agrees(result, pytester.path)
    assert line.startswith("FAILED: ") and "never finished (a worker died)" in line, line
    doc = json.loads((pytester.path / "report.json").read_text())
    assert doc["run"]["unfinished"] and all(t.endswith("-b]") for t in doc["run"]["unfinished"])
