"""The load client measures itself: what it says about its own delay, and when a point is client-bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_glm5.load.clientload import ClientLoad

from simproc import Sim

QUIET = ClientLoad(duration_s=10, lag_mean_ms=0.4, lag_p99_ms=10.0, lag_max_ms=30, send_delay_mean_ms=13.0,
                   send_delay_p99_ms=30.0, cpu_share=0.48, wait_share=0.0004)
METRICS = {"mean_e2e_latency_ms": 500.0, "output_throughput": 1000.0, "p99_ttft_ms": 40.0, "mean_itl_ms": 4.0}


def test_the_clients_own_work_is_not_a_reason_but_waiting_for_a_cpu_is() -> None:
    # 13 ms to write 256 requests is paid by the reference runs too: not judged away.
    assert QUIET.why("output_throughput", METRICS, 0.03) is None
    starved = replace(QUIET, lag_mean_ms=5.0, send_delay_mean_ms=34.0, cpu_share=0.34, wait_share=0.45)
    why = starved.why("output_throughput", METRICS, 0.03)
    assert why is not None and why.startswith("client-bound: the load client was kept from its CPU (it waited for "
                                              "a CPU 45% of the run and ran 34%)")
    # 39 ms of delay x 57% of it waiting = 4.4% of a 500 ms request, against half of a 3% tolerance.
    assert starved.share("output_throughput", METRICS) == pytest.approx(39 * 0.45 / 0.79 / 500)
    assert starved.why("output_throughput", METRICS, 0.20) is None  # a wide tolerance can afford it
    assert starved.share("mean_itl_ms", METRICS) == 0.0  # a late read moves both stamps of a gap


def test_a_saturated_client_measures_only_itself() -> None:
    busy = replace(QUIET, cpu_share=0.95)
    why = busy.why("mean_itl_ms", METRICS, 0.5)
    assert why is not None and "saturated" in why


def test_without_cpu_accounting_the_whole_delay_counts() -> None:
    blind = replace(QUIET, cpu_share=None, wait_share=None)
    assert blind.starved == 1.0
    assert blind.why("output_throughput", METRICS, 0.03) is not None  # 13.4 ms of 500 is 2.7% > 1.5%


def _bench(url: str, out: Path) -> dict[str, object]:
    argv = [sys.executable, "-m", "pytest_glm5.cli", "bench", "--url", url, "--concurrency", "64", "--num-prompts",
            "256", "--input-len", "64", "--output-len", "64", "--json", str(out)]
    subprocess.run(["taskset", "-c", "0", *argv], check=True, capture_output=True, timeout=120)
    doc: dict[str, object] = json.loads(out.read_text())[0]
    return doc


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
@pytest.mark.slow
@pytest.mark.solo
def test_a_busy_loop_on_the_clients_cpu_shows_in_its_own_figures(sim_factory: Callable[..., Sim],
                                                                   tmp_path: Path) -> None:
    s = sim_factory("--sim-noise", "0", "--sim-step-noise", "0", profile="glm5-sm120", scale=0.01)
    os.sched_setaffinity(s.proc.pid, {1})  # the server on its own CPU; the client alone on CPU 0, then not alone
    quiet = _bench(s.url, tmp_path / "quiet.json")
    # Busy loops on the client's CPU: the scheduler favours a process that sleeps often, so one loop alone takes
    # less from the client than a half. Eight, not two: on a box already busy (CI beside two loops of its own) the
    # quiet run waits too (wait share 0.11), and two more loops only doubled it (0.22 against a rule of 2x); with
    # four, beside two loops and the suite's two workers (the quiet run already 63% starved), what was left of the
    # starved share fell to 0.19 of 0.37, not quite half.
    hogs = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(8)]
    try:
        busy = _bench(s.url, tmp_path / "busy.json")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    q, b = ClientLoad(**quiet["client"]), ClientLoad(**busy["client"])  # type: ignore[arg-type]
    assert q.wait_share is not None and b.wait_share is not None
    qm, bm = quiet["metrics"], busy["metrics"]
    shares = [(q.wait_share, b.wait_share), (q.starved, b.starved),
              (q.share("output_throughput", qm) or 0, b.share("output_throughput", bm) or 0)]  # type: ignore[arg-type]
    assert b.wait_share > 0.15, (q, b)
    # Each share rises clearly: it doubles, or, where the box was busy already and the quiet one was large (0.46-0.49
    # beside CI's two loops), what is left of it halves: a share cannot pass 1, so it cannot always double.
    assert all(busy > 2 * calm or 1 - busy < (1 - calm) / 2 for calm, busy in shares), (shares, q, b)
