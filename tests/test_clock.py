"""The emulator's clock per point (load/clock.py): a point its host cannot keep up with runs slower and reads on the
launch's clock, against a real emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_glm5.configs import ServerConfig
from pytest_glm5.load import clock
from pytest_glm5.load.types import BenchResult, Workload
from pytest_glm5.metrics import RequestTiming, compute_metrics
from pytest_glm5.perf.measurement import measure
from pytest_glm5.servers.engines import SimEngine
from pytest_glm5.servers.process import ServerHandle, ServerRecord

from simproc import Sim, http

SCALE = 0.05  # a glm5-sm120 decode step is ~5 ms of wall time here: the model's time, not the host's, sets the figures


def _handle(sim: Sim, tmp_path: Path) -> ServerHandle:
    rec = ServerRecord("a", sim.url, sim.port, sim.proc.pid, "", str(sim.log), "sim")
    return ServerHandle(ServerConfig("a"), rec, SimEngine(profile="glm5-sm120", time_scale=SCALE), None)


def _point() -> Workload:
    return Workload(concurrency=4, num_prompts=8, input_len=64, output_len=16, warmup=0)


def test_the_policy_slows_only_closed_loops_past_what_the_host_keeps() -> None:
    assert clock.factor(Workload(concurrency=256, num_prompts=512), 0.01) == 1.0
    assert clock.factor(Workload(concurrency=257, num_prompts=512), 0.01) == 2.0
    assert clock.factor(Workload(concurrency=1024, num_prompts=2048), 0.01) == 4.0
    assert clock.factor(Workload(concurrency=1024, num_prompts=2048), 0.02) == 2.0  # a slower launch needs less
    assert clock.factor(Workload(concurrency=1024, num_prompts=2048), 1.0) == 1.0  # the box's own clock
    # Open loops' arrivals are written on the launch's clock: never slowed.
    assert clock.factor(Workload(concurrency=1024, num_prompts=8, duration_s=5.0, request_rate=3.0), 0.01) == 1.0
    assert clock.factor(Workload(concurrency=1024, num_prompts=8, trace="t.jsonl"), 0.01) == 1.0


def test_a_run_on_a_slower_clock_converts_to_the_launchs_exactly() -> None:
    """The same requests with every time four times longer convert back to the very figures of the original."""
    wl = Workload(concurrency=2, num_prompts=3)
    fast = [RequestTiming(start=100.0 + i * 0.3, sent=100.0 + i * 0.3, prompt_len=10, success=True, ttft=0.05 * (i + 1),
                          latency=1.0 + i, output_len=8, itl=[0.1 + 0.01 * k for k in range(7)], ttfo=0.2,
                          queued=0.01) for i in range(3)]
    slow = [RequestTiming(start=100.0 + (r.start - 100.0) * 4, sent=100.0 + (r.sent - 100.0) * 4, prompt_len=10,
                          success=True, ttft=r.ttft * 4, latency=r.latency * 4, output_len=8,
                          itl=[x * 4 for x in r.itl], ttfo=0.8, queued=0.04) for r in fast]
    want = compute_metrics(fast, 3.5, 100.0)
    measured = {**compute_metrics(slow, 14.0, 100.0), "failed": 1.0, "hit": 0.5}  # the client's own keys stay
    got = clock.on_launch_clock(BenchResult("u", wl, measured, slow, [], {}, 2, 0.0, lag_s=0.4), 4.0)
    assert got.clock == 4.0 and got.lag_s == pytest.approx(0.1)
    assert got.metrics["failed"] == 1.0 and got.metrics["hit"] == 0.5
    for key, value in want.items():
        if key != "failed":
            assert got.metrics[key] == pytest.approx(value), key
    assert clock.on_launch_clock(got, 1.0) is got


def test_again_doubles_a_closed_loop_that_fell_behind_and_nothing_else() -> None:
    wl = Workload(concurrency=512, num_prompts=1024)

    def ran(by: float, lag: float) -> BenchResult:
        return BenchResult("u", wl, {"duration": 10.0}, [], [], {}, 1, 0.0, lag_s=lag, clock=by)

    assert clock.again(wl, 2.0, ran(2.0, 0.5)) == 4.0  # 5% behind
    assert clock.again(wl, 2.0, ran(2.0, 0.1)) is None  # 1%: kept up
    assert clock.again(wl, 2.0, ran(1.0, 0.5)) is None  # the server could not be slowed: asking again buys nothing
    assert clock.again(wl, clock.MAX_FACTOR, ran(clock.MAX_FACTOR, 0.5)) is None
    assert clock.again(wl, 1.0, None) is None
    trace = Workload(concurrency=512, num_prompts=8, trace="t.jsonl")
    assert clock.again(trace, 1.0, BenchResult("u", trace, {"duration": 10.0}, [], [], {}, 1, 0.0, lag_s=5.0)) is None


def test_a_point_on_a_slower_clock_reads_as_the_launchs(sim_factory: Callable[..., Sim], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One emulator, one point at its launch's clock and at 4x slower: the slow run takes longer on the wall and its
    converted figures are the launch's (within what two runs of a noisy host differ by); the clock is restored."""
    sim = sim_factory("--enable-metrics", "--sim-startup-s", "0", "--sim-noise", "0", "--sim-step-noise", "0",
                      profile="glm5-sm120", scale=SCALE)
    server = _handle(sim, tmp_path)
    as_launched = measure(server, _point())
    monkeypatch.setattr(clock, "STREAMS_KEPT", 0.25)  # c4 at x0.05: 4 times the streams kept, so 4x slower
    slowed = measure(server, _point())
    assert as_launched.result is not None and slowed.result is not None, (as_launched.problem, slowed.problem)
    a, s = as_launched.result, slowed.result
    assert (a.clock, s.clock) == (1.0, 4.0)
    wall = [r.latency * s.clock for r in s.records]  # what the wall saw
    assert sum(wall) > 2.5 * sum(r.latency for r in a.records)
    for key in ("median_tpot_ms", "output_throughput", "median_e2e_latency_ms"):
        assert s.metrics[key] == pytest.approx(a.metrics[key], rel=0.3), key
    assert json.loads(http("GET", sim.url + "/server_info")[1])["sim"]["time_scale"] == SCALE
    monkeypatch.setattr(clock, "STREAMS_KEPT", 256)
    again = measure(server, _point())
    assert again.result is not None and again.result.clock == 1.0
    assert again.result.metrics["duration"] == pytest.approx(a.metrics["duration"], rel=0.5)  # restored: not 4x
    # What the host's CPUs made the server wait is measured over the run, on the launch's clock like its figures.
    assert a.wait_s is not None and s.wait_s is not None and a.to_dict()["server_cpu_wait_s"] == a.wait_s >= 0


