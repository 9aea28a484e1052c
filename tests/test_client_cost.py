"""The load client's CPU per streamed token, held against SGLang's own bench_serving in one run as a ratio (never an
absolute time: the machine's speed cancels), and against the project's own earlier measurement of that ratio
(docs/loadgen.json, written by scripts/measure_loadgen.py)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from scriptmods import script

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "docs" / "loadgen.json").read_text())
# A run of three repeats on a shared 2-core VM reads a ratio within about a third of the recorded median; beyond
# half again, the client itself got heavier.
MARGIN = 1.5


def _recorded(concurrency: int) -> dict[str, float]:
    return next(r for r in RECORDED["rows"] if r["concurrency"] == concurrency)


def test_the_recorded_table_keeps_the_promise() -> None:
    """The README's table (docs/loadgen.json): at most half of bench_serving's CPU per token at every concurrency,
    with the same figures: ITL within 5%, throughput never lower (at 1024 streams on 2 cores bench_serving's own
    client holds its loop back: 14% fewer tokens), TTFT never higher (bench_serving opens a connection per
    request)."""
    rows = RECORDED["rows"]
    assert [r["concurrency"] for r in rows] == [1, 64, 256, 1024]
    for r in rows:
        assert r["ratio"] <= 0.5, r
        assert len(r["ratios"]) == r["repeats"] >= 3
        assert r["output_throughput_ratio"] >= 0.97 and 0.95 <= r["mean_itl_ms_ratio"] <= 1.05, r
        assert r["mean_ttft_ms_ratio"] <= 1.0, r


@pytest.mark.slow
@pytest.mark.solo
def test_the_client_costs_what_it_cost_when_measured(wheel: str, tmp_path: Path) -> None:
    measure_loadgen = script("measure_loadgen")
    proc, url = measure_loadgen.start_emulator("tiny", 1.0, str(tmp_path / "tiny.log"))
    try:
        row = measure_loadgen.compare(url, [64], repeats=3, wheel=wheel, figures_too=False)[0]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    recorded = _recorded(64)
    # The best of the three runs, as timeit takes the least disturbed: beside two busy loops a starved
    # bench_serving reads more chunks per wake-up and less CPU per token, and a CI run read 0.70 / 0.78 / 0.44
    # against 0.44 recorded on a quiet machine. A client whose per-token path got heavier is heavier in every run.
    best = min(row["ratios"])
    assert best <= recorded["ratio"] * MARGIN, (
        f"glm5 bench took {best:.2f}x bench_serving's CPU per token at concurrency 64 at best (runs "
        f"{row['ratios']}), against {recorded['ratio']:.2f}x when measured: the client's per-token path got heavier")
