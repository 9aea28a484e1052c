"""Settings: each bad value one usage error that names its source and the fix; outputs checked before anything runs."""

from __future__ import annotations

import pytest
from plugin_helpers import said_lines, servers_of, write_configs

ONE = "import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n"


@pytest.mark.parametrize(("args", "ini", "message"), [
    (["--glm5-stall-timeout", "0"], "", "--glm5-stall-timeout = '0' must be a number > 0"),
    (["--glm5-stall-timeout", "-5"], "", "--glm5-stall-timeout = '-5' must be a number > 0"),
    (["--glm5-repeats", "-1"], "", "--glm5-repeats = '-1' must be a whole number >= 1"),
    (["--glm5-repeats", "0"], "", "--glm5-repeats = '0' must be a whole number >= 1"),
    (["--glm5-repeats", "two"], "", "--glm5-repeats = 'two' must be a whole number >= 1"),
    (["--glm5-startup-timeout", "0"], "", "--glm5-startup-timeout = '0' must be a number > 0"),
    (["--glm5-stop-timeout", "-1"], "", "--glm5-stop-timeout = '-1' must be a number > 0"),
    (["--glm5-sim-time-scale", "0"], "", "--glm5-sim-time-scale = '0' must be a number > 0"),
    (["--glm5-sim-slowdown", "nan"], "", "--glm5-sim-slowdown = 'nan' must be a number > 0"),
    ([], "glm5_sim_time_scale = fast", "ini glm5_sim_time_scale in */tox.ini = 'fast' must be a number > 0"),
    ([], "glm5_stall_timeout = 0", "ini glm5_stall_timeout in */tox.ini = '0' must be a number > 0"),
    (["--sglang-url", "not-a-url"], "", "--sglang-url = 'not-a-url' is not a URL: give the server's base URL*"),
    (["--glm5-effect", "0"], "", "--glm5-effect = '0' must be a fraction in (0, 1), e.g. 0.05: a change of 0 can "
                                 "never be ruled out"),
    (["--glm5-launches", "99999999999"], "", "--glm5-launches = '99999999999' must be a whole number from 1 to 100 "
                                             "(each is a server launch)"),
    (["--glm5-max-repeats", "101"], "", "--glm5-max-repeats = '101' must be a whole number from 1 to 100*"),
    (["--glm5-html="], "", "--glm5-html = '' is empty: give a value or leave the option out"),
    (["--glm5-shard="], "", "--glm5-shard = '' is empty: give a value or leave the option out"),
    (["--glm5-history="], "", "--glm5-history = '' is empty: give a value or leave the option out"),
    (["--glm5-lease-dir="], "", "--glm5-lease-dir = '' is empty: give a value or leave the option out"),
    ([], "glm5_lease_dir = /proc/leases",
     "GPU lease directory (ini glm5_lease_dir in */tox.ini) /proc/leases cannot be created or written to: *; pick "
     "another directory"),
])
def test_bad_setting_is_one_usage_error(pytester: pytest.Pytester, args: list[str], ini: str, message: str) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makeini(f"[pytest]\nglm5_configs = configs.toml\n{ini}\n")
    pytester.makepyfile(ONE)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: glm5: {message}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_an_unknown_event_loop_is_one_usage_error_before_any_launch(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # It used to mean uvloop silently: a typo of "asyncio" measured with the other loop.
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    pytester.makepyfile(ONE)
    monkeypatch.setenv("GLM5_EVENT_LOOP", "asycnio")
    result = pytester.runpytest("--glm5-sim")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: glm5: env GLM5_EVENT_LOOP='asycnio' is not an event loop the load client "
                                 "knows: give uvloop or asyncio *"])
    assert "launched" not in result.stdout.str()
    for value in ("asyncio", "uvloop", ""):
        monkeypatch.setenv("GLM5_EVENT_LOOP", value)
        assert pytester.runpytest("--glm5-sim", "--co", "-q").ret == pytest.ExitCode.OK


def test_bad_suite_default_names_the_conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_glm5_suite(config):\n    return {'defaults': {'glm5-stall-timeout': 'x'}}\n")
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: glm5: suite default glm5-stall-timeout in conftest.py = 'x' must be a "
                                 "number > 0"])


@pytest.mark.parametrize("option", ["--glm5-log-dir", "--glm5-report"])
def test_unwritable_output_is_one_usage_error_before_anything_runs(pytester: pytest.Pytester, option: str) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile(ONE)
    # /proc takes no new files, even for root (chmod would not stop root).
    result = pytester.runpytest(option, "/proc/glm5-nope/x" if option == "--glm5-log-dir" else "/proc/report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert out.count("ERROR: glm5:") == 1 and "Traceback" not in out, out
    assert servers_of(model) == []


@pytest.mark.slow
def test_report_that_fails_at_the_end_keeps_the_summary(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import os, pytest
@pytest.mark.server_config('a')
def test_x(bench):
    bench(concurrency=1, num_prompts=2, output_len=4)
    os.rmdir("out")  # the report's directory goes away while the run is on
""")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("--glm5-report", "out/report.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    said_lines(result, ["*glm5 servers*", "a: launched pid *",
                                 "cannot write --glm5-report out/report.json: No such file or directory; the "
                                 "summary above is all there is of this run"])
