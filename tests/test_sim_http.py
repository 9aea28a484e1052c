"""Every emulator endpoint answers with SGLang's shapes."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable

import pytest

from simproc import Sim, http


def sse(body: bytes) -> list[str]:
    return [line[6:] for line in body.decode().split("\n\n") if line.startswith("data: ")]


def test_info_endpoints(sim: Sim) -> None:
    assert http("GET", sim.url + "/health")[0] == 200
    assert http("GET", sim.url + "/health_generate")[0] == 200
    assert http("GET", sim.url + "/ready")[0] == 200
    info = sim.get_json("/model_info")
    assert info["model_path"] == "/models/test-model" and info["is_generation"] is True
    assert {"tokenizer_path", "served_model_name", "architectures", "model_type"} <= info.keys()
    si = sim.get_json("/server_info")
    assert si["version"] == "0.5.23" and si["tp_size"] == 1 and si["enable_metrics"] is True
    assert si["launch_command"].startswith("sglang serve ") and "--enable-metrics" in si["launch_command"]
    assert si["sim"]["profile"] == "tiny" and si["sim"]["time_scale"] == 1.0
    models = sim.get_json("/v1/models")
    assert models["data"][0]["id"] == "/models/test-model" and models["data"][0]["max_model_len"] == 8192


def test_generate_stream_is_cumulative_with_meta_info(sim: Sim) -> None:
    status, body = http("POST", sim.url + "/generate", {
        "input_ids": list(range(10, 42)), "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
        "stream": True})
    assert status == 200
    events = sse(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 6
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))  # cumulative, not deltas
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert last["prompt_tokens"] == 32 and "e2e_latency" in last
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert "e2e_latency" not in chunks[0]["meta_info"] or len(chunks) == 1


def test_generate_text_and_non_stream(sim: Sim) -> None:
    status, body = http("POST", sim.url + "/generate",
                        {"text": "hello there general", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200
    obj = json.loads(body)
    assert obj["meta_info"]["prompt_tokens"] == 3 and obj["meta_info"]["completion_tokens"] == 3


def test_completions_stream_with_usage(sim: Sim) -> None:
    status, body = http("POST", sim.url + "/v1/completions", {
        "model": "x", "prompt": [11, 12, 13, 14], "max_tokens": 5, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200
    events = sse(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-1]["usage"]["prompt_tokens"] == 4
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]).count(" w") == 5


def test_completions_without_usage_and_text_prompt(sim: Sim) -> None:
    status, body = http("POST", sim.url + "/v1/completions",
                        {"prompt": "a b c", "max_tokens": 2, "stream": True})
    chunks = [json.loads(e) for e in sse(body)[:-1]]
    assert status == 200 and all(c["usage"] is None for c in chunks)
    status, body = http("POST", sim.url + "/v1/completions", {"prompt": "a b c", "max_tokens": 2})
    assert json.loads(body)["usage"]["completion_tokens"] == 2


def test_bad_requests_get_400(sim: Sim) -> None:
    assert http("POST", sim.url + "/generate", {"sampling_params": {}})[0] == 400
    status, body = http("POST", sim.url + "/generate", {"input_ids": [999999]})
    assert status == 400 and b"out of vocabulary" in body
    assert http("POST", sim.url + "/v1/completions", {"prompt": list(range(9000))})[0] == 400


def test_flush_cache_and_metrics(sim: Sim) -> None:
    assert http("POST", sim.url + "/flush_cache")[0] == 200
    http("POST", sim.url + "/generate", {"input_ids": [5] * 7, "sampling_params": {"max_new_tokens": 4}})
    assert sim.metric("sglang:generation_tokens_total") >= 4 + 8  # the request and the warmup
    assert sim.metric("sglang:prompt_tokens_total") >= 7
    assert sim.metric("sglang:num_running_reqs") == 0
    assert sim.metric("sglang:gen_throughput") >= 0


def test_metrics_only_with_enable_metrics(sim_factory: Callable[..., Sim]) -> None:
    plain = sim_factory()
    assert http("GET", plain.url + "/metrics")[0] == 404


@pytest.mark.slow
def test_ready_is_503_until_warmup_is_done(sim_factory: Callable[..., Sim]) -> None:
    # glm5-sm120 warms up for 20 model seconds: 1 s at time scale 0.05, after a 0.2 s load.
    s = sim_factory("--sim-startup-s", "4", profile="glm5-sm120", scale=0.05, wait=False)
    first = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            first = http("GET", s.url + "/ready", timeout=1)[0]
            break
        except OSError:
            time.sleep(0.02)
    assert first == 503
    assert http("GET", s.url + "/health")[0] == 503
    assert "fired up" not in s.log.read_text()
    while http("GET", s.url + "/ready")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    log = s.log.read_text()
    assert "Load weight end" in log and "The server is fired up and ready to roll!" in log
