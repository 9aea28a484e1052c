"""SGLang 0.5.23's `POST /v1/chat/completions` on the emulator: the chat template, thinking and the reasoning parser,
as a client of the real server sees them (sglang/srt/entrypoints/openai/serving_chat.py and usage_processor.py).

- The prompt is the messages through the model's chat template, so `usage.prompt_tokens` counts the template's own
  tokens: here GLM's, `[gMASK]<sop>`, a role tag and a newline per message and `<|assistant|>` after them, with
  `/nothink` and an empty `<think></think>` when thinking is off. A client that wants N prompt tokens sends fewer
  words (a word is a token to the emulator's tokenizer).
- Thinking is on unless `chat_template_kwargs.enable_thinking` (or `thinking`) is false; the profile's `[reasoning]`
  says the default (GLM-5 thinks). The model thinks for a drawn number of tokens (the profile's mean and CV, times
  --sim-reasoning-scale), then answers; `max_completion_tokens` (or the deprecated `max_tokens`) caps both.
- With `--reasoning-parser` set and `separate_reasoning` (default true), the thinking streams as
  `delta.reasoning_content` and the answer as `delta.content`, and usage counts `reasoning_tokens`; without a parser
  the thinking is answer text between `<think>` and `</think>` and the server counts no reasoning tokens.
- The stream: a chunk with role `assistant` and empty content before the first token, one per token (per
  stream_interval; a step that crosses from thinking to answer sends one of each), one with the finish_reason and
  an empty delta, the usage chunk under `stream_options.include_usage`, then `[DONE]`.

    >>> prompt_tokens([{"role": "user", "content": "one two three"}], thinking=True)
    8
    >>> prompt_tokens([{"role": "user", "content": "one two three"}], thinking=False)
    11
"""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import sse
from .speculative import spec_meta

if TYPE_CHECKING:
    from .app import SimServer

TEMPLATE_TOKENS = 3  # [gMASK] <sop> ... <|assistant|>
MESSAGE_TOKENS = 2  # <|role|> and its newline
NO_THINK_TOKENS = 3  # /nothink, then <think></think> opened for the answer
ROLES = ("system", "user", "assistant", "tool")


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return " ".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return None


def prompt_tokens(messages: list[dict[str, Any]], thinking: bool) -> int:
    """Tokens of the templated prompt: the messages' words and the template's own tokens."""
    words = sum(len((_text_of(m.get("content")) or "").split()) for m in messages)
    return TEMPLATE_TOKENS + MESSAGE_TOKENS * len(messages) + words + (0 if thinking else NO_THINK_TOKENS)


def _bad_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"messages[{i}] must be an object with a role in {', '.join(ROLES)}"
        if _text_of(m.get("content")) is None:
            return f"messages[{i}].content must be a string or a list of content parts"
    return None


class Reasoning:
    """How long the emulated model thinks: lognormal around the profile's mean with its CV, times a scale (0.8: a
    build that thinks 20% less), drawn from the prompt's text, so one prompt thinks alike on every launch (as a
    model at temperature 0 does) and a night's mean moves only when the model or its template does.

    >>> r = Reasoning({"reasoning": {"default": True, "mean_tokens": 100, "cv": 0.5}}, 1.0)
    >>> r.draw("2 + 2 ="), r.draw("2 + 2 ="), r.draw("the capital of France")
    (101, 101, 204)
    """

    def __init__(self, profile: dict[str, Any], scale: float) -> None:
        section = profile.get("reasoning", {})
        self.default_on = bool(section.get("default", False))
        self.mean = float(section.get("mean_tokens", 0)) * scale
        self.cv = float(section.get("cv", 0.0))

    def draw(self, text: str) -> int:
        """The thinking tokens of a prompt (at least one where the model thinks at all)."""
        if self.mean <= 0:
            return 0
        if self.cv <= 0:
            return max(1, round(self.mean))
        sigma = math.sqrt(math.log(1 + self.cv ** 2))
        rng = random.Random("reasoning:" + text)
        return max(1, round(self.mean * math.exp(rng.gauss(-sigma * sigma / 2, sigma))))


def _thinking(body: dict[str, Any], reasoning: Reasoning) -> bool:
    kwargs = body.get("chat_template_kwargs") or {}
    for key in ("enable_thinking", "thinking"):
        if isinstance(kwargs, dict) and kwargs.get(key) is not None:
            return bool(kwargs[key])
    return reasoning.default_on


