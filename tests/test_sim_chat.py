"""The emulator's /v1/chat/completions streams as SGLang 0.5.23 does: a role chunk, thinking as reasoning_content
under a reasoning parser (inline between <think> tags without one), the answer, a finish chunk, the usage with the
template's prompt tokens and the reasoning tokens, [DONE]; each prompt thinks alike on every launch."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_glm5.load.chatstream import ChatStream
from pytest_glm5.sim.chat import MESSAGE_TOKENS, NO_THINK_TOKENS, TEMPLATE_TOKENS

from simproc import Sim, http


def chat(sim: Sim, text: str, max_tokens: int = 40, **extra: Any) -> tuple[int, list[Any]]:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_completion_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, **extra}
    status, raw = http("POST", sim.url + "/v1/chat/completions", body)
    events = [line[6:] for line in raw.decode().split("\n\n") if line.startswith("data: ")]
    return status, [e if e == "[DONE]" else json.loads(e) for e in events]


def test_a_thinking_stream_under_a_reasoning_parser(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory("--reasoning-parser", "glm45")
    status, events = chat(sim, "what is two plus two", max_tokens=200)
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"] for c in chunks[1:] if c["choices"] and c["choices"][0]["delta"]]
    kinds = ["reasoning_content" if "reasoning_content" in d else "content" for d in deltas]
    thought = kinds.count("reasoning_content")
    assert thought > 0 and kinds == ["reasoning_content"] * thought + ["content"] * (len(kinds) - thought)
    finish, tail = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {}
    usage = tail["usage"]
    assert tail["choices"] == [] and usage["completion_tokens"] == 200
    assert usage["prompt_tokens"] == TEMPLATE_TOKENS + MESSAGE_TOKENS + 5
    assert usage["reasoning_tokens"] == thought == usage["completion_tokens_details"]["reasoning_tokens"]
    # Read by formula: the first answer token comes after the first token of either channel.
    stream = ChatStream(start=0.0)
    for i, c in enumerate(chunks):
        stream.feed(c, float(i))
    read = stream.result(float(len(chunks)))
    assert read.ttft == 1.0 and read.ttfo == 1.0 + thought
    assert (read.reasoning_tokens, read.answer_tokens, read.prompt_tokens) == (thought, 200 - thought, 10)
    # /model_info names the parser, as SGLang's does.
    assert sim.get_json("/model_info")["reasoning_parser"] == "glm45"


def test_without_a_parser_the_thinking_is_answer_text(sim: Sim) -> None:
    _, events = chat(sim, "what is two plus two", max_tokens=200)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in events[:-1] if c["choices"])
    assert text.startswith("<think> w") and "</think>" in text
    usage = events[-2]["usage"]
    assert usage["reasoning_tokens"] == 0 and usage["completion_tokens_details"] is None
    assert "reasoning_content" not in json.dumps(events[1:-2])


def test_thinking_off_adds_the_template_s_no_think_tokens(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory("--reasoning-parser", "glm45")
    _, events = chat(sim, "one two three", chat_template_kwargs={"enable_thinking": False})
    usage = events[-2]["usage"]
    assert usage["reasoning_tokens"] == 0 and usage["completion_tokens"] == 40
    assert usage["prompt_tokens"] == TEMPLATE_TOKENS + MESSAGE_TOKENS + 3 + NO_THINK_TOKENS
    assert not any("reasoning_content" in c["choices"][0]["delta"] for c in events[1:-2] if c["choices"])


def reasoning_of(sim: Sim, prompts: list[str]) -> list[int]:
    with ThreadPoolExecutor(len(prompts)) as pool:  # together: the launch batches them
        return list(pool.map(lambda p: chat(sim, p, max_tokens=250)[1][-2]["usage"]["reasoning_tokens"], prompts))


def test_a_prompt_thinks_alike_on_every_launch_and_a_scaled_build_thinks_less(
        sim_factory: Callable[..., Sim]) -> None:
    prompts = [f"question number {i} about the weather" for i in range(12)]
    fast = ("--reasoning-parser", "glm45", "--sim-time-scale", "0.2")
    one = reasoning_of(sim_factory(*fast, "--sim-seed", "1"), prompts)
    two = reasoning_of(sim_factory(*fast, "--sim-seed", "2"), prompts)
    assert one == two and len(set(one)) > 3 and max(one) < 250  # per prompt, not per launch; and prompts differ
    short = reasoning_of(sim_factory(*fast, "--sim-reasoning-scale", "0.8"), prompts)
    assert 0.75 < statistics.mean(short) / statistics.mean(one) < 0.85


def test_bad_chat_requests_get_sglang_s_400(sim: Sim) -> None:
    for messages, said in (("hi", "messages must be a non-empty list"),
                           ([{"role": "robot", "content": "x"}], "messages[0] must be an object with a role"),
                           ([{"role": "user", "content": 3}], "messages[0].content must be a string")):
        status, raw = http("POST", sim.url + "/v1/chat/completions", {"model": "m", "messages": messages})
        assert status == 400 and said in json.loads(raw)["error"]["message"]


def test_a_cut_stream_fault_ends_a_chat_stream_without_finish(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory("--sim-fault", "cut-stream=1")
    _, events = chat(sim, "hello there")
    assert events and "[DONE]" not in events
    assert all(c["choices"][0]["finish_reason"] is None for c in events if c["choices"])
