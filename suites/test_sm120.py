"""GLM-5-NVFP4 on 8x RTX PRO 6000 Blackwell (SM120): floors, scaling and the concurrency sweep.

Method lessons of the campaign, encoded: closed loop (at most C requests in flight), warmup excluded,
fixed 128/128 lengths, enough requests per point to fill the concurrency twice or more. Two repeats per launch:
between launches is where the variance is (the gate adds launches where a verdict needs them), so a third repeat
inside one launch buys little.

Production cells (marked `production`: only on the configs with `production = true`, since each costs minutes of
every launch): what GLM-5 serves, through /v1/chat/completions with its reasoning parser. Every figure below is the
box's: the emulator's rehearsal runs them on its own clock (an SLO's milliseconds and a rate scale with it).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import pytest_glm5
from pytest_glm5 import Slo

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


# Speculative decoding is judged on natural text: random ids make every draft a guess at noise. The bundled prompt set
# (pytest_glm5/load/datasets/natural.jsonl: word problems and chat turns) is sent as text on the speculative configs
# and on the configs they compare to (tp8), so "+120% vs tp8" is one text read two ways; its digest keys the bounds.
NATURAL = {"dataset": "natural", "output_len": OUTPUT_LEN}


@pytest.mark.speculative
def test_natural_single_stream(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """One stream on natural text: the campaign's road to 100 tok/s. A speculative config's accept length is a
    series of its own (a build that accepts fewer drafts at the same speed here costs speed elsewhere)."""
    results = perf.run("natural-single", concurrency=1, num_prompts=4, repeats=2, warmup=1, **NATURAL)
    accept = ["spec_accept_length"] if all("spec_accept_length" in r.metrics for r in results) else []
    perf.check(results, "natural-single", ["output_throughput", "median_tpot_ms", *accept])


@pytest.mark.speculative
def test_natural_c16(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Sixteen streams on natural text: where drafts start to cost a batch what they save a stream."""
    results = perf.run("natural-c16", concurrency=16, num_prompts=64, warmup=16, **NATURAL)
    accept = ["spec_accept_length"] if all("spec_accept_length" in r.metrics for r in results) else []
    perf.check(results, "natural-c16", ["output_throughput", *accept])


# The chat SLO, from the box's arithmetic (emulator profile glm5-sm120, 1,024-token prompts, 128-token answers): a
# decode step is ~97 ms at one stream (10 tok/s) and ~183 ms at 16, plus each newcomer's ~140 ms prefill spread over
# the steps between arrivals: TPOT ~0.20 s at 16 concurrent, ~0.28 s at 32, ~0.37 s at 64. So 300 ms holds at 16
# with a margin of half and misses at 64 by a quarter; 32 sits within a tenth of any limit between them and would
# flip from night to night, so the ladder steps over it (a ladder point is worth measuring only where its reference
# is clearly on one side). TTFT 3 s: a 1,024-token prefill is ~0.14 s, so what a user waits is the queue.
# 64 requests a point: the fewest that can show 95% (59), in one to four waves.
CHAT_SLO = Slo(ttft_ms=3000, tpot_ms=300, target=0.95)
LADDER = [16, 64]
CHAT = {"protocol": "chat", "input_len": 1024}
TRACE = Path(pytest_glm5.__file__).parent / "load" / "traces" / "mooncake-sample.jsonl"


@pytest.mark.production
def test_chat_slo_capacity(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Chat with thinking off up the ladder: each point's attainment of the SLO is a floor, and capacity (the
    largest point within it, as a bracket naming the limit that binds) a floor of its own, from the same
    requests. Not a concurrency GLM-5 under 16: a point needs 59 requests, 6 minutes each at 10 tok/s."""
    for c in LADDER:
        scenario = f"chat-c{c}"
        r = perf.run(scenario, concurrency=c, num_prompts=64, warmup=8, output_len=128, thinking=False,
                     slo=CHAT_SLO, **CHAT)
        perf.check(r, scenario, ["output_throughput", "median_ttft_ms", "slo_attainment"])
    perf.capacity("chat-capacity", [f"chat-c{c}" for c in LADDER])


@pytest.mark.production
def test_chat_thinking(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Chat with thinking on, GLM-5's default: ~1,200 reasoning tokens a reply (a workload property, held to 10% of
    the reference: a build that thinks less is drift, never faster), capped at 1,536 tokens a reply so one wave
    of 64 costs ~8 minutes of the launch; the latency users feel is TTFO, to the first answer token."""
    r = perf.run("chat-think-c64", concurrency=64, num_prompts=64, warmup=0, output_len=1536, thinking=True, **CHAT)
    perf.check(r, "chat-think-c64", ["output_throughput", "median_ttft_ms", "median_ttfo_ms"])


@pytest.mark.production
def test_agentic_shared_prefix(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """Agentic coding: 4 sessions' 8,192-token prefixes (repo, tools, history) under 512 new tokens each, short
    answers: the prefix cache serves ~88% of the prompt tokens (held to 2 points: a cache that stops hitting
    is "workload not held", never a latency regression), so TTFT is the prefix cache's figure."""
    r = perf.run("agentic-c32", concurrency=32, num_prompts=64, warmup=4, protocol="chat", thinking=False,
                 input_len=8704, prefix_len=8192, prefix_groups=4, output_len=128)
    perf.check(r, "agentic-c32", ["output_throughput", "median_ttft_ms"])


@pytest.mark.production
def test_multi_turn_sessions(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """16 conversations of 4 turns at once, each turn 512 new tokens on top of the conversation so far (up to
    2,432 tokens): the prefix cache serves the turn before (~58% of the prompt tokens, held to 2 points), so a
    turn's TTFT is its new tokens' prefill, as a chat user's second question is."""
    r = perf.run("sessions-c16", concurrency=16, num_prompts=64, warmup=4, protocol="chat", thinking=False,
                 input_len=512, output_len=128, turns=4)
    perf.check(r, "sessions-c16", ["output_throughput", "median_ttft_ms"])


@pytest.mark.production
def test_long_input(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """32,768-token prompts (two prefill chunks each): the prefill path and its memory at a length the 128-token
    cells never reach."""
    r = perf.run("long-input-c4", concurrency=4, num_prompts=8, warmup=1, protocol="chat", thinking=False,
                 input_len=32768, output_len=128)
    perf.check(r, "long-input-c4", ["output_throughput", "median_ttft_ms"])


@pytest.mark.production
def test_trace_replay(glm5_config: str, perf) -> None:  # type: ignore[no-untyped-def]
    """The shipped Mooncake-format sample (200 requests over 87 s, ~4,700-token prompts sharing blocks, ~144-token
    answers) at its own timestamps, open loop with at most 256 in flight: arrival pattern, lengths and prefix
    sharing as a trace has them, each request timed from its scheduled send."""
    r = perf.run("trace", concurrency=256, num_prompts=200, warmup=0, protocol="chat", thinking=False,
                 trace=str(TRACE))
    perf.check(r, "trace", ["output_throughput", "median_ttft_ms"])
