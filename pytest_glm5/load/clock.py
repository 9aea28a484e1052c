"""The emulator's clock for one workload: how much slower than its launch's time scale a point is measured, and its
figures converted back to the launch's clock.

Why: the rehearsal runs the emulator 100x faster than the box (x0.01), and on a 2-core machine a wave of 1,024 streams
asks more CPU of the emulator and the load client than the model's own time for it leaves them: the emulator falls
behind its model, and the point measured the host (emulator-bound, never judged). A closed loop's figures are the
model's times, so the same point run 4x slower (x0.04) and converted back (a latency / 4, a throughput x 4) is the same
measurement of the model with a quarter of the host's share in it. Open loops (a request rate, a trace, a duration)
keep the launch's clock: their arrivals are written on it (perf.on_clock).

The policy: STREAMS_KEPT streams at x0.01 (in proportion at other scales) run on the launch's clock; a point of more
streams runs that many times slower, to the next power of two. A point that still fell behind for more than BEHIND of
its run is measured again at twice the factor (perf/measurement.py), up to MAX_FACTOR.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..metrics import RequestTiming, compute_metrics
from .types import BEHIND, BenchResult, Workload

STREAMS_KEPT = 256  # streams a 2-core machine keeps up with at x0.01 (c256 sweep points: not behind, 10 nights)
MAX_FACTOR = 32.0
_REFERENCE_SCALE = 0.01


def factor(workload: Workload, time_scale: float) -> float:
    """How many times slower than its launch's clock the emulator runs this workload (1: the launch's clock).

    >>> from pytest_glm5.load.types import Workload
    >>> [factor(Workload(concurrency=c, num_prompts=2 * c), 0.01) for c in (1, 256, 300, 512, 1024)]
    [1.0, 1.0, 2.0, 2.0, 4.0]
    >>> factor(Workload(concurrency=1024, num_prompts=2048), 0.04), factor(Workload(concurrency=1024, num_prompts=8,
    ...        request_rate=5.0), 0.01)
    (1.0, 1.0)
    """
    if _open_loop(workload):
        return 1.0
    kept = STREAMS_KEPT * time_scale / _REFERENCE_SCALE
    if workload.concurrency <= kept:
        return 1.0
    return min(MAX_FACTOR, float(2 ** math.ceil(math.log2(workload.concurrency / kept))))


def again(workload: Workload, by: float, result: BenchResult | None) -> float | None:
    """The factor to measure this point again at, where the run asked at `by` fell behind its model for more than
    BEHIND of it (None: it kept up, it is an open loop, the server has no clock to slow, or it is as slow as it goes).
    """
    if result is None or _open_loop(workload):
        return None
    if result.clock != by or behind(result) <= BEHIND or by * 2 > MAX_FACTOR:
        return None
    return by * 2


def _open_loop(workload: Workload) -> bool:
    # Arrivals written on the launch's clock (a rate, a trace, a duration): never slowed.
    return workload.request_rate is not None or workload.trace is not None or bool(workload.duration_s)


def behind(result: BenchResult) -> float:
    """The share of the run the emulator spent behind its model (0 where not known)."""
    duration = result.metrics.get("duration", 0.0)
    return result.lag_s / duration if result.lag_s is not None and duration > 0 else 0.0


def on_launch_clock(result: BenchResult, by: float) -> BenchResult:
    """The result of a run at `by` times the launch's clock, as the launch's clock would have measured it: every time
    divided by `by`, every rate multiplied, the metrics computed again from the converted requests (a closed loop's).

    >>> from pytest_glm5.load.types import Workload
    >>> from pytest_glm5.metrics import RequestTiming, compute_metrics
    >>> recs = [RequestTiming(start=10.0, prompt_len=8, success=True, ttft=0.4, latency=2.0, output_len=5,
    ...                       itl=[0.4] * 4)]
    >>> r = BenchResult("u", Workload(concurrency=1, num_prompts=1), compute_metrics(recs, 2.0, 10.0), recs, [], {},
    ...                 1, 0.0, lag_s=0.2)
    >>> x = on_launch_clock(r, 4.0)
    >>> x.metrics["mean_ttft_ms"], x.metrics["output_throughput"], x.metrics["duration"], x.lag_s, x.clock
    (100.0, 10.0, 0.5, 0.05, 4.0)
    """
    if by == 1.0:
        return result
    t0 = min((r.start for r in result.records), default=0.0)
    records = [_converted(r, t0, by) for r in result.records]
    again = compute_metrics(records, result.metrics.get("duration", 0.0) / by, t0)
    # The client's own counts (failed includes requests never sent) and what compute_metrics does not make stay.
    metrics = {**result.metrics, **{k: v for k, v in again.items() if k not in ("completed", "failed")}}
    lag = result.lag_s / by if result.lag_s is not None else None
    wait = result.wait_s / by if result.wait_s is not None else None
    return replace(result, metrics=metrics, records=records, lag_s=lag, wait_s=wait, clock=result.clock * by)


def _converted(r: RequestTiming, t0: float, by: float) -> RequestTiming:
    return replace(r, start=t0 + (r.start - t0) / by, sent=t0 + (r.sent - t0) / by if r.sent else 0.0,
                   ttft=r.ttft / by, latency=r.latency / by, itl=[x / by for x in r.itl],
                   ttfo=r.ttfo / by if r.ttfo is not None else None, queued=r.queued / by)
