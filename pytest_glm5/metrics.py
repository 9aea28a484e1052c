"""Per-request records and the metrics computed from them, by SGLang bench_serving's names and formulas.

Each formula follows `calculate_metrics()` in sglang/benchmark/serving.py (0.5.23); see
shared/reference/sglang.md section 1.4. A new metric gets its name and formula here and nowhere else.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Speculative decoding (SGLang's meta_info): tokens a verify pass yields, and the share of drafts accepted. A build that
# accepts fewer drafts at the same speed here will cost speed at another concurrency or prompt mix. They are the text's
# and the build's, never the client's, nor the box's speed.
ACCEPTANCE_METRICS = ("spec_accept_length", "spec_accept_rate")
# Higher is better for these; every other metric is latency-like (lower is better).
THROUGHPUT_METRICS = (
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "max_output_tokens_per_s",
    "scaling_2x",
    "output_tokens_per_joule",  # output tokens over the GPUs' energy (NVML's counter): what the box costs
    "slo_attainment",  # the share of a launch's requests within the scenario's SLO (judge/slo.py)
    "slo_capacity",  # the largest ladder concurrency within the SLO (judge/slo.py)
    *ACCEPTANCE_METRICS,
)
# Where 0 is a measurement, not a broken figure: a point with no request within its SLO (the top of a ladder), a
# ladder with no point within it. Every other recorded value is positive.
ZERO_IS_A_VALUE = ("slo_attainment", "slo_capacity")
# ttfo: time to the first answer token of a chat reply, after its thinking (AIPerf's); only chat runs have it.
LATENCY_FAMILIES = ("ttft", "tpot", "itl", "e2e_latency", "ttfo")
STATS = ("mean", "median", "std", "p90", "p95", "p99")
COUNT_METRICS = (
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "concurrency",
    "max_concurrent_requests",
    "duration",
    "mean_reasoning_tokens",  # chat: thinking tokens per request, a property of the workload (held, not gated)
    "mean_input_tokens",  # the prompt as the server counted it (chat: with its template)
    "mean_input_tokens_asked",  # what the client asked of the same prompts (a trace's rows, a range's draws)
    "prefix_hit",  # shared-prefix shapes: cached prompt tokens over prompt tokens in the window, as the server said
    "prefix_hit_ideal",  # what the shape implies (Workload.ideal_prefix_hit)
    "prefix_hit_counters",  # the same from the server's /metrics counters around the window
    "offered_rate",  # open loop: the requests a second asked
    "sent",  # a duration-bounded open loop: the requests its duration held
    "arrival_cv",  # open loop: the CV of the gaps between the sends the client made
    "arrival_cv_asked",  # open loop: the CV of the gaps it drew
    "arrival_rate",  # open loop: the sends a second the client made
    "arrival_rate_asked",  # open loop: the sends a second of the gaps it drew
    "spec_verify_ct",  # speculative decoding: verify passes a request, on average
    "spec_accept_length_counters",  # the window's generated tokens over its verify calls, by the server's /metrics
    "spec_accept_length_server",  # /server_info's avg_spec_accept_length after the window (bench_serving's figure)
)


def log_cv(values: Sequence[float]) -> float:
    """The spread of launch values as the t-test on logs sees it: the sample standard deviation of their logs
    (about the CV for small spreads); values must be positive, at least two."""
    return statistics.stdev(math.log(x) for x in values)


def quantile_of(metric: str) -> float | None:
    """The quantile a latency percentile stands for (`p99_ttft_ms` -> 0.99, `median_itl_ms` -> 0.5), else None."""
    head = metric.split("_", 1)[0]
    if head == "median":
        return 0.5
    if head.startswith("p") and head[1:].isdigit():
        return int(head[1:]) / 100
    return None


CDF_POINTS = 21  # a recorded distribution: 0, 5, ... 100%


def cdf_points(values: Sequence[float], points: int = CDF_POINTS) -> list[float]:
    """The values at evenly spaced quantiles (0 to 100%), as a report or a baselines entry keeps a distribution."""
    ordered = sorted(values)
    return [round(_quantile_sorted(ordered, 100 * i / (points - 1)), 4) for i in range(points)] if ordered else []


def requests_needed(q: float) -> int:
    """Requests per launch a q-quantile is judged from: at least one of them expected above it (n (1 - q) >= 1,
    so 100 for a p99, 10 for a p90); from fewer, the "p99" is the sample's maximum, a figure of the count."""
    return math.ceil(1 / (1 - q) - 1e-9)


def known_metric_names() -> frozenset[str]:
    """Every metric name a baseline may hold."""
    return frozenset(METRICS)


@dataclass(frozen=True)
class Metric:
    """What a metric is, in one place: its name (bench_serving's), the unit shown after its value, its direction
    (a floor when higher is better, else a ceiling) and the latency distribution it is taken over (`ttft`, `itl`)."""

    name: str
    unit: str
    higher_is_better: bool
    family: str = ""


