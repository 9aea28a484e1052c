"""The emulator's prefix cache against the shared-prefix shape (SGLang's generated-shared-prefix): the hit rate a run
achieves, by the server's own per-request counts over the window, is within 2 points of what the shape implies; the
prefixes are new to each run, /flush_cache empties the cache, and /metrics counts cached tokens as SGLang does."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from plugin_helpers import OUTPUTS, outcome_agrees, report, write_configs

from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import Workload
from pytest_glm5.sim.prefix import BLOCK

from simproc import Sim


@pytest.mark.parametrize(("prefix_len", "groups", "concurrency"), [(768, 4, 16), (512, 1, 8), (256, 8, 32)])
def test_the_achieved_hit_is_within_2_points_of_the_shapes_ideal(sim: Sim, prefix_len: int, groups: int,
                                                                 concurrency: int) -> None:
    wl = Workload(concurrency=concurrency, num_prompts=64, input_len=1024, output_len=4, prefix_len=prefix_len,
                  prefix_groups=groups)
    before = sim.metric("sglang:cached_tokens_total")
    r = run_workload(sim.url, wl)
    ideal = wl.ideal_prefix_hit()
    assert ideal is not None and r.metrics["prefix_hit_ideal"] == ideal
    assert abs(r.metrics["prefix_hit"] - ideal) <= 0.02, (r.metrics["prefix_hit"], ideal)
    # /metrics counted the same cached tokens (the window's: the warmup's prompts share nothing with it), and the
    # hit from its counters around the window is the hit from each reply's count.
    assert sim.metric("sglang:cached_tokens_total") - before == sum(x.cached_tokens or 0 for x in r.records)
    assert r.metrics["prefix_hit_counters"] == pytest.approx(r.metrics["prefix_hit"], abs=1e-9)
    # Each prompt's shared prefix in whole blocks, or nothing (the first of its group).
    assert {x.cached_tokens for x in r.records} <= {0, prefix_len // BLOCK * BLOCK}
    # A second run of the same shape draws new prefixes: the first run's cache serves none of its first prompts.
    again = run_workload(sim.url, wl)
    assert abs(again.metrics["prefix_hit"] - ideal) <= 0.02


@pytest.mark.parametrize("protocol", ["sglang", "chat"])
def test_multi_turn_sessions_grow_their_context_and_hit_the_turn_before(sim: Sim, protocol: str) -> None:
    """Each of 8 sessions sends 4 turns in order; turn k's prompt is turn k-1's, its stand-in answer and 256 new
    tokens: the cache serves the turn before (ideal (256+544+832)/(256+544+832+1120) = 59% through /generate),
    within 2 points."""
    wl = Workload(concurrency=4, num_prompts=32, input_len=256, output_len=32, protocol=protocol, turns=4,
                  thinking=False if protocol == "chat" else None)
    r = run_workload(sim.url, wl)
    ideal = r.metrics["prefix_hit_ideal"]
    # A chat prompt's closing template tokens (8 here: the probe learns them) are no prefix of the next turn's.
    closing = 8 if protocol == "chat" else 0
    assert ideal == pytest.approx((256 + 544 + 832 - 3 * closing) / (256 + 544 + 832 + 1120))
    assert r.metrics["failed"] == 0
    assert abs(r.metrics["prefix_hit"] - ideal) <= 0.02, (r.metrics["prefix_hit"], ideal)
    # Sessions in order: the prompts grow by turn within each session, one turn after another.
    lens = [x.prompt_len for x in r.records]
    assert sorted(set(lens)) == sorted({wl.turn_len(k) for k in range(4)}) or protocol == "chat", lens
    for s in range(8):
        turns = r.records[4 * s:4 * s + 4]
        assert all(a.start + a.latency <= b.start + 1e-6 for a, b in itertools.pairwise(turns)), s
    if protocol == "chat":  # the server counted the template of every message; still the asked length within 2%
        assert abs(r.metrics["mean_input_tokens"] / r.metrics["mean_input_tokens_asked"] - 1) <= 0.02


def test_sessions_are_whole_and_closed_loop() -> None:
    with pytest.raises(ValueError, match="num_prompts must be whole sessions of 4 turns, got 30"):
        Workload(concurrency=4, num_prompts=30, turns=4)
    with pytest.raises(ValueError, match="multi-turn sessions are a closed loop"):
        Workload(concurrency=4, num_prompts=32, turns=4, request_rate=2.0)
    with pytest.raises(ValueError, match="turns must be >= 1"):
        Workload(concurrency=4, num_prompts=32, turns=0)


def test_without_a_shared_prefix_almost_nothing_hits_and_no_hit_rate_is_claimed(sim: Sim) -> None:
    r = run_workload(sim.url, Workload(concurrency=4, num_prompts=16, input_len=256, output_len=4))
    assert "prefix_hit" not in r.metrics
    # bench_serving's random-ids prompts are runs of consecutive ids: two that start at the same id are one prompt
    # (as on SGLang), and nothing else is shared.
    assert {x.cached_tokens for x in r.records} <= {0, 255}
    assert sum(x.cached_tokens or 0 for x in r.records) <= 0.2 * r.metrics["total_input_tokens"]


def test_a_disabled_radix_cache_serves_nothing(sim_factory: Callable[..., Sim]) -> None:
    s = sim_factory("--disable-radix-cache", "--enable-metrics")
    r = run_workload(s.url, Workload(concurrency=8, num_prompts=32, input_len=512, output_len=4, prefix_len=256,
                                     prefix_groups=2))
    assert r.metrics["prefix_hit"] == 0 and s.metric("sglang:cached_tokens_total") == 0
    assert r.metrics["prefix_hit_counters"] == 0


AGENTIC = """
import pytest
@pytest.mark.server_config("t")
def test_agentic_prefix(perf):
    r = perf.run("agentic", concurrency=8, num_prompts=32, input_len=1024, output_len=16, prefix_len=896,
                 prefix_groups=2)
    perf.check(r, "agentic", ["output_throughput", "mean_ttft_ms"])
