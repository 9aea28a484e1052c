"""The A/B gate through pytest on a real GPU: `--glm5-ab base,base` (A/A) and `--glm5-ab base,slow10`."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.server_config("gpu-bound")


def test_c8(perf: Any) -> None:
    # The point scripts/gpu_gate.py measures: 1,024-token prompts at concurrency 8, warmed past continuous
    # batching's slow first waves (three per stream).
    results = perf.run("c8", concurrency=8, num_prompts=16, repeats=2, input_len=1024, output_len=16, warmup=24)
    perf.check(results, "c8", ["output_throughput"])
