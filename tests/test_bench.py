"""The load generator against the emulator: exact counts, the concurrency limit, warmup, failures."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pytest_glm5.load import client
from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import BenchError, Workload

from simproc import Sim, free_port


@pytest.mark.slow
def test_exact_tokens_limit_and_warmup(sim: Sim) -> None:
    wl = Workload(concurrency=8, num_prompts=40, input_len=32, output_len=16, warmup=8)
    r = run_workload(sim.url, wl)
    assert r.metrics["completed"] == 40 and r.failed == 0
    assert r.metrics["total_output_tokens"] == 40 * 16
    assert r.metrics["total_input_tokens"] == 40 * 32
    assert all(rec.output_len == 16 and rec.finish_reason == "length" for rec in r.records)
    assert r.max_in_flight == 8
    assert sim.metric("sglang:sim_max_in_flight_requests") == 8  # never above C as the server saw it
    # 1 server warmup + 1 probe + 8 client warmups (both excluded from the figures) + 40 measured requests.
    assert sim.metric("sglang:num_requests_total") == 1 + 1 + 8 + 40
    assert len(r.records) == 40
    assert r.server_info["version"] == "0.5.23"
    assert 0 < r.metrics["concurrency"] <= 8


def test_a_load_never_scans_the_old_heap_and_gives_the_collector_back(sim: Sim) -> None:
    """No full collection while measuring, what lived before the load is not scanned by it, and afterwards the
    collector is as it was (thresholds, nothing left frozen)."""
    import gc

    before = gc.get_threshold()
    old_heap = [[i] for i in range(200_000)]  # a process that has held results: long-lived, tracked objects
    seen: list[tuple[int, int]] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append((info["generation"], gc.get_freeze_count()))

    gc.callbacks.append(on_gc)
    try:
        r = run_workload(sim.url, Workload(concurrency=4, num_prompts=40, input_len=8, output_len=16))
    finally:
        gc.callbacks.remove(on_gc)
    assert r.failed == 0 and seen, "the load made no garbage the collector looked at"
    assert all(gen < 2 for gen, _ in seen), seen
    assert all(frozen >= len(old_heap) for _, frozen in seen), seen  # the old heap was frozen for every collection
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_loads_that_overlap_hand_the_collector_back_in_any_order() -> None:
    """Two loads of one process (threads): the first in ends first, the other stays held, and when both are out
    the collector is as it was (a per-load save and restore left the full collection's threshold lifted for good)."""
    import gc

    before = gc.get_threshold()
    quiet = client._QuietCollector()  # the process's one collector, which each load enters
    quiet.__enter__()  # the first load
    quiet.__enter__()  # the second
    assert gc.get_threshold()[2] == 1_000_000 and gc.get_freeze_count() > 0
    quiet.__exit__(None, None, None)  # the first ends
    assert gc.get_threshold()[2] == 1_000_000 and gc.get_freeze_count() > 0  # the second is still measuring
    quiet.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_windows_bodies_are_built_before_it_up_to_a_bound(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a request's body is the client's CPU, not the server's time: the window's bodies are built before it
    (each one encoded once, exactly as sent), and past PREBUILT_BYTES the rest as they go (no gigabytes held)."""
    from pytest_glm5.load import client

    built: list[int] = []
    encode = client.LoadRunner.encode

    def counting(self: client.LoadRunner, workload: Workload, prompt: list[int], n: int) -> tuple[str, bytes]:
        out = encode(self, workload, prompt, n)
        built.append(len(out[1]))
        return out

    monkeypatch.setattr(client.LoadRunner, "encode", counting)
    wl = Workload(concurrency=4, num_prompts=12, input_len=64, output_len=4, warmup=0)
    r = run_workload(sim.url, wl)
    assert r.metrics["completed"] == 12 and len(built) == 1 + 12  # the probe's, then the window's, once each
    monkeypatch.setattr(client, "PREBUILT_BYTES", built[1] * 3)
    built.clear()
    runner = client.LoadRunner(sim.url)
    prompts = client.make_prompts(wl, 12)
    ready = runner.encode_window(wl, prompts, [4] * 12)
    assert [x is not None for x in ready] == [True] * 4 + [False] * 8  # up to the bound (the one that crosses it)
    assert ready[0] == runner.encode(wl, prompts[0], 4)


def test_openai_protocol_counts_usage(sim: Sim) -> None:
    r = run_workload(sim.url, Workload(concurrency=4, num_prompts=12, input_len=16, output_len=9, protocol="openai"))
    assert r.metrics["completed"] == 12 and r.metrics["total_output_tokens"] == 12 * 9
    assert all(len(rec.itl) == 8 for rec in r.records)


def test_chat_protocol_reads_thinking_and_holds_the_templated_input_length(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory("--reasoning-parser", "glm45")
    # The tiny profile thinks ~48 tokens: at 200 every reply thinks, then answers.
    on = run_workload(s.url, Workload(concurrency=4, num_prompts=8, input_len=40, output_len=200, protocol="chat",
                                      thinking=True))
    assert on.metrics["completed"] == 8 and on.metrics["total_output_tokens"] == 8 * 200
    # The template's tokens are part of the 40 (the probe learned them): the server counted 40 for each.
    assert on.metrics["mean_input_tokens"] == 40 and on.shape.template_tokens == 5
    assert all(0 < r.reasoning_tokens < 200 and r.ttfo and r.ttfo > r.ttft for r in on.records)
    assert on.metrics["mean_reasoning_tokens"] == sum(r.reasoning_tokens for r in on.records) / 8
    assert on.metrics["median_ttfo_ms"] > on.metrics["median_ttft_ms"]
    assert all(len(r.itl) == 199 for r in on.records)  # one gap a chunk after the first, thinking or answer
    off = run_workload(s.url, Workload(concurrency=4, num_prompts=8, input_len=40, output_len=20, protocol="chat",
                                       thinking=False))
    assert off.metrics["mean_input_tokens"] == 40 and off.metrics["mean_reasoning_tokens"] == 0
    assert all(r.ttfo == r.ttft for r in off.records)
    with pytest.raises(ValueError, match="a chat workload pins thinking on or off"):
        Workload(concurrency=1, num_prompts=1, protocol="chat")
    with pytest.raises(ValueError, match="thinking applies to the chat protocol only"):
        Workload(concurrency=1, num_prompts=1, thinking=True)


def test_stream_interval_coalesces_but_counts_stay_exact(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory("--stream-interval", "4")
    r = run_workload(s.url, Workload(concurrency=2, num_prompts=6, input_len=8, output_len=17))
    assert r.metrics["total_output_tokens"] == 6 * 17
    # bench_serving splits a chunk's gap evenly over its tokens: one ITL entry per token after the first.
    assert all(len(rec.itl) == 16 for rec in r.records)


@pytest.mark.parametrize(("fault", "message"), [
    ("http500=0.4", "HTTP 500"),
    ("cut-stream=0.4", "stream ended after"),
    ("malformed-sse=0.4", "malformed SSE data"),
])
def test_failures_are_counted_not_raised(sim_factory: Callable[..., Sim], fault: str, message: str) -> None:
    s = sim_factory("--sim-fault", fault, "--sim-seed", "3")
    r = run_workload(s.url, Workload(concurrency=4, num_prompts=30, input_len=8, output_len=8, warmup=0))
    assert 0 < r.failed < 30
    assert r.metrics["completed"] + r.failed == 30
    assert any(message in e for e in r.errors)
    assert r.metrics["total_output_tokens"] == r.metrics["completed"] * 8


def test_unreachable_url_fails_fast() -> None:
    t = time.monotonic()
    with pytest.raises(BenchError, match="cannot reach"):
        run_workload(f"http://127.0.0.1:{free_port()}", Workload(concurrency=1, num_prompts=1))
    assert time.monotonic() - t < 5.5


@pytest.mark.slow
def test_stop_check_aborts_the_run(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory("--sim-startup-s", "1", profile="glm5-sm120", scale=0.05)
    t = time.monotonic()
    deadline = t + 0.5
    r = run_workload(s.url, Workload(concurrency=2, num_prompts=50, warmup=0),
                     stop_check=lambda: "server died" if time.monotonic() > deadline else None)
    assert time.monotonic() - t < 3
    assert r.aborted == "server died" and r.failed > 0


@pytest.mark.slow
@pytest.mark.solo
def test_scaling_ratio_in_one_run(sim_factory: Callable[..., Sim]) -> None:
    # Timings as a ratio within one run: the calibrated 1.86x from one to two streams.
    s = sim_factory("--sim-noise", "0", "--sim-step-noise", "0", "--sim-startup-s", "1", profile="glm5-sm120",
                    scale=0.05)
    one = run_workload(s.url, Workload(concurrency=1, num_prompts=3))
    two = run_workload(s.url, Workload(concurrency=2, num_prompts=6))
    ratio = two.metrics["output_throughput"] / one.metrics["output_throughput"]
    assert ratio == pytest.approx(19.29 / 10.36, rel=0.12)


def test_falls_back_for_servers_that_refuse_our_shape(sim_factory: Callable[..., Sim]) -> None:
    # Like transformers serve: no token-id prompts (400), no fields outside OpenAI's schema (422), no [DONE].
    s = sim_factory("--sim-openai-strict")
    r = run_workload(s.url, Workload(concurrency=2, num_prompts=6, input_len=16, output_len=12, protocol="openai"))
    assert r.failed == 0 and r.metrics["completed"] == 6
    assert (r.shape.token_ids, r.shape.ignore_eos, r.shape.done_marker) == (False, False, False)
    assert not r.shape.exact_lengths and "text prompts of about the asked length" in r.shape.describe()
    assert r.to_dict()["request_shape"]["exact_lengths"] is False
    # Lengths as the server counts them (usage), not as asked.
    assert r.metrics["total_input_tokens"] == 6 * 16  # the emulator's tokenizer: one token per word
    assert r.metrics["total_output_tokens"] == sum(rec.output_len for rec in r.records)


def test_unusable_server_is_one_clear_error_before_measuring(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory("--sim-fault", "http500=1.0", "--enable-metrics")
    t = time.monotonic()
    with pytest.raises(BenchError, match=r"refuses every request shape tried: token-id prompts, ignore_eos: HTTP 500"):
        run_workload(s.url, Workload(concurrency=64, num_prompts=5000))
    assert time.monotonic() - t < 5 and s.metric("sglang:num_requests_total") == 1  # only its own warmup ran


class _StalePool:
    """A session whose first `stale` posts meet connections the server already closed."""

    def __init__(self, stale: int) -> None:
        self.stale = stale
        self.posts = 0

    async def post(self, url: str, **kw: object) -> str:
        import aiohttp

        self.posts += 1
        if self.posts <= self.stale:
            raise aiohttp.ClientOSError(None, "Can not write request body")
        return "response"


def test_a_request_gets_past_every_stale_pooled_connection() -> None:
    """At concurrency 8 the pool can hold eight connections the server closed (CI saw four in a row): the request
    reaches a fresh one; a server that never takes it still ends the tries."""
    import asyncio

    import aiohttp

    from pytest_glm5.load.client import STALE_RETRIES, LoadRunner
    from pytest_glm5.metrics import RequestTiming

    runner = LoadRunner("http://127.0.0.1:1")
    timeout = aiohttp.ClientTimeout(total=1)
    stale = _StalePool(8)
    got = asyncio.run(runner._post(stale, "u", b"{}", timeout, 8 + STALE_RETRIES,
                                     RequestTiming(0.0, 1)))  # type: ignore[arg-type]
    assert got == "response" and stale.posts == 9
    dead = _StalePool(10**6)
    with pytest.raises(aiohttp.ClientOSError):
        asyncio.run(runner._post(dead, "u", b"{}", timeout, 8 + STALE_RETRIES,
                                 RequestTiming(0.0, 1)))  # type: ignore[arg-type]
    assert dead.posts == 8 + STALE_RETRIES


@pytest.mark.parametrize("protocol", ["sglang", "openai"])
@pytest.mark.parametrize("fault", ["", "malformed-sse=0.4", "http500=0.4"])
def test_the_aiohttp_path_records_as_the_lean_one(sim_factory: Callable[..., Sim], monkeypatch: pytest.MonkeyPatch,
                                                  protocol: str, fault: str) -> None:
    # https and proxied servers stream through aiohttp; both paths read SSE with transport.sse_lines and end a
    # request in LoadRunner.one, so the same server gives the same counts and the same errors on each.
    from pytest_glm5.load import client as loadgen

    s = sim_factory(*(("--sim-fault", fault, "--sim-seed", "3") if fault else ()))
    wl = Workload(concurrency=4, num_prompts=24, input_len=8, output_len=9, warmup=0, protocol=protocol)
    lean = run_workload(s.url, wl)
    monkeypatch.setattr(loadgen.proxies, "proxy_for", lambda url: "http://proxy.invalid:3128")
    via_aiohttp = run_workload(s.url, wl)
    for r in (lean, via_aiohttp):
        assert r.metrics["completed"] + r.failed == 24
        assert r.metrics["total_output_tokens"] == r.metrics["completed"] * 9
        assert all(len(rec.itl) == 8 for rec in r.records if rec.success)
    if fault:
        assert 0 < via_aiohttp.failed < 24
        word = fault.split("=")[0].replace("http", "HTTP ").replace("malformed-sse", "malformed SSE data")
        assert any(word in e for e in via_aiohttp.errors) and any(word in e for e in lean.errors)
    else:
        assert lean.failed == via_aiohttp.failed == 0


def test_open_loop_times_each_request_from_its_scheduled_send(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory()
    # Well under capacity: the sends keep the drawn gaps, and nothing waits for a slot.
    easy = run_workload(s.url, Workload(concurrency=16, num_prompts=48, input_len=32, output_len=8, request_rate=40.0))
    assert easy.metrics["offered_rate"] == 40.0 and easy.metrics["completed"] == 48
    # The sends keep the drawn gaps, unless the client says it was late (its event loop's p99 timer lag above a fifth
    # of the 25 ms mean gap): a CI run beside two busy loops and a third test process read the arrivals' CV 1.70 for
    # 1.10 drawn. Either way the gate agrees: an open loop not held is not judged.
    kept = abs(easy.metrics["arrival_cv"] / easy.metrics["arrival_cv_asked"] - 1) < 0.10
    assert easy.client is not None
    assert kept or easy.client.lag_p99_ms > 0.2 * 1000 / 40, (easy.metrics, easy.client)
    from pytest_glm5.judge import held
    assert (held.check({}, held.observed([easy.metrics]), None) is None) == (
        kept and abs(easy.metrics["arrival_rate"] / easy.metrics["arrival_rate_asked"] - 1) <= held.ARRIVAL_TOLERANCE)
    assert 25 < easy.metrics["request_throughput"] < 60  # about the asked rate, not a closed loop's
    # Far above capacity with 2 in flight: requests queue at the client, and their TTFT counts the wait from the
    # scheduled send (coordinated omission), so it grows along the run instead of staying at a closed loop's.
    hard = run_workload(s.url, Workload(concurrency=2, num_prompts=24, input_len=32, output_len=32, request_rate=500.0))
    assert hard.max_in_flight <= 2 and hard.metrics["completed"] == 24
    ttft = [r.ttft for r in sorted(hard.records, key=lambda r: r.start)]
    assert ttft[-1] > 5 * ttft[0] and max(r.queued for r in hard.records) > 0.1
    closed = run_workload(s.url, Workload(concurrency=2, num_prompts=24, input_len=32, output_len=32))
    assert hard.metrics["mean_ttft_ms"] > 5 * closed.metrics["mean_ttft_ms"]
    # The cap bunched the sends: that open loop was not the one asked, and the gate says so before any verdict.
    miss = held.check({}, held.observed([hard.metrics]), None)
    assert miss is not None and miss[1].startswith("workload not held: ") and "requests a second sent" in miss[1]
    # A duration bounds what is sent: about rate x duration requests, none of the rest counted as failed.
    bounded = run_workload(s.url, Workload(concurrency=16, num_prompts=400, input_len=32, output_len=8,
                                           request_rate=40.0, duration_s=1.0))
    assert 20 <= bounded.metrics["sent"] <= 65 and bounded.metrics["failed"] == 0, bounded.metrics
    assert bounded.metrics["completed"] == bounded.metrics["sent"]
    with pytest.raises(ValueError, match="duration_s bounds an open loop or a trace"):
        Workload(concurrency=1, num_prompts=1, duration_s=5.0)
    with pytest.raises(ValueError, match="burstiness is a gamma arrival's shape"):
        Workload(concurrency=1, num_prompts=1, request_rate=1.0, burstiness=0.5)
    bursty = Workload(concurrency=64, num_prompts=400, request_rate=100.0, arrival="gamma", burstiness=0.25)
    from pytest_glm5.load.client import _cv, arrival_gaps
    assert 1.6 < _cv(arrival_gaps(bursty, 400)) < 2.4  # gamma shape 0.25: CV 2


def test_a_runs_shared_prefixes_and_sessions_are_new_to_it_by_their_first_ids_only() -> None:
    """The cache-bust is the first ids of each prefix and session; the rest is the seed's, so a chat prompt's words
    cost a real tokenizer the same tokens run after run (their count moved 2% in 1 run of 8 on llama.cpp's BPE)."""
    k = client.NONCE_IDS
    shared = Workload(concurrency=2, num_prompts=6, input_len=192, prefix_len=128, prefix_groups=2)
    a, b = client.make_prompts(shared, 6, nonce=11), client.make_prompts(shared, 6, nonce=12)
    assert all(x[:k] != y[:k] and x[k:] == y[k:] for x, y in zip(a, b, strict=True))
    assert a[0][:128] == a[2][:128] != a[1][:128]  # each group's prefix is shared within the run
    assert client.make_prompts(shared, 6) == client.make_prompts(shared, 6)  # no nonce: as seeded
    turns = Workload(concurrency=2, num_prompts=8, input_len=16, output_len=4, turns=4)
    c, d = client.make_prompts(turns, 8, nonce=11), client.make_prompts(turns, 8, nonce=12)
    assert all(x[:k] != y[:k] and x[k:] == y[k:] for x, y in zip(c, d, strict=True))
    assert c[1][:len(c[0])] == c[0]  # a turn holds the conversation before it
