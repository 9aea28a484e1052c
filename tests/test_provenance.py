"""Provenance and workload per entry, the server log in a failing test's report, stopping and closing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from plugin_helpers import HARDWARE, assert_no_server_left, said_lines, write_configs

from pytest_glm5.cli import main as glm5
from pytest_glm5.configs import ServerConfig
from pytest_glm5.servers.engines import SimEngine
from pytest_glm5.servers.pool import PoolSettings, ServerPool
from pytest_glm5.servers.process import ServerError

PROV_TESTS = """
import pytest
@pytest.mark.server_config("a")
def test_a(perf):
    perf.check(perf.run("s", concurrency=1, num_prompts=2, output_len=4, warmup=0), "s", ["output_throughput"])
@pytest.mark.server_config("b")
def test_b(perf):
    perf.check(perf.run("s", concurrency=2, num_prompts=4, output_len=4, warmup=0), "s", ["output_throughput"])
"""


@pytest.mark.slow
def test_each_entry_gets_its_own_provenance_and_workload(pytester: pytest.Pytester) -> None:
    import tomllib

    model = write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = { tp-size = 2 }\n")
    pytester.makepyfile(PROV_TESTS)
    pytester.runpytest("--update-baselines").assert_outcomes(passed=2)
    data = tomllib.loads((pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml").read_text())
    a, b = data["a"]["s"]["output_throughput"], data["b"]["s"]["output_throughput"]
    assert a["provenance"]["server_args"] != b["provenance"]["server_args"]  # each its own server's args
    assert a["workload"] == {"concurrency": 1, "input_len": 128, "output_len": 4, "protocol": "sglang",
                             "range_ratio": 1.0, "sampling": "random-ids"}
    assert b["workload"]["concurrency"] == 2
    # The same scenario name under another workload is not compared: it says so.
    pytester.makepyfile(PROV_TESTS.replace("concurrency=1, num_prompts=2", "concurrency=3, num_prompts=6"))
    result = pytester.runpytest("-rA", "-k", "test_a")  # b's throughput against a floor of one run is not the point
    result.assert_outcomes(passed=1, deselected=1)
    said_lines(result, ["*a s output_throughput * (workload changed: baseline recorded with c1 128/4 sglang, "
                                 "random-ids ids, measured with c3 128/4 sglang, random-ids ids; not compared, record "
                                 "it with --update-baselines)"])
    assert_no_server_left(model)


def test_failing_test_report_carries_the_server_log_tail(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): assert 0\n")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    said_lines(result, ["*glm5 server log: a (last * lines of */a-*.log)*",
                                 "*The server is fired up and ready to roll!*"])
    assert_no_server_left(model)


def test_stopping_another_processs_server_does_not_wait_out_its_zombie(tmp_path: Path) -> None:
    # Keep mode under xdist: a worker stops another worker's kept server, which stays a zombie until its own parent
    # reaps it. At c979bd9 psutil.wait_procs took that zombie for alive and waited the whole stop timeout plus 10 s.
    from pytest_glm5.servers.process import kill_tree

    out = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; p = subprocess.Popen(['sleep', "
                               f"'60']); open({str(out)!r}, 'w').write(str(p.pid)); time.sleep(60)"])
    try:
        while not out.exists() or not out.read_text():
            time.sleep(0.02)
        child = int(out.read_text())
        t0 = time.monotonic()
        kill_tree(child, 30.0)
        assert time.monotonic() - t0 < 5.0
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE  # its parent has not reaped it: still stopped
    finally:
        parent.kill()
        parent.wait()


def test_a_config_name_that_is_not_a_file_name_is_one_line(pytester: pytest.Pytester) -> None:
    # At c979bd9 `[config."tp8/fast"]` ended in a traceback when its log file was opened.
    write_configs(pytester, '[config."tp8/fast"]\nflags = {}\n')
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('tp8/fast')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: */configs.toml: config name 'tp8/fast' may hold only letters, digits, '_', "
                                 "'.' and '-' (it names log files and baselines tables); rename the [[]config.NAME] "
                                 "table"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_glm5_history_names_only_the_filters_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_glm5.report.history import append

    doc = {"run": {"time": "2026-12-01T00:00:00+00:00", "commit": "abc"}, "verdicts": [
        {"config": "tp8", "scenario": "s", "metric": "output_throughput", "measured": 10.0, "model": "/m/M",
         "provenance": {"hardware": "hw"}, "launches": [], "verdict": "pass"}]}
    append(tmp_path, doc)
    assert glm5(["history", str(tmp_path), "--metric", "p99_ttft_ms"]) == 2
    err = capsys.readouterr().err
    assert "no series matches --metric p99_ttft_ms in" in err and "None" not in err, err


@pytest.mark.slow
def test_stop_servers_says_its_message_once(pytester: pytest.Pytester) -> None:
    # At c979bd9 pytest.exit printed it twice ("Exit: ..." and the "!!! _pytest.outcomes.Exit: ... !!!" banner).
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_subprocess("--glm5-stop-servers")
    assert result.ret == 0
    out = result.stdout.str() + result.stderr.str()
    assert out.count("no kept servers recorded") == 1 and "Exit" not in out, out


def test_no_server_is_launched_once_the_pool_is_closed(tmp_path: Path) -> None:
    # After Ctrl-C the session closes the pool; a fixture or late test asking for a server then must not launch
    # one that nothing would stop (at c979bd9 it did).
    pool = ServerPool(PoolSettings(model="/m", log_dir=tmp_path), lambda cfg: SimEngine(profile="tiny"))
    pool.close()
    with pytest.raises(ServerError, match=r"the run is ending .*: no server for a is launched now"):
        pool.get(ServerConfig("a", engine="sim"))
    assert pool.records == {} and not list(tmp_path.glob("*.log"))
