"""One real GPU through the plugin: launch by config marker, a concurrency sweep, telemetry, baselines."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.server_config("tiny-cb")


@pytest.mark.parametrize("concurrency", [1, 4, 16, 64])
def test_sweep(perf: Any, concurrency: int) -> None:
    results = perf.run(f"c{concurrency}", concurrency=concurrency, num_prompts=4 * concurrency, input_len=32,
                       output_len=64, warmup=min(concurrency, 8))
    assert results[0].metrics["completed"] == 4 * concurrency
    perf.check(results, f"c{concurrency}", ["output_throughput", "p99_ttft_ms"])


def test_telemetry_is_real(perf: Any, idle_gpu: Any) -> None:
    if idle_gpu is None:
        pytest.skip("no NVML here: telemetry is proven on the GPU machine")
    r = perf.run("telemetry", concurrency=32, num_prompts=256, input_len=32, output_len=128, warmup=8)[0]
    assert r.telemetry is not None and len(r.telemetry.samples) >= 5
    summary = r.telemetry.summary()
    mem = max(g["memory_used_gb"]["max"] for g in summary.values())
    power = max(g["power_w"]["max"] for g in summary.values())
    idle_mem = max(g["memory_used_gb"] for g in idle_gpu)
    idle_power = max(g["power_w"] for g in idle_gpu)
    print(f"idle: {idle_mem:.2f} GB, {idle_power:.0f} W; under load: {mem:.2f} GB, {power:.0f} W max")
    assert mem > idle_mem + 0.05, (mem, idle_mem)
    assert power > idle_power, (power, idle_power)
