"""`glm5 bench`'s latency metrics against the emulator's own record of when it emitted each request's first and
last token (/sim/requests): TTFT, ITL and E2E mean what they say, at concurrency 1, 64 and 256."""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_glm5.cli import main as glm5

from simproc import Sim

pytestmark = pytest.mark.solo  # client timings against the emulator's own: nothing beside them

OUTPUT_LEN = 16
# At concurrency 1 a longer prompt: a TTFT of ~70 ms, so localhost's sub-ms HTTP round trip stays under 2%.
INPUT_LEN = {1: 1024, 64: 128, 256: 128}
SCALE = {1: 0.5, 64: 0.5, 256: 0.5}
# With exact lengths every request of a wave finishes in the same step, so the next wave starts as a burst: the
# client stamps each request before writing it (as bench_serving does), and writing 64 or 256 requests at once
# takes it 10-30 ms on 2 shared cores, more when the machine is busy. That part is the client's own cost, and the
# client measures it (its stamp-to-send delay and its event loop's lag, `client` in the JSON): TTFT and E2E are
# held to 2% of the emulator's own times once the cost the client reports is added, so a client that misjudges
# its own cost fails here as surely as a wrong formula does. ITL is a gap between two stamps: 2% everywhere.
REL = 0.02


def _truth(url: str, n: int) -> dict[str, float]:
    with urllib.request.urlopen(url + "/sim/requests", timeout=10) as resp:
        reqs = json.loads(resp.read())
    # The measured window is the last n requests: the load generator's probe (a short request) and the warmup
    # (which also opens the connections, as bench_serving's warmup does) come first and are excluded on both sides.
    reqs = sorted((r for r in reqs if r["output_tokens"] == OUTPUT_LEN), key=lambda r: r["received"])[-n:]
    ttft = [r["first_token"] - r["received"] for r in reqs]
    e2e = [r["last_token"] - r["received"] for r in reqs]
    # bench_serving's mean ITL: the mean over every gap between tokens of every request.
    gaps = sum(r["last_token"] - r["first_token"] for r in reqs)
    tokens = sum(r["output_tokens"] - 1 for r in reqs)
    return {"mean_ttft_ms": statistics.fmean(ttft) * 1000, "mean_e2e_latency_ms": statistics.fmean(e2e) * 1000,
            "mean_itl_ms": gaps / tokens * 1000, "n": len(reqs)}


@pytest.mark.parametrize("concurrency", [1, 64, 256])
@pytest.mark.slow
def test_bench_latencies_match_the_emulators_own_times(sim_factory: Callable[..., Sim], tmp_path: Path,
                                                       concurrency: int) -> None:
    # No launch or step noise is needed: the comparison is within one run.
    s = sim_factory("--sim-noise", "0", "--sim-step-noise", "0", "--sim-startup-s", "1", "--sim-warmup-s", "0",
                    profile="glm5-sm120", scale=SCALE[concurrency])
    out = tmp_path / "bench.json"
    prompts = max(4, concurrency)
    assert glm5(["bench", "--url", s.url, "--concurrency", str(concurrency), "--num-prompts", str(prompts),
                 "--input-len", str(INPUT_LEN[concurrency]), "--output-len", str(OUTPUT_LEN),
                 "--warmup", str(concurrency), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())[0]
    measured, client = doc["metrics"], doc["client"]
    truth = _truth(s.url, prompts)
    assert truth["n"] == prompts
    own = client["send_delay_mean_ms"] + client["lag_mean_ms"]
    for metric in ("mean_ttft_ms", "mean_itl_ms", "mean_e2e_latency_ms"):
        cost = 0.0 if metric == "mean_itl_ms" else own
        excess = measured[metric] - truth[metric]
        assert -REL * truth[metric] <= excess <= REL * truth[metric] + cost, (
            metric, measured[metric], truth[metric], client)