@pytest.mark.slow
def test_a_point_that_fell_behind_is_measured_again_slower_and_said(sim_factory: Callable[..., Sim], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sim = sim_factory("--enable-metrics", "--sim-startup-s", "0", profile="glm5-sm120", scale=SCALE)
    said: list[str] = []
    real = clock.behind
    # The host's share is what this machine gives: held as if it fell 5% behind until the clock is 4x slower.
    monkeypatch.setattr(clock, "behind", lambda r: 0.05 if r.clock < 4 else real(r))
    m = measure(_handle(sim, tmp_path), _point(), lambda name, elapsed, line, doing="": said.append(line))
    assert m.result is not None and m.result.clock == 4.0, m.problem
    assert [ln.split(": ")[-1] for ln in said if "fell behind" in ln] == ["measured again at 2x",
                                                                          "measured again at 4x"]
    assert "fell behind its model for 5% of c4 64/16 sglang at 1x its clock" in said[0]


def test_the_emulator_refuses_a_clock_it_cannot_run(sim: Sim) -> None:
    for body in ({"factor": 0.5}, {"factor": "x"}, {}, {"factor": 65}):
        status, text = http("POST", sim.url + "/sim/clock", body)
        assert status == 400 and b"factor" in text, (body, status, text)
    assert http("POST", sim.url + "/sim/clock", {"factor": 2})[0] == 200


def test_the_cpu_wait_of_a_process_tree_counts_its_children() -> None:
    """Two children spinning on one CPU each wait for it about half the time: the parent's tree counts it (Linux's
    schedstat; the report's server_cpu_wait_s), a process that is gone has none. (A child that exits takes its count
    with it: SGLang's children live as long as the server.)"""
    import os
    import subprocess
    import sys
    import time

    from pytest_glm5.servers.process import cpu_wait_s

    code = ("import os, subprocess, sys, time; os.sched_setaffinity(0, {0}); "
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time\\nt = time.time()\\n"
            "while time.time() - t < 4: pass']) for _ in range(2)]; [k.wait() for k in kids]; time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)  # the children started and spin (4 s): read them while they live
        start = cpu_wait_s(parent.pid)
        time.sleep(1.0)
        end = cpu_wait_s(parent.pid)
        assert start is not None and end is not None and end - start > 0.2, (start, end)
    finally:
        parent.kill()
        parent.wait()
    assert cpu_wait_s(parent.pid) is None and cpu_wait_s(None) is None
    assert cpu_wait_s(os.getpid()) is not None
