"""Greedy replies to text prompts, whole (not streamed): what the canary and the accuracy set read from a server.

SGLang's native `/generate` gives the token ids (`output_ids`), so a divergence is placed at a token; an OpenAI-style
server (`/v1/completions`: llama.cpp, transformers serve) gives text, and a divergence is placed at a word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from .. import proxies


@dataclass(frozen=True)
class Reply:
    """One prompt's greedy reply: its text, its token ids where the engine gives them, its length, or the error."""

    text: str
    ids: tuple[int, ...] | None
    tokens: int
    error: str | None = None

    @property
    def pieces(self) -> tuple[Any, ...]:
        """What two replies are compared by: token ids where known, else words."""
        return self.ids if self.ids is not None else tuple(self.text.split())


def unit_of(replies: Sequence[Reply]) -> str:
    """What replies are compared by: `tokens` where every one came with its ids, else `words`."""
    return "tokens" if all(r.ids is not None for r in replies) else "words"


def _body(protocol: str, prompt: str, max_tokens: int, model: str) -> tuple[str, dict[str, Any]]:
    if protocol == "sglang":
        return "/generate", {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens}}
    return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}


def _parse(protocol: str, data: Any) -> Reply:
    if protocol == "sglang":
        meta = data.get("meta_info") or {}
        ids = data.get("output_ids")
        return Reply(str(data.get("text", "")), tuple(int(x) for x in ids) if isinstance(ids, list) else None,
                     int(meta.get("completion_tokens") or len(ids or [])))
    choice = (data.get("choices") or [{}])[0]
    text = str(choice.get("text", ""))
    return Reply(text, None, int((data.get("usage") or {}).get("completion_tokens") or len(text.split())))


async def _ask(url: str, protocol: str, prompts: Sequence[str], max_tokens: int, model: str, concurrency: int,
               timeout_s: float) -> list[Reply]:
    gate = asyncio.Semaphore(max(1, concurrency))
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def one(session: aiohttp.ClientSession, prompt: str) -> Reply:
        path, body = _body(protocol, prompt, max_tokens, model)
        async with gate:
            try:
                async with session.post(url + path, json=body) as resp:
                    if resp.status != 200:
                        return Reply("", None, 0, f"HTTP {resp.status}: {(await resp.text())[:200]}")
                    return _parse(protocol, await resp.json(content_type=None))
            except (TimeoutError, aiohttp.ClientError, ValueError, TypeError, AttributeError, KeyError,
                    IndexError) as exc:  # a reply of another shape is that prompt's error, never a traceback
                return Reply("", None, 0, f"{exc.__class__.__name__}: {exc}"[:200])

    async with aiohttp.ClientSession(timeout=timeout, trust_env=not proxies.is_local(url)) as session:
        return list(await asyncio.gather(*(one(session, p) for p in prompts)))


def ask(url: str, protocol: str, prompts: Sequence[str], max_tokens: int, model: str = "default",
        concurrency: int = 16, timeout_s: float = 600.0) -> list[Reply]:
    """Each prompt's greedy reply (temperature 0, at most `max_tokens`), in the prompts' order."""
    return asyncio.run(_ask(url.rstrip("/"), protocol, prompts, max_tokens, model, concurrency, timeout_s))