def _described(name: str) -> Metric:
    parts = name.split("_")
    family = parts[1] if len(parts) == 3 and parts[1] in ("ttft", "itl") and parts[2] == "ms" else ""
    tokens = name.startswith("mean_") and name.endswith("_tokens")
    unit = (" ms" if name.endswith("_ms") else " tok" if tokens else " req/s" if name == "request_throughput" else
            " tok/J" if name == "output_tokens_per_joule" else " J" if name == "joules_per_request" else
            " concurrent" if name == "slo_capacity" else " tok/verify" if name.startswith("spec_accept_length") else
            "x" if name.startswith("scaling") else
            " tok/s" if "throughput" in name or name == "max_output_tokens_per_s" else "")
    return Metric(name, unit, name in THROUGHPUT_METRICS or name in ("completed", "concurrency"), family)


METRICS: dict[str, Metric] = {m.name: m for m in map(_described, [
    *THROUGHPUT_METRICS, *COUNT_METRICS, "max_itl_ms", "joules_per_request",
    *(f"{stat}_{fam}_ms" for fam in LATENCY_FAMILIES for stat in STATS)])}


def metric_info(name: str) -> Metric:
    """The table's row of a metric (a name outside it is described by the same rules)."""
    return METRICS.get(name) or _described(name)


def higher_is_better(metric: str) -> bool:
    """True for throughput-like metrics (floors), False for latency-like ones (ceilings)."""
    return metric_info(metric).higher_is_better


def latency_family(metric: str) -> str:
    """`ttft` or `itl` for a metric taken over that distribution (`p99_ttft_ms`, `mean_itl_ms`), else ""."""
    return metric_info(metric).family


def unit_of(metric: str) -> str:
    """The unit shown after a value."""
    return metric_info(metric).unit


@dataclass
class RequestTiming:
    """One request as the client saw it; times are seconds on the client's perf_counter clock."""

    start: float
    prompt_len: int
    sent: float = 0.0  # when its body was written (the client's own delay is sent - start)
    asked: int = 0  # the output length requested (bench_serving's range gives each request its own)
    success: bool = False
    ttft: float = 0.0
    latency: float = 0.0
    output_len: int = 0
    itl: list[float] = field(default_factory=list)
    error: str = ""
    finish_reason: str | None = None
    server_timings: dict[str, float] | None = None  # the engine's own per-request timings (llama.cpp)
    ttfo: float | None = None  # chat: to the first answer token, after the thinking (AIPerf's); 0: only thinking
    reasoning_tokens: int = 0  # chat: thinking tokens of output_len
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache served (None: it did not say)
    queued: float = 0.0  # open loop: seconds from its scheduled send to a free slot under the in-flight cap
    spec_verify_ct: int = 0  # speculative decoding, as the server said: verify passes (0: none said)
    spec_correct: int = 0  # drafts accepted
    spec_proposed: int = 0  # drafts proposed


def request_ms(records: Sequence[RequestTiming], family: str) -> list[float]:
    """The values (ms) a TTFT, ITL or end-to-end figure is taken over, in record order: one a successful request
    (ITL: every gap between its tokens); empty for the other families. The one conversion of per-request times.

        >>> ok = RequestTiming(0.0, 8, success=True, ttft=0.25, latency=1.0, itl=[0.5, 0.25])
        >>> request_ms([ok, RequestTiming(0.0, 8)], "ttft"), request_ms([ok], "itl"), request_ms([ok], "tpot")
        ([250.0], [500.0, 250.0], [])
    """
    if family == "itl":
        return [g * 1000.0 for r in records if r.success for g in r.itl]
    name = {"ttft": "ttft", "e2e": "latency"}.get(family)
    return [getattr(r, name) * 1000.0 for r in records if r.success] if name else []


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, identical to numpy.percentile's default method."""
    return _quantile_sorted(sorted(values), q)


