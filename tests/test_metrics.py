"""bench_serving's formulas against records computed by hand."""

from __future__ import annotations

import pytest

from pytest_glm5.metrics import RequestTiming, compute_metrics, first_errors, percentile, summarize_repeats


def records() -> list[RequestTiming]:
    # Two successes and one failure over a 2-second window starting at t0 = 100.
    a = RequestTiming(start=100.0, prompt_len=4, success=True, ttft=0.1, latency=0.5, output_len=5,
                      itl=[0.1, 0.1, 0.1, 0.1])
    b = RequestTiming(start=100.5, prompt_len=4, success=True, ttft=0.3, latency=1.3, output_len=3,
                      itl=[0.5, 0.5])
    c = RequestTiming(start=101.0, prompt_len=4, success=False, error="HTTP 500: boom", latency=0.2)
    return [a, b, c]


def test_throughputs_count_only_successes() -> None:
    m = compute_metrics(records(), duration_s=2.0, t0=100.0)
    assert m["completed"] == 2
    assert m["failed"] == 1
    assert m["total_input_tokens"] == 8
    assert m["total_output_tokens"] == 8
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["total_throughput"] == pytest.approx(8.0)
    assert m["input_throughput"] == pytest.approx(4.0)


def test_latency_formulas() -> None:
    m = compute_metrics(records(), duration_s=2.0, t0=100.0)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    # TPOT = (latency - ttft) / (output_len - 1): a = 0.4/4 = 0.1 s, b = 1.0/2 = 0.5 s
    assert m["mean_tpot_ms"] == pytest.approx(300.0)
    # ITL is the pooled list of gaps: four of 100 ms and two of 500 ms.
    assert m["mean_itl_ms"] == pytest.approx((4 * 100 + 2 * 500) / 6)
    assert m["max_itl_ms"] == pytest.approx(500.0)
    assert m["mean_e2e_latency_ms"] == pytest.approx(900.0)
    # Little's law: sum of successful e2e latencies over the window.
    assert m["concurrency"] == pytest.approx((0.5 + 1.3) / 2.0)
    assert m["std_ttft_ms"] == pytest.approx(100.0)


def test_peak_buckets() -> None:
    m = compute_metrics(records(), duration_s=2.0, t0=100.0)
    # a: tokens at 0.1..0.5 (5 in second 0); b: tokens at 0.8 (sec 0), 1.3, 1.8 (sec 1).
    assert m["max_output_tokens_per_s"] == 6
    assert m["max_concurrent_requests"] == 2


def test_percentile_matches_numpy_linear() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(7.6)
    assert percentile(values, 99) == pytest.approx(9.76)
    assert percentile([], 99) == 0.0


def test_empty_window_is_zero_not_an_error() -> None:
    m = compute_metrics([], duration_s=1.0, t0=0.0)
    assert m["completed"] == 0 and m["output_throughput"] == 0 and m["p99_ttft_ms"] == 0


def test_first_errors_and_repeats() -> None:
    recs = [*records(), RequestTiming(start=0, prompt_len=1, error="HTTP 500: boom")]
    assert first_errors(recs) == ["HTTP 500: boom"]
    s = summarize_repeats([10.0, 12.0, 11.0])
    assert s["median"] == 11.0 and s["min"] == 10.0 and s["max"] == 12.0
    assert s["cv"] == pytest.approx(0.0742, abs=1e-3)
