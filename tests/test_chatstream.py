"""A streamed chat completion read by formula (load/chatstream.py): scripted streams as SGLang 0.5.23 sends them,
with and without a reasoning parser, with and without usage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_glm5.load.chatstream import ChatStream, ChatTiming


def _read(chunks: Sequence[tuple[float, dict[str, Any]]], end: float, start: float = 10.0) -> ChatTiming:
    s = ChatStream(start=start)
    for t, chunk in chunks:
        s.feed(chunk, start + t)
    return s.result(start + end)


def _delta(**delta: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}


THINKING = [(0.05, _delta(role="assistant")),  # the role chunk carries no text: no token, no TTFT
            (0.40, _delta(reasoning_content="Two")), (0.50, _delta(reasoning_content=" plus")),
            (0.60, _delta(reasoning_content=" two")), (0.90, _delta(content="4")), (1.00, _delta(content=".")),
            (1.01, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})]


def test_ttft_counts_thinking_and_ttfo_waits_for_the_answer() -> None:
    r = _read(THINKING, end=1.02)
    # TTFT is SGLang's chat client's (reasoning is content), TTFO AIPerf's (the first answer token).
    assert r.ttft is not None and abs(r.ttft - 0.40) < 1e-9 and r.ttfo is not None and abs(r.ttfo - 0.90) < 1e-9
    assert [round(g, 3) for g in r.itl] == [0.1, 0.1, 0.3, 0.1] and abs(r.latency - 1.02) < 1e-9
    assert (r.reasoning_tokens, r.answer_tokens, r.counted_by, r.prompt_tokens) == (3, 2, "chunks", None)


def test_the_servers_usage_counts_win_over_chunks() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 37, "completion_tokens": 9, "total_tokens": 46,
                                      "reasoning_tokens": 6}}
    r = _read([*THINKING, (1.015, usage)], end=1.02)
    assert (r.reasoning_tokens, r.answer_tokens, r.output_tokens, r.prompt_tokens, r.counted_by) == (6, 3, 9, 37,
                                                                                                      "usage")
    # OpenAI's place for it (completion_tokens_details) is read as well.
    openai = {"choices": [], "usage": {"prompt_tokens": 37, "completion_tokens": 9,
                                       "completion_tokens_details": {"reasoning_tokens": 5}}}
    assert _read([*THINKING, (1.015, openai)], end=1.02).reasoning_tokens == 5


def test_without_a_reasoning_parser_ttft_and_ttfo_are_one() -> None:
    plain = [(0.3, _delta(content="The")), (0.4, _delta(content=" answer"))]
    r = _read(plain, end=0.5)
    assert r.ttft == r.ttfo and r.reasoning_tokens == 0 and r.answer_tokens == 2


def test_a_reply_that_only_thinks_has_no_ttfo() -> None:
    r = _read(THINKING[:4], end=0.7)
    assert r.ttfo is None and r.ttft is not None and r.answer_tokens == 0 and r.reasoning_tokens == 3
    assert _read([], end=0.2).ttft is None  # nothing came: no first token either


def test_a_chat_prompt_goes_as_words_the_servers_tokenizer_counts_back() -> None:
    """n tokens as n / tokens-per-word words, part by part (a shared prefix, a session's turns, a trace's blocks),
    the template's tokens off the last part."""
    from pytest_glm5.load.client import chat_words
    from pytest_glm5.load.types import RequestShape, Workload

    shape = RequestShape(template_tokens=8, tokens_per_word=2.0)
    ids = list(range(100))
    plain = Workload(concurrency=1, num_prompts=4, input_len=100, protocol="chat", thinking=False)
    assert [len(p) for p in chat_words(ids, plain, shape)] == [46]  # (100 - 8) / 2
    shared = Workload(concurrency=1, num_prompts=4, input_len=100, prefix_len=60, protocol="chat", thinking=False)
    parts = chat_words(ids, shared, shape)
    assert [len(p) for p in parts] == [30, 16] and parts[1][0] == 60  # the prefix's first 30 ids, the rest's 16
    turns = Workload(concurrency=1, num_prompts=4, input_len=40, output_len=10, turns=2, protocol="chat",
                     thinking=False)
    assert [len(p) for p in chat_words(ids[:90], turns, shape)] == [20, 5, 16]  # 40, 10, 40 - 8
    assert [len(p) for p in chat_words(ids, plain, RequestShape(template_tokens=8))] == [92]  # one token a word
