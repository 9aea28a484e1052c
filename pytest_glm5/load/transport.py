"""The load's hot path: streaming HTTP/1.1 POSTs over kept-alive connections, parsed by httptools (llhttp, the
parser uvicorn serves SGLang with) inside an asyncio Protocol.

Every token of every stream passes through here, so each network read costs one callback: the parser hands the
body to `on_line` for each SSE line, with the read's time stamp, without a task switch, a future or a timer per
read (aiohttp's reader costs all three: its StreamReader wakes the reading task per read and reschedules the read
timeout per read). A read timeout is one timer per request that re-arms itself only when it fires. Plain http to a
host reached directly only; https and proxied URLs go through aiohttp (client.py decides).
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable
from typing import cast

import httptools

CONNECT_TIMEOUT_S = 10.0
ERROR_BODY_BYTES = 400


def sse_lines(rest: bytes, body: bytes, now: float, on_line: Callable[[bytes, float], None]) -> bytes:
    """Hand each complete SSE `data:` line of rest + body to on_line with the read's time; the unfinished tail is
    returned, to be kept for the next read (both transports read SSE through this)."""
    *lines, tail = (rest + body).split(b"\n") if rest else body.split(b"\n")
    for line in lines:
        if line.startswith(b"data:"):
            on_line(line[5:].strip(), now)
    return tail


def sse_last(rest: bytes, now: float, on_line: Callable[[bytes, float], None]) -> None:
    """The body ended on a line with no newline after it: hand it over if it is a `data:` line."""
    if rest.startswith(b"data:"):
        on_line(rest[5:].strip(), now)


class Stale(ConnectionError):
    """A kept-alive connection the server had closed: the request never reached it, so it may be sent again."""


class _Conn(asyncio.Protocol):
    """One connection; one request at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[int] | None = None
        self.on_line: Callable[[bytes, float], None] | None = None
        self.status = 0
        self.rest = b""  # the start of a line whose end has not come yet
        self.error_body = bytearray()
        self.received = False
        self.last = 0.0
        self.now = 0.0
        self.reusable = False
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but speak its interface.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.now = self.last = self.pool.last = time.perf_counter()
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionError("the server switched protocols mid-response"))
        except httptools.HttpParserCallbackError as exc:
            self._fail(exc.__context__ if isinstance(exc.__context__, Exception) else exc)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if not self.received:
            self._fail(Stale(f"connection closed before any answer{f': {exc}' if exc else ''}"))
        elif self.status == 200 and not self.parser.should_keep_alive():
            # A body delimited by the close itself: what came is the whole answer.
            self._complete()
        else:
            self._fail(ConnectionResetError(f"connection lost mid-response{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            if len(self.error_body) < ERROR_BODY_BYTES:
                self.error_body += body[:ERROR_BODY_BYTES]
            return
        assert self.on_line is not None
        self.rest = sse_lines(self.rest, body, self.now, self.on_line)

    def on_message_complete(self) -> None:
        self.reusable = self.parser.should_keep_alive()
        self._complete()

    # ours
    def _complete(self) -> None:
        if self.rest and self.status == 200 and self.on_line is not None:
            try:
                sse_last(self.rest, time.perf_counter(), self.on_line)
            except Exception as exc:  # the caller's parse failure ends the request with it
                self._fail(exc)
                return
        self.rest = b""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(self.status)

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def _watch(self, timeout: float) -> None:
        idle = time.perf_counter() - self.last
        if idle >= timeout:
            self._fail(TimeoutError(f"no data for {idle:.0f} s (read timeout {timeout:g} s)"))
        else:
            self.timer = asyncio.get_running_loop().call_later(timeout - idle, self._watch, timeout)

    def start(self, request: bytes, on_line: Callable[[bytes, float], None], timeout: float) -> asyncio.Future[int]:
        """Write one request; the future gives the status once the answer is complete."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.on_line = on_line
        self.status = 0
        self.received = False
        self.reusable = False
        self.error_body.clear()
        self.rest = b""
        self.parser = httptools.HttpResponseParser(self)
        self.last = time.perf_counter()
        self.timer = loop.call_later(timeout, self._watch, timeout)
        self.transport.write(request)
        return self.waiter

    def done(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.on_line = None


class Pool:
    """Kept-alive connections to one server: at most one per request ever in flight at once."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the lean transport speaks plain http only, not {url}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.head = f"Host: {parts.netloc}\r\nContent-Type: application/json\r\nAccept: */*\r\n"
        self.idle: list[_Conn] = []
        self.last = time.perf_counter()  # the last read of any connection: the stall watch's clock

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        made = loop.create_connection(lambda: _Conn(self), self.host, self.port)
        _, conn = await asyncio.wait_for(made, CONNECT_TIMEOUT_S)
        return conn

    async def post(self, path: str, body: bytes, on_line: Callable[[bytes, float], None], timeout: float,
                   tries: int, sent: Callable[[], None]) -> tuple[int, str]:
        """POST body and feed each SSE `data:` payload of a 200 answer to on_line; (status, error text)."""
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{self.head}Content-Length: {len(body)}\r\n\r\n"
                   .encode() + body)
        for attempt in range(tries):
            fresh = not self.idle
            conn = self.idle.pop() if self.idle else await self._connect()
            if conn.closed:
                continue
            waiter = conn.start(request, on_line, timeout)
            sent()
            try:
                status = await waiter
            except Stale:
                conn.done()
                # Closed by the server while idle (llama-server closes them after a few requests): never sent.
                if fresh or attempt == tries - 1:
                    raise
                continue
            except BaseException:
                conn.done()
                if conn.transport is not None:
                    conn.transport.close()
                raise
            conn.done()
            text = conn.error_body.decode(errors="replace")
            if conn.reusable and not conn.closed:
                self.idle.append(conn)
            elif conn.transport is not None:
                conn.transport.close()
            return status, text
        raise Stale(f"{tries} kept-alive connections in a row were closed by the server")

    def close(self) -> None:
        """Close every idle connection."""
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()
