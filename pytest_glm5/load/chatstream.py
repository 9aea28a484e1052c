"""One streamed chat completion, read by formula (issue 32): what SGLang's chat client and AIPerf each take from the
chunks of `POST /v1/chat/completions`, so that a reasoning model's timings mean what those tools mean.

SGLang 0.5.23 streams `choices[0].delta` with `content` (the answer) and, where the server runs a reasoning parser,
`reasoning_content` (its thinking); the last chunk may carry `usage` (`prompt_tokens` counting the chat template,
`completion_tokens` counting reasoning too, `reasoning_tokens` and OpenAI's `completion_tokens_details.
reasoning_tokens`). From those:
- **TTFT**: the first chunk with text in either channel (bench_serving's chat client counts reasoning as content);
- **TTFO**, time to first output token: the first chunk of the answer (AIPerf's), after the thinking;
- **ITL**: one gap per later chunk with text, as bench_serving's OpenAI clients count them;
- **tokens**: `usage` where the server sent it; else one a chunk (SGLang streams a token a chunk), reasoning and answer
  apart.

    >>> s = ChatStream(start=0.0)
    >>> for t, delta in ((0.5, {"reasoning_content": "Let"}), (0.6, {"reasoning_content": " me"}),
    ...                  (0.9, {"content": "4"})):
    ...     s.feed({"choices": [{"delta": delta}]}, t)
    >>> s.feed({"choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 3, "reasoning_tokens": 2}}, 1.0)
    >>> r = s.result(1.0)
    >>> (r.ttft, r.ttfo, r.reasoning_tokens, r.answer_tokens, r.prompt_tokens)
    (0.5, 0.9, 2, 1, 21)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ChatTiming:
    """One chat request as measured: seconds from the send, the gaps between chunks, and its token counts (None:
    neither the server nor the stream told; ttfo None: no answer came, only thinking)."""

    ttft: float | None
    ttfo: float | None
    latency: float
    itl: tuple[float, ...]
    reasoning_tokens: int
    answer_tokens: int
    prompt_tokens: int | None
    counted_by: str  # "usage" (the server's counts) or "chunks" (one token a chunk)

    @property
    def output_tokens(self) -> int:
        """Reasoning and answer together: what `usage.completion_tokens` counts."""
        return self.reasoning_tokens + self.answer_tokens


@dataclass
class ChatStream:
    """Feed it each parsed chunk of one streamed chat completion with the time it arrived; `result` reads it."""

    start: float
    _first: float | None = None
    _first_answer: float | None = None
    _last: float | None = None
    _itl: list[float] = field(default_factory=list)
    _reasoning_chunks: int = 0
    _answer_chunks: int = 0
    _usage: Mapping[str, Any] | None = None

    def feed(self, chunk: Mapping[str, Any], now: float) -> None:
        """One chunk (the JSON after `data: `), received at `now`."""
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            thinking = delta.get("reasoning_content") or delta.get("reasoning") or ""
            answer = delta.get("content") or ""
            if not (thinking or answer):
                continue
            if self._first is None:
                self._first = now
            elif self._last is not None:
                self._itl.append(now - self._last)
            self._last = now
            if answer and self._first_answer is None:
                self._first_answer = now
            self._reasoning_chunks += bool(thinking)
            self._answer_chunks += bool(answer)

    def result(self, end: float) -> ChatTiming:
        """What the stream showed, the request having ended at `end`."""
        usage = self._usage or {}
        details = usage.get("completion_tokens_details") or {}
        reasoning = usage.get("reasoning_tokens") or details.get("reasoning_tokens")
        completion = usage.get("completion_tokens")
        if isinstance(completion, int) and completion > 0:
            # The server's counts: reasoning as it says (none said: the chunks' share), the rest the answer.
            think = int(reasoning) if isinstance(reasoning, int) else min(completion, self._reasoning_chunks)
            counts, how = (think, completion - think), "usage"
        else:
            counts, how = (self._reasoning_chunks, self._answer_chunks), "chunks"
        prompt = usage.get("prompt_tokens")

        def since(t: float | None) -> float | None:
            return None if t is None else t - self.start

        return ChatTiming(since(self._first), since(self._first_answer), end - self.start, tuple(self._itl),
                          counts[0], counts[1], int(prompt) if isinstance(prompt, int) else None, how)
