"""What every generating route of the emulator shares: SGLang's error bodies, the JSON body it accepts, the text of a
request's tokens, and the SSE stream of them with the stream faults (`--sim-fault`) that cut it halfway."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from .answers import token_id
from .engine import SimRequest


class Streamer(Protocol):
    """What a stream waits on: the server's token clock."""

    async def wait_tokens(self, req: SimRequest, have: int, interval: int) -> None: ...


def error(status: int, message: str) -> web.Response:
    """SGLang's error body: `{"error": {"message": ..., "code": status}}`."""
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


def max_new(value: Any, default: int, prompt_len: int, context_length: int, key: str = "max_new_tokens"
            ) -> int | web.Response:
    """The tokens a request may generate, as SGLang 0.5.23's TokenizerManager._validate_one_request checks them (its
    message, its `>`): a whole number >= 0 whose
    total with the prompt stays inside the context length (else its 400), `default` where none is given. A reply is
    never longer than the context, so no request makes the emulator build a billion tokens."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < 0:
        return error(400, f"{key} must be a non-negative integer, got {value!r}")
    n = int(value)
    if prompt_len + n > context_length:
        return error(400, f"Requested token count exceeds the model's maximum context length of {context_length} "
                          f"tokens. You requested a total of {prompt_len + n} tokens: {prompt_len} tokens from the "
                          f"input messages and {n} tokens for the completion. Please reduce the number of tokens in "
                          "the input messages or the completion to fit within the limit.")
    return n


async def json_object(request: web.Request) -> dict[str, Any] | web.Response:
    """A request's JSON object body, or the 400 SGLang answers for anything else."""
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return error(400, "request body is not valid JSON")
    if not isinstance(body, dict):
        return error(400, "request body must be a JSON object")
    return body


async def sse_start(request: web.Request) -> web.StreamResponse:
    """The prepared event-stream response."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


async def write_event(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    """One `data:` event."""
    await resp.write(b"data: " + orjson.dumps(obj) + b"\n\n")


async def stream_tokens(request: web.Request, srv: Streamer, req: SimRequest, fault: str | None, interval: int,
                        chunks: Callable[[int, int], list[dict[str, Any]]], stamp: bool,
                        first: Callable[[web.StreamResponse], Awaitable[None]] | None = None
                        ) -> tuple[web.StreamResponse, bool]:
    """Stream a request's tokens as SSE, `chunks(sent, n)` the events for the tokens from sent to n; True when it ran
    to the request's end. `first` writes what goes before the first token (the chat route's role chunk). The stream
    faults end it halfway: cut-stream closes the connection without finish_reason or [DONE], malformed-sse first
    sends an event that is not JSON."""
    resp = await sse_start(request)
    sent = 0
    while True:
        await srv.wait_tokens(req, sent, interval)
        n = req.generated
        if fault in ("cut-stream", "malformed-sse") and n >= max(1, req.stop_at // 2):
            if fault == "malformed-sse":
                await resp.write(b"data: {not json\n\n")
            return resp, False
        if sent == 0 and first is not None:
            await first(resp)
        for obj in chunks(sent, n):
            await write_event(resp, obj)
        if stamp:
            mark_sent(req)
        sent = n
        if req.finished:
            return resp, True


def mark_sent(req: SimRequest) -> None:
    """Note when the handler wrote the request's first and last tokens (the /sim/requests ground truth)."""
    now = time.perf_counter()
    if not req.sent_first_at:
        req.sent_first_at = now
    if req.finished:
        req.sent_last_at = now


def usage(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI's usage object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def pieces(req: SimRequest, start: int, end: int) -> tuple[list[int], str]:
    """The ids and text of tokens start..end: the reply's words for a text prompt, else a fixed sequence (a token is
    one word: the emulator's tokenizer)."""
    if req.words is not None:
        words = req.words[start:end]
        return [token_id(w) for w in words], "".join(" " + w for w in words)
    ids = [(7 * i + 11) % 9973 for i in range(start, end)]
    return ids, "".join(f" w{t % 9973}" for t in ids)
