"""The load client measures itself: how late its event loop ran, how long each request waited in the client before
its bytes left, and how much of the CPU it needed the OS gave it. A starved client reads as a slow server; these
figures say when a measured point holds more of the client's cost than the gate may ignore ("client-bound").

The client's delay enters each metric as follows (closed loop, one event loop):
- TTFT and E2E: the request waits in the client before it is written (`send delay`), and its tokens wait in the
  socket until the loop gets to them (`loop lag`): both add to the client's stamps.
- ITL and TPOT: a late read moves both stamps of a gap, so the mean hardly moves; the tail gets the lag's tail.
- Throughput: each request's cycle is its E2E plus the client's turnaround, so the share is that of E2E.

Part of that delay is the client's own work, which the reference runs paid too (writing 256 requests at once takes
10-30 ms on 2 cores, run after run). What a reference did not pay is the time the client was ready to run and the
OS gave its CPU to someone else: Linux's schedstat counts it (runnable, waiting for a CPU). So the delay the gate
must not judge is the measured delay times the share of the client's runnable time spent waiting for a CPU; a
client on a CPU nearly all the run is saturated, and everything it measured is its own limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..metrics import ACCEPTANCE_METRICS, THROUGHPUT_METRICS, percentile

# A timer every 100 ms, after 5 ms ones through the window's first 2 s. A timer's wake costs the client far more
# than a token does on a VM (measured on a 2-core VM at one stream of 250 tokens/s: a 5 ms tick added 60 us of CPU
# per token, a 50 ms one 15-20 us, against 3 us to parse a token): a 5 ms tick throughout was more than half the
# client's CPU at one stream. The mean lag does not depend on the tick (a timer due at a random moment is late by
# what is left of the busy stretch it fell in), but its spread does: a 1-s window of 100 ms ticks has ten samples,
# and one that met a 60 ms stall read a 6 ms mean (a CI run called a point client-bound on it). So a window starts
# with fast ticks and each sample counts for the time it stands for; 15 minutes still hold 9,000 for the tail.
TICK_S = 0.1
FIRST_TICK_S = 0.005
FIRST_FOR_S = 2.0
# asyncio wakes a timer up to 1 ms late by design (epoll counts whole ms, rounded up); a socket's data wakes it at
# once. Only lateness beyond that is the loop being busy or the process being kept off a CPU.
TIMER_ROUNDING_S = 0.001
# A point is client-bound when the client's own cost is more than this share of the smallest change the gate
# would call a regression: beyond it, the client could make (or hide) a regression by itself.
SHARE_OF_TOLERANCE = 0.5
SATURATED = 0.9  # the loop's thread on a CPU this share of the window: the client is the bottleneck
_SCHEDSTAT = "/proc/thread-self/schedstat"


def _sched() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of this thread, from Linux's schedstat."""
    try:
        with open(_SCHEDSTAT) as f:
            on_cpu, waiting, _ = f.read().split()
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ClientLoad:
    """What the client cost itself over one measured window (seconds unless the name says ms)."""

    duration_s: float
    lag_mean_ms: float  # how late a timer of the event loop fired, on average: the wait of a token in the socket
    lag_p99_ms: float
    lag_max_ms: float
    send_delay_mean_ms: float  # from a request's start stamp until its body was written
    send_delay_p99_ms: float
    cpu_share: float | None  # the loop's thread on a CPU, as a share of the window (1.0: the client is saturated)
    wait_share: float | None  # runnable but kept off every CPU by the OS, as a share of the window

    @property
    def starved(self) -> float:
        """The share of the client's runnable time spent waiting for a CPU (1.0 where Linux does not say)."""
        if self.cpu_share is None or self.wait_share is None:
            return 1.0
        runnable = self.cpu_share + self.wait_share
        return self.wait_share / runnable if runnable > 0 else 0.0

    def cost_ms(self, metric: str) -> float:
        """The client's whole delay in one request's figure for this metric family, in ms."""
        tail = metric.startswith(("p99_", "p95_", "p90_", "max_"))
        lag = self.lag_p99_ms if tail else self.lag_mean_ms
        send = self.send_delay_p99_ms if tail else self.send_delay_mean_ms
        if "_itl_" in metric or "_tpot_" in metric or metric == "max_itl_ms":
            return self.lag_p99_ms if tail else 0.0
        return send + lag

    def share(self, metric: str, metrics: dict[str, float]) -> float | None:
        """The part of the client's delay that came from waiting for a CPU, as a share of the measured value (None:
        the metric is not one it distorts)."""
        if metric in ACCEPTANCE_METRICS:
            return None  # drafts accepted are the same however late the client reads them
        if metric in THROUGHPUT_METRICS:
            reference = metrics.get("mean_e2e_latency_ms", 0.0)
            cost = self.cost_ms("mean_e2e_latency_ms")
        elif metric.endswith("_ms"):
            reference = metrics.get(metric, 0.0)
            cost = self.cost_ms(metric)
        else:
            return None
        return cost * self.starved / reference if reference > 0 else None

    def why(self, metric: str, metrics: dict[str, float], tolerance: float) -> str | None:
        """Why this metric of this point measured the client (None: the client's cost is small against the
        tolerance)."""
        if self.cpu_share is not None and self.cpu_share >= SATURATED and metric in metrics:
            return (f"client-bound: the load client was on a CPU {self.cpu_share * 100:.0f}% of the run (saturated: "
                    "its own speed set the figures): not judged (run fewer streams per client process)")
        share = self.share(metric, metrics)
        if share is None or tolerance <= 0 or share <= SHARE_OF_TOLERANCE * tolerance:
            return None
        waited = (f"it waited for a CPU {self.wait_share * 100:.0f}% of the run and ran {self.cpu_share * 100:.0f}%"
                  if self.wait_share is not None and self.cpu_share is not None else "Linux gave no CPU accounting")
        return (f"client-bound: the load client was kept from its CPU ({waited}); that part of its delay "
                f"(event loop {self.lag_mean_ms:.2f} ms late on average, p99 {self.lag_p99_ms:.1f} ms; "
                f"{self.send_delay_mean_ms:.2f} ms from stamp to send) is {share * 100:.1f}% of {metric}, more than "
                f"half the {tolerance * 100:g}% tolerance: not judged (free the client's CPU)")

    def to_dict(self) -> dict[str, float | None]:
        """JSON-ready figures."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


class ClientMonitor:
    """Started around a measured window inside the client's event loop; `stop` gives its ClientLoad."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, float]] = []  # (seconds late, seconds of the window the sample stands for)
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self._sched0: tuple[float, float] | None = None

    async def _tick(self) -> None:
        # Lateness against the time the loop itself set the timer for: uvloop's clock is libuv's, in whole ms and
        # read once per loop pass, so it sets timers from a clock up to a pass old. Both clocks are CLOCK_MONOTONIC.
        loop = asyncio.get_running_loop()
        fast_until = loop.time() + FIRST_FOR_S
        while True:
            now = loop.time()
            tick = FIRST_TICK_S if now < fast_until else TICK_S
            due = now + tick
            await asyncio.sleep(tick)
            self.lags.append((max(0.0, time.monotonic() - due - TIMER_ROUNDING_S), tick))

    def start(self) -> ClientMonitor:
        """Begin the window (call inside the running loop)."""
        self._t0 = time.perf_counter()
        self._sched0 = _sched()
        self._task = asyncio.ensure_future(self._tick())
        return self

    def stop(self, send_delays: Sequence[float]) -> ClientLoad:
        """End the window; send_delays are the measured requests' stamp-to-send seconds."""
        duration = time.perf_counter() - self._t0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(Exception):
                self._task.exception() if self._task.done() else None
        end = _sched()
        cpu = wait = None
        if self._sched0 is not None and end is not None and duration > 0:
            cpu = (end[0] - self._sched0[0]) / duration
            wait = (end[1] - self._sched0[1]) / duration
        lags = [(late * 1000, weight) for late, weight in self.lags] or [(0.0, 1.0)]
        sends = [x * 1000 for x in send_delays] or [0.0]
        total = sum(w for _, w in lags)
        return ClientLoad(duration, sum(x * w for x, w in lags) / total, _weighted_quantile(lags, 0.99, total),
                          max(x for x, _ in lags), sum(sends) / len(sends), percentile(sends, 99), cpu, wait)


def _weighted_quantile(samples: list[tuple[float, float]], q: float, total: float) -> float:
    """The smallest value with at least q of the total weight at or below it."""
    seen = 0.0
    for value, weight in sorted(samples):
        seen += weight
        if seen >= q * total:
            return value
    return max(v for v, _ in samples)