"""


@pytest.mark.slow
def test_a_cache_that_stops_hitting_reads_workload_not_held_not_a_regression(pytester: pytest.Pytester) -> None:
    write_configs(pytester, '[config.t]\nflags = {}\n[build.nocache]\nenv = { GLM5_SIM_PREFIX_CACHE_BROKEN = "1" }\n')
    pytester.makepyfile(AGENTIC)
    ask = ("--glm5-no-canary", "--glm5-sim-noise", "0.01", "--glm5-max-repeats", "1")
    assert pytester.runpytest("--update-baselines", *ask).ret == 0
    broken = pytester.runpytest("--glm5-build", "nocache", *ask, *OUTPUTS)
    line = outcome_agrees(broken, pytester.path)
    assert line.startswith("FAILED: workload not held: t agentic (prefix hit 0% where the shape implies 82%"), line
    assert "regression" not in line.replace("no regression", ""), line
    notes = {v["metric"]: (v["verdict"], v["note"]) for v in report(pytester)["verdicts"]}
    assert notes["mean_ttft_ms"][0] == "workload not held"
    assert notes["mean_ttft_ms"][1].startswith("workload not held: prefix hit 0% where the shape implies 82%")


def test_a_chat_server_that_does_not_report_cached_tokens_is_read_by_its_counters(
        sim_factory: Callable[..., Sim]) -> None:
    # SGLang reports a chat reply's cached tokens only under --enable-cache-report: /metrics around the window says it.
    s = sim_factory("--reasoning-parser", "glm45", "--enable-metrics")
    wl = Workload(concurrency=8, num_prompts=32, input_len=512, output_len=4, protocol="chat", thinking=False,
                  prefix_len=384, prefix_groups=2)
    r = run_workload(s.url, wl)
    assert all(x.cached_tokens is None for x in r.records)
    assert r.metrics["prefix_hit"] == r.metrics["prefix_hit_counters"]
    assert abs(r.metrics["prefix_hit"] - r.metrics["prefix_hit_ideal"]) <= 0.02, r.metrics
