"""Bad input ends in one clear line before anything is launched: each case is an attack a new user's session made
on the plugin (issue 28), as data, with the line it must now get."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from plugin_helpers import OUTPUTS, outcome_agrees, said_lines, servers_of, write_configs

POINT = """
import pytest
@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c1", concurrency=1, num_prompts=2, input_len=8, output_len=8, warmup=0), "c1",
               ["output_throughput"])
"""


def test_a_path_option_written_as_a_separate_word_is_stopped_with_the_fix(pytester: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    # The README's own plan command on a box where the model directory exists: pytest took the path for a test path,
    # moved its rootdir, collected the whole clone and exited 2 (or 0 with no plan under --glm5-plan).
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir()
    for option in ("--glm5-model-path", "--glm5-sim-profile"):
        for extra in ((), ("--glm5-plan",)):
            result = pytester.runpytest(option, str(model), *extra)
            assert result.ret == pytest.ExitCode.USAGE_ERROR, (option, extra)
            result.stderr.fnmatch_lines([f"*pytest took the value of {option} {model} for a test path*write "
                                         f"{option}={model} (with '=')"])
    assert pytester.runpytest(f"--glm5-model-path={model}", "--glm5-plan").ret == 0


def test_the_plan_never_exits_0_without_a_plan(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    planned = pytester.runpytest("--glm5-plan")
    assert planned.ret == 0
    said_lines(planned, ["glm5: plan: *"])
    empty = pytester.runpytest("--glm5-plan", "-k", "no_such_test")
    assert empty.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    said_lines(empty, ["*glm5: --glm5-plan: no test of a server config was collected, so there is no plan*"])


@pytest.mark.parametrize(("args", "message"), [
    (["--glm5-hardware", ".."], "*--glm5-hardware = '..' is not a hardware key: use letters, digits and . _ + -*"),
    (["--glm5-hardware", "a/b"], "*--glm5-hardware = 'a/b' is not a hardware key*"),
    (["--glm5-hardware", "box\nother"], "*--glm5-hardware = 'box\\nother' is not a hardware key*"),
    (["-o", "glm5_budget=0"], "*-o glm5_budget = '0' must be a duration above 0 and at most a year*"),
    (["--glm5-budget", "1e9h"], "*--glm5-budget = '1e9h' is not a duration: write 8h, 90m*"),
    (["--junitxml", "/proc/glm5/j.xml"], "*--junitxml /proc/glm5/j.xml: directory /proc/glm5 does not exist*"),
    (["--glm5-report", "FILE/r.json"], "*--glm5-report */FILE/r.json: */FILE is a file, not a directory*"),
])
def test_bad_values_are_one_line_naming_their_source(pytester: pytest.Pytester, args: list[str],
                                                     message: str) -> None:
    model = write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    (pytester.path / "FILE").write_text("")
    result = pytester.runpytest(*[a.replace("FILE", str(pytester.path / "FILE")) for a in args])
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() and servers_of(model) == []


def test_the_bench_fixture_fails_a_measurement_with_failed_requests(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.t]\nflags = { sim-fault = 'http500=0.5' }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("t")
def test_strict(bench):
    bench(concurrency=2, num_prompts=16, input_len=8, output_len=8, warmup=0)
@pytest.mark.server_config("t")
def test_lenient(bench):
    r = bench(concurrency=2, num_prompts=16, input_len=8, output_len=8, warmup=0, max_failed=16)
    assert r.failed > 0
""")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    said_lines(result, ["*t: * of 16 requests failed at concurrency 2: HTTP 500*(bench(..., max_failed=N) allows N)"])


def test_a_killed_writers_temp_file_is_removed(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINT)
    assert pytester.runpytest("--update-baselines").ret == 0
    [path] = (pytester.path / "baselines").rglob("*.toml")
    stale, fresh = path.parent / f".{path.name}.x1.tmp", path.parent / f".{path.name}.x2.tmp"
    for tmp in (stale, fresh):
        tmp.write_text("half a file")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    result = pytester.runpytest()
    said_lines(result, [f"glm5: removed {stale}, left by a writer that was killed mid-write"])
    assert not stale.exists() and fresh.exists()  # a fresh one may be a writer at work
    assert servers_of(model) == []


def test_configs_the_budget_left_out_are_in_every_output(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = {}\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.parametrize("cfg", [pytest.param(n, marks=pytest.mark.server_config(n)) for n in "ab"])
def test_point(perf, cfg):
    perf.check(perf.run("c1", concurrency=1, num_prompts=2, input_len=8, output_len=8, warmup=0), "c1",
               ["output_throughput"])
""")
    # No costs recorded: a test is priced at 2 minutes, so 3 minutes hold one config's launch, not two.
    result = pytester.runpytest("--glm5-budget", "3m", *OUTPUTS, "-p", "no:randomly")
    result.assert_outcomes(passed=1, skipped=1)
    said_lines(result, ["configs not run (1):", "  b: budget 3 min: * (--glm5-budget)"])
    assert outcome_agrees(result, pytester.path).startswith(
        "PASSED: no regression; NO BASELINES for a (nothing gated there); 1 config not run (b: budget 3 min")
    doc = json.loads((pytester.path / "report.json").read_text())
    assert list(doc["run"]["not_run"]) == ["b"]
    md = (pytester.path / "summary.md").read_text()
    assert "### Not run (1)" in md and "- **b**: budget 3 min" in md
