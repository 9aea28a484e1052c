"""What every generating route of the emulator shares: SGLang's error bodies, the JSON body it accepts, the text of a
request's tokens, and the SSE stream of them with the stream faults (`--sim-fault`) that cut it halfway."""

from __future__ import annotations

import functools
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
        body = orjson.loads(await request.read())  # a third of json.loads' time, on every request
    except orjson.JSONDecodeError:
        return error(400, "request body is not valid JSON")
    if not isinstance(body, dict):
        return error(400, "request body must be a JSON object")
    return body


Posted = Callable[[web.Request, dict[str, Any], float], Awaitable[web.StreamResponse]]


def posted(handler: Posted) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A POST handler given its JSON object body and when the request arrived (the arrival middleware's stamp, else
    now, taken before the body is read); any other body is SGLang's 400 before the handler runs."""

    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.StreamResponse:
        received = float(request.get("arrival") or time.perf_counter())
        body = await json_object(request)
        return body if isinstance(body, web.Response) else await handler(request, body, received)

    return handle


async def sse_start(request: web.Request) -> web.StreamResponse:
    """The prepared event-stream response."""
    resp = _EventStream(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


class _EventStream(web.StreamResponse):
    """A stream whose headers go out with its first event, in one send (aiohttp's own Response does the same): a
    send is the emulator's largest cost per request at 1,024 streams. aiohttp before 3.12 has no such switch and
    sends them at once, as before."""

    _send_headers_immediately = False


def event(obj: dict[str, Any]) -> bytes:
    """One `data:` event's bytes."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def write_event(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    """One `data:` event."""
    await resp.write(event(obj))


DONE = b"data: [DONE]\n\n"


async def stream_tokens(request: web.Request, srv: Streamer, req: SimRequest, fault: str | None, interval: int,
                        chunks: Callable[[int, int], list[dict[str, Any]]], stamp: bool,
                        first: Callable[[web.StreamResponse], Awaitable[None]] | None = None
                        ) -> tuple[web.StreamResponse, bytes | None]:
    """Stream a request's tokens as SSE, `chunks(sent, n)` the events for the tokens from sent to n. Returns the
    last tokens' events, unwritten, when it ran to the request's end (None when a fault cut it): the route adds what
    follows them and ends the response with one write (`resp.write_eof`), as each write is a send on the socket, the
    emulator's largest cost at 1,024 streams. `first` writes what goes before the first token (the chat route's role
    chunk). The stream faults end it halfway: cut-stream closes the connection without finish_reason or [DONE],
    malformed-sse first sends an event that is not JSON."""
    resp = await sse_start(request)
    sent = 0
    while True:
        await srv.wait_tokens(req, sent, interval)
        n = req.generated
        if fault in ("cut-stream", "malformed-sse") and n >= max(1, req.stop_at // 2):
            if fault == "malformed-sse":
                await resp.write(b"data: {not json\n\n")
            return resp, None
        if sent == 0 and first is not None:
            await first(resp)
        data = b"".join(event(obj) for obj in chunks(sent, n))
        if stamp:
            mark_sent(req)
        sent = n
        if req.finished:
            return resp, data
        if data:
            await resp.write(data)


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


_FIXED_IDS: list[int] = []  # the fixed sequence's ids and texts, grown once as far as any reply reaches
_FIXED_TEXT: list[str] = []


def _fixed(end: int) -> None:
    for i in range(len(_FIXED_IDS), end):
        t = (7 * i + 11) % 9973
        _FIXED_IDS.append(t)
        _FIXED_TEXT.append(f" w{t}")


def pieces(req: SimRequest, start: int, end: int) -> tuple[list[int], str]:
    """The ids and text of tokens start..end: the reply's words for a text prompt, else a fixed sequence (a token is
    one word: the emulator's tokenizer). A native chunk carries the whole text so far, so this runs over every token
    at every chunk of every stream: the pieces are made once (22 -> 2 us for 128 tokens), not at each chunk."""
    if req.words is not None:
        words = req.words[start:end]
        return [token_id(w) for w in words], "".join(" " + w for w in words)
    if end > len(_FIXED_IDS):
        _fixed(end)
    return _FIXED_IDS[start:end], "".join(_FIXED_TEXT[start:end])
