"""The lean streaming transport against a scripted HTTP server on 127.0.0.1: every way an answer can end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from pytest_glm5.load.transport import Pool, Stale

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


OK_CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    fields = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in fields if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def _serve(handler: Handler, client: Callable[[Pool], Awaitable[object]]) -> tuple[object, list[bytes], int]:
    """Run client against a server whose connections handler answers; (client's result, requests, connections)."""
    requests: list[bytes] = []
    connections = 0

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number = connections
        try:
            while True:
                try:
                    requests.append(await _read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await handler(reader, writer, number)
                if writer.is_closing():
                    return
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool(f"http://127.0.0.1:{port}")
    try:
        result = await client(pool)
    finally:
        pool.close()
        server.close()
        await server.wait_closed()
    return result, requests, connections


async def _post(pool: Pool, lines: list[tuple[bytes, float]], timeout: float = 5.0) -> tuple[int, str]:
    return await pool.post("/generate", b'{"x": 1}', lambda p, t: lines.append((p, t)), timeout, 3, lambda: None)


def test_events_split_anyhow_arrive_whole_and_the_connection_is_kept() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(OK_CHUNKED)
        # Two events in one chunk, then one event split across two chunks, then the end marker.
        writer.write(_chunk(b'data: {"a": 1}\n\ndata: {"a": 2}\n\n'))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(_chunk(b'data: {"a"') + _chunk(b': 3}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n")
        await writer.drain()

    async def client(pool: Pool) -> tuple[list[tuple[int, str]], list[tuple[bytes, float]]]:
        lines: list[tuple[bytes, float]] = []
        answers = [await _post(pool, lines), await _post(pool, lines)]
        return answers, lines

    result, requests, connections = asyncio.run(_serve(handler, client))
    answers, lines = result  # type: ignore[misc]
    assert answers == [(200, ""), (200, "")]
    payloads = [p for p, _ in lines]
    assert payloads == [b'{"a": 1}', b'{"a": 2}', b'{"a": 3}', b"[DONE]"] * 2
    # Lines of one read share its stamp; the later read is stamped later.
    assert lines[0][1] == lines[1][1] < lines[2][1]
    assert connections == 1 and len(requests) == 2
    assert requests[0].startswith(b"POST /generate HTTP/1.1\r\n") and requests[0].endswith(b'{"x": 1}')


def test_an_error_answer_gives_its_status_and_text() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        body = b'{"error": "prompt must be a string"}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    result, _, _ = asyncio.run(_serve(handler, lambda pool: _post(pool, [])))
    assert result == (400, '{"error": "prompt must be a string"}')


def test_a_body_ended_by_the_close_is_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\ndata: {\"a\": 1}\n\ndata: [DONE]")
        await writer.drain()
        writer.close()

    lines: list[tuple[bytes, float]] = []
    result, _, _ = asyncio.run(_serve(handler, lambda pool: _post(pool, lines)))
    assert result == (200, "")
    assert [p for p, _ in lines] == [b'{"a": 1}', b"[DONE]"]  # the last line had no newline


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """llama-server closes kept-alive connections after a few requests: the request goes again on a new one."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(OK_CHUNKED + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        if n == 1:
            await asyncio.sleep(0.05)
            writer.close()  # after answering, as if idle too long

    async def client(pool: Pool) -> list[tuple[int, str]]:
        first = await _post(pool, [])
        await asyncio.sleep(0.2)
        return [first, await _post(pool, [])]

    result, requests, connections = asyncio.run(_serve(handler, client))
    assert result == [(200, ""), (200, "")]
    assert connections == 2 and len(requests) == 2


def test_a_fresh_connection_closed_unanswered_is_an_error_not_a_retry_loop() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.close()

    with pytest.raises(Stale, match="closed before any answer"):
        asyncio.run(_serve(handler, lambda pool: _post(pool, [])))


def test_a_stream_cut_mid_body_fails() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(OK_CHUNKED + _chunk(b'data: {"a": 1}\n\n'))
        await writer.drain()
        writer.close()

    lines: list[tuple[bytes, float]] = []
    with pytest.raises(ConnectionResetError, match="mid-response"):
        asyncio.run(_serve(handler, lambda pool: _post(pool, lines)))
    assert [p for p, _ in lines] == [b'{"a": 1}']


def test_a_silent_server_meets_the_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(OK_CHUNKED + _chunk(b'data: {"a": 1}\n\n'))
        await writer.drain()
        await asyncio.sleep(3)

    t = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"read timeout 0\.3 s"):
        asyncio.run(_serve(handler, lambda pool: _post(pool, [], timeout=0.3)))
    assert time.perf_counter() - t < 2.5


def test_a_parse_failure_of_the_caller_ends_the_request_with_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(OK_CHUNKED + _chunk(b"data: not json\n\n"))
        await writer.drain()
        await asyncio.sleep(1)

    class Malformed(Exception):
        pass

    def on_line(payload: bytes, now: float) -> None:
        raise Malformed(payload.decode())

    async def client(pool: Pool) -> object:
        return await pool.post("/generate", b"{}", on_line, 5.0, 3, lambda: None)

    with pytest.raises(Malformed, match="not json"):
        asyncio.run(_serve(handler, client))


def test_only_plain_http_is_spoken() -> None:
    with pytest.raises(ValueError, match="plain http only"):
        Pool("https://example.com")