def _quantile_sorted(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def _stats(prefix: str, values_s: Sequence[float]) -> dict[str, float]:
    # One sort for every quantile and a float standard deviation: statistics.pstdev sums exact fractions, which
    # over 100,000 gaps cost more than the client spent receiving them.
    ms = sorted(v * 1000.0 for v in values_s)
    mean = math.fsum(ms) / len(ms) if ms else 0.0
    return {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": _quantile_sorted(ms, 50),
        f"std_{prefix}_ms": math.sqrt(math.fsum((x - mean) ** 2 for x in ms) / len(ms)) if len(ms) > 1 else 0.0,
        f"p90_{prefix}_ms": _quantile_sorted(ms, 90),
        f"p95_{prefix}_ms": _quantile_sorted(ms, 95),
        f"p99_{prefix}_ms": _quantile_sorted(ms, 99),
    }


def _peak_per_second(records: Sequence[RequestTiming], t0: float) -> tuple[float, int]:
    """bench_serving's max_output_tokens_per_s and max_concurrent_requests over 1-s buckets."""
    tokens: dict[int, int] = {}
    active: dict[int, int] = {}
    for r in records:
        if not r.success:
            continue
        t = r.start - t0 + r.ttft
        tokens[int(t)] = tokens.get(int(t), 0) + 1
        for gap in r.itl:
            t += gap
            tokens[int(t)] = tokens.get(int(t), 0) + 1
        first = int(r.start - t0)
        last = int(r.start - t0 + r.latency)
        for sec in range(first, last + 1):
            active[sec] = active.get(sec, 0) + 1
    return float(max(tokens.values(), default=0)), max(active.values(), default=0)


def compute_metrics(records: Sequence[RequestTiming], duration_s: float, t0: float) -> dict[str, float]:
    """Metrics of one measured window: records that started at or after t0, lasting duration_s."""
    ok = [r for r in records if r.success]
    dur = max(duration_s, 1e-9)
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    tpots = [(r.latency - r.ttft) / (r.output_len - 1) for r in ok if r.output_len > 1]
    itls = [gap for r in ok for gap in r.itl]
    peak_tokens, peak_active = _peak_per_second(records, t0)
    out: dict[str, float] = {
        "duration": duration_s,
        "completed": float(len(ok)),
        "failed": float(len(records) - len(ok)),
        "total_input_tokens": float(total_in),
        "total_output_tokens": float(total_out),
        "request_throughput": len(ok) / dur,
        "input_throughput": total_in / dur,
        "output_throughput": total_out / dur,
        "total_throughput": (total_in + total_out) / dur,
        "concurrency": sum(r.latency for r in ok) / dur,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": float(peak_active),
        "max_itl_ms": max(itls, default=0.0) * 1000.0,
    }
    out.update(_stats("ttft", [r.ttft for r in ok]))
    out.update(_stats("tpot", tpots))
    out.update(_stats("itl", itls))
    out.update(_stats("e2e_latency", [r.latency for r in ok]))
    chat = [r for r in ok if r.ttfo is not None]
    if chat:  # the answer's own first token (of the requests whose answer began) and the thinking before it
        out.update(_stats("ttfo", [r.ttfo for r in chat if r.ttfo]))
        out["mean_reasoning_tokens"] = sum(r.reasoning_tokens for r in chat) / len(chat)
        out["mean_input_tokens"] = sum(r.prompt_len for r in chat) / len(chat)
    out.update(speculative(ok))
    return out


def speculative(ok: Sequence[RequestTiming]) -> dict[str, float]:
    """The window's speculative decoding from the requests the server told (none where it told none): accept length
    as SGLang defines it per request (completion tokens over verify passes), pooled over the window's tokens, and the
    accept rate over its drafts.

        >>> r = RequestTiming(0.0, 8, success=True, output_len=12, spec_verify_ct=4, spec_correct=8, spec_proposed=12)
        >>> speculative([r, RequestTiming(0.0, 8, success=True, output_len=9, spec_verify_ct=5, spec_correct=4,
        ...                              spec_proposed=15)])
        {'spec_accept_length': 2.3333333333333335, 'spec_accept_rate': 0.4444444444444444, 'spec_verify_ct': 4.5}
    """
    out: dict[str, float] = {}
    told = [r for r in ok if r.spec_verify_ct > 0]
    if told:
        verifies = sum(r.spec_verify_ct for r in told)
        out.update(spec_accept_length=sum(r.output_len for r in told) / verifies)
    drafted = [r for r in ok if r.spec_proposed > 0]  # llama.cpp says its drafts, not its verify passes
    if drafted:
        out["spec_accept_rate"] = sum(r.spec_correct for r in drafted) / sum(r.spec_proposed for r in drafted)
    if told:
        out["spec_verify_ct"] = verifies / len(told)
    return out


def distinct(messages: Iterable[str], limit: int = 3) -> list[str]:
    """The first `limit` distinct non-empty messages, in order of first appearance."""
    seen: list[str] = []
    for m in messages:
        if m and m not in seen:
            seen.append(m)
            if len(seen) >= limit:
                break
    return seen


def first_errors(records: Sequence[RequestTiming], limit: int = 3) -> list[str]:
    """The distinct errors of failed requests, in order of first appearance."""
    return distinct((r.error or "" for r in records if not r.success), limit)


def summarize_repeats(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and coefficient of variation of one metric over repeated runs."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "cv": 0.0, "n": 0}
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean else 0.0
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "cv": cv,
        "n": len(values),
    }


def geometric_mean(values: Iterable[float]) -> float:
    """The mean on the log scale: the centre a ratio test compares."""
    logs = [math.log(x) for x in values]
    return math.exp(sum(logs) / len(logs))
