"""GLM-5-NVFP4 on 8x RTX PRO 6000 Blackwell (SM120): floors, scaling and the concurrency sweep.

Method lessons of the campaign, encoded: closed loop (at most C requests in flight), warmup excluded,
fixed 128/128 lengths, enough requests per point to fill the concurrency twice or more. Two repeats per launch:
between launches is where the variance is (the gate adds launches where a verdict needs them), so a third repeat
inside one launch buys little.
"""

from __future__ import annotations

import statistics

import pytest

pytestmark = pytest.mark.sm120

INPUT_LEN = 128
OUTPUT_LEN = 128
SWEEP = [10, 256, 512, 1024]


def test_single_stream(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Concurrency 1, closed loop: the 10 tok/s class floor and a median TTFT ceiling. Not a p99: a percentile is
    judged from at least 1/(1 - q) requests per launch (100 for a p99, else it is their maximum), and 100 requests
    of 128 tokens at 10 tok/s are 21 minutes of every launch; the sweep judges the tail where it has the requests."""
    results = perf.run("single-stream", concurrency=1, num_prompts=4, repeats=2, warmup=1,
                       input_len=INPUT_LEN, output_len=OUTPUT_LEN)
    perf.check(results, "single-stream", ["output_throughput", "median_ttft_ms"])


def test_dual_stream(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Concurrency 2: its floor, and scaling_2x = dual / single (the campaign saw 1.86x)."""
    dual = perf.run("dual-stream", concurrency=2, num_prompts=8, repeats=2, warmup=2,
                    input_len=INPUT_LEN, output_len=OUTPUT_LEN)
    perf.check(dual, "dual-stream", ["output_throughput"])
    single = perf.results_of("single-stream") or perf.run(
        "single-stream", concurrency=1, num_prompts=4, warmup=1, input_len=INPUT_LEN, output_len=OUTPUT_LEN)
    base = statistics.median(r.metrics["output_throughput"] for r in single)
    perf.check_value("dual-stream", "scaling_2x", [r.metrics["output_throughput"] / base for r in dual],
                     inputs=[("dual-stream", "output_throughput"), ("single-stream", "output_throughput")])


def test_sweep(glm5_config: str, perf, concurrency: int) -> None:  # type: ignore[no-untyped-def]
    """The sweep (concurrency from the config's `sweep`, else SWEEP) shows regime changes a single point hides:
    the EP8 crash appeared only at 256."""
    scenario = f"sweep-c{concurrency}"
    # Fill the concurrency four times at small C, twice at large C (each wave is a full batch).
    prompts = 4 * concurrency if concurrency < 256 else 2 * concurrency
    # Warm every batch shape the point will use (up to C in flight): at 256-1024 a shape met cold makes FlashInfer's
    # FP4 kernels compile inside the measured window (a pause the stall watcher waits out, but a wrong figure).
    results = perf.run(scenario, concurrency=concurrency, num_prompts=prompts, warmup=concurrency,
                       input_len=INPUT_LEN, output_len=OUTPUT_LEN)
    # A p99 TTFT where the point has the 100 requests per launch a p99 needs (c256 and up).
    tail = ["p99_ttft_ms"] if prompts >= 100 else []
    # What the box costs: output tokens per joule, where NVML counted the energy (the box; not the emulator).
    energy = ["output_tokens_per_joule"] if all("output_tokens_per_joule" in r.metrics for r in results) else []
    perf.check(results, scenario, ["output_throughput", "total_throughput", *tail, *energy])


@pytest.mark.parametrize("concurrency", [256])
def test_stability(glm5_config: str, perf, concurrency: int) -> None:  # type: ignore[no-untyped-def]
    """Crash-free under sustained load at 256 (where EP8 died): alive throughout, no failed request, ready
    again after, no fatal log line, every request exactly 128 tokens."""
    perf.stability(concurrency=concurrency, num_prompts=2 * concurrency, input_len=INPUT_LEN, output_len=OUTPUT_LEN)
