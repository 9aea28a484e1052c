"""A stopped (SIGSTOP) server, hangs and crashes: each named for what it is."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plugin_helpers import assert_no_server_left, said_lines, write_configs

from pytest_glm5.configs import ServerConfig
from pytest_glm5.load.types import BenchResult, Workload
from pytest_glm5.metrics import RequestTiming
from pytest_glm5.perf.measurement import cut_off
from pytest_glm5.servers.engines import SimEngine
from pytest_glm5.servers.forensics import request_stack_dump
from pytest_glm5.servers.process import ServerHandle, ServerRecord


@pytest.mark.slow
def test_stopped_server_is_named_alive_but_not_answering(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import os, signal, pytest
@pytest.mark.server_config("a")
def test_1(sglang_server): os.kill(sglang_server.pid, signal.SIGSTOP)
@pytest.mark.server_config("a")
def test_2(bench): bench(concurrency=1, num_prompts=2, output_len=4)
@pytest.mark.server_config("a")
def test_3(bench): bench(concurrency=1, num_prompts=2, output_len=4)
""")
    t0 = time.monotonic()
    result = pytester.runpytest("--glm5-stop-timeout", "60")
    elapsed = time.monotonic() - t0
    result.assert_outcomes(passed=1, failed=1, errors=1)
    said_lines(result, ["*server for a (pid *) is alive but not answering at http://127.0.0.1:*: process "
                                 "state stopped (SIGSTOP or a debugger); nothing answered within 5 s (*)*",
                                 "*server for a hung earlier*"])
    assert "URL right" not in result.stdout.str()  # our own process is alive: the URL is not in doubt
    # One preflight's 5 s, not the 60 s SIGTERM wait, nor the 10 s each side read (server info, /metrics, lag, the
    # canary) waited before they looked at the process state (36 s in all, measured).
    assert elapsed < 20, elapsed
    assert_no_server_left(model)


@pytest.mark.slow
def test_a_server_that_answers_with_errors_is_not_taken_for_hung(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, '[config.a]\nflags = { sim-fault = "http500=1" }\n')
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_1(bench): bench(concurrency=1, num_prompts=2, output_len=4)
@pytest.mark.server_config("a")
def test_2(bench): bench(concurrency=1, num_prompts=2, output_len=4)
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert out.count("HTTP 500") >= 2, out  # each test got the server's own answer
    assert "alive but not answering" not in out and "hung earlier" not in out
    assert out.count("a: launched pid") == 1  # the same server served both tests
    assert_no_server_left(model)


def test_hang_report_says_no_dump_when_none_was_written(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("")
    quiet = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGUSR1, "
                              "signal.SIG_IGN); print('ready', flush=True); time.sleep(30)"],
                             stdout=open(log, "ab"))  # noqa: SIM115 - the child owns it
    try:
        while "ready" not in log.read_text():
            time.sleep(0.05)
        rec = ServerRecord("a", "", 0, quiet.pid, "", str(log), "sim")
        handle = ServerHandle(ServerConfig("a"), rec, SimEngine(), quiet)
        assert request_stack_dump(handle, wait_s=0.5) == ("asked for a stack dump (SIGUSR1) but none reached the log "
                                                          "within 0.5 s")
    finally:
        quiet.kill()
        quiet.wait()


def test_cut_off_counts_only_requests_on_the_server_when_it_died() -> None:
    wl = Workload(concurrency=4, num_prompts=60)
    done = [RequestTiming(start=0.0, prompt_len=1, success=True, latency=1.0) for _ in range(4)]
    died = [RequestTiming(start=0.5 + i * 0.01, prompt_len=1, latency=0.6 - i * 0.01) for i in range(4)]  # end 1.1
    refused = [RequestTiming(start=1.1 + i * 0.001, prompt_len=1, latency=0.0005) for i in range(52)]
    result = BenchResult(url="", workload=wl, metrics={"completed": 4.0}, records=done + died + refused, errors=[],
                         server_info={}, max_in_flight=4, started_at=0.0)
    assert cut_off(result) == 4


def test_emulator_stops_at_once_on_sigterm_while_loading(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_glm5.sim", "--model-path", "/m", "--port", "0",
                             "--sim-profile", "tiny", "--sim-startup-s", "600"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        while "Load weight begin" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - t0 < 2.0
    finally:
        proc.kill()