@sse.posted
async def handle_chat(request: web.Request, body: dict[str, Any], received: float) -> web.StreamResponse:
    """OpenAI POST /v1/chat/completions with SGLang's extras (ignore_eos, chat_template_kwargs, separate_reasoning)."""
    srv: SimServer = request.app["srv"]
    problem = _bad_messages(body.get("messages"))
    if problem:
        return sse.error(400, problem)
    thinking = _thinking(body, srv.reasoning)
    plen = prompt_tokens(body["messages"], thinking)
    if plen >= srv.model.context_length:
        return sse.error(400, f"The input ({plen} tokens) is longer than the model's context length "
                              f"({srv.model.context_length} tokens).")
    key = "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
    max_new = sse.max_new(body.get(key) or None, srv.model.context_length - plen, plen, srv.model.context_length, key)
    if isinstance(max_new, web.Response):
        return max_new
    ignore_eos = bool(body.get("ignore_eos", False))
    text = " ".join(_text_of(m.get("content")) or "" for m in body["messages"])
    think = min(srv.reasoning.draw(text), max_new) if thinking else 0
    # The answer after the thinking ends at max_new, or at a seeded EOS when EOS is honoured.
    stop_at = max_new if ignore_eos else min(max_new, think + srv.scheduler.stop_point(max(1, max_new - think), False))
    fault = srv.fault()
    if fault == "http500":
        return sse.error(500, "Internal server error (injected by --sim-fault)")
    req = srv.new_request(plen, max_new, ignore_eos, stop_at=stop_at, prompt=text.split())
    req.received_at = received
    parser = bool(srv.args.get("reasoning_parser")) and body.get("separate_reasoning", True) is not False
    model = str(body.get("model") or srv.args["served_model_name"])
    cid = req.rid
    created = int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None, use: dict[str, Any] | None = None,
              choices: bool = True) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [choice] if choices else [], "usage": use}

    def split(start: int, end: int) -> tuple[str, str]:
        """The thinking and the answer text of tokens start..end."""
        thought = sse.pieces(req, start, min(end, think))[1] if start < think else ""
        answer = sse.pieces(req, max(start, think), end)[1] if end > think else ""
        if not parser and thought:
            thought = ("<think>" if start == 0 else "") + thought + ("</think>" if end >= think else "")
        return thought, answer

    def chunks(sent: int, n: int) -> list[dict[str, Any]]:
        thought, answer = split(sent, n)
        if not parser:
            return [event({"content": thought + answer})]
        out = [event({"reasoning_content": thought})] if thought else []
        return out + ([event({"content": answer})] if answer else [])

    def usage() -> dict[str, Any]:
        use: dict[str, Any] = sse.usage(plen, req.generated)
        counted = min(think, req.generated) if parser else 0
        # Cached prompt tokens are reported under --enable-cache-report, as SGLang does.
        details = {"cached_tokens": req.cached} if srv.args.get("enable_cache_report") else None
        use.update(prompt_tokens_details=details, reasoning_tokens=counted,
                   completion_tokens_details={"reasoning_tokens": counted} if counted else None)
        return use

    def sglext() -> dict[str, Any] | None:
        """SGLang's extension: the speculative figures where the request asked for them (return_spec_tokens_details)."""
        if srv.spec is None or not body.get("return_spec_tokens_details"):
            return None
        return {"spec_tokens_details": spec_meta(req, srv.spec.draft_tokens) or None}

    try:
        if not body.get("stream"):
            await srv.wait_finished(req)
            req.sent_first_at = req.sent_last_at = time.perf_counter()
            thought, answer = split(0, req.generated)
            message: dict[str, Any] = {"role": "assistant", "content": answer if parser else thought + answer,
                                       "reasoning_content": (thought or None) if parser else None}
            return web.json_response({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": req.finish_reason,
                             "matched_stop": None}],
                "usage": usage(), **({"sglext": ext} if (ext := sglext()) is not None else {})})
        async def role(resp: web.StreamResponse) -> None:
            await sse.write_event(resp, event({"role": "assistant", "content": ""}))

        resp, last = await sse.stream_tokens(request, srv, req, fault, int(srv.args.get("stream_interval") or 1),
                                             chunks, stamp=True, first=role)
        if last is None:
            return resp
        last += sse.event(event({}, finish=req.finish_reason))
        if (ext := sglext()) is not None:  # SGLang sends it after the finish, before the usage chunk
            last += sse.event({**event({}, choices=False), "usage": None, "sglext": ext})
        options = body.get("stream_options") or {}
        if options.get("include_usage") or srv.args.get("stream_response_default_include_usage"):
            last += sse.event(event({}, use=usage(), choices=False))
        await resp.write_eof(last + sse.DONE)
        return resp
    finally:
        req.aborted = not req.finished
        srv.in_flight -= 1
