"""Closed-loop streaming load generator: a Workload in, per-request records and a BenchResult out.

The request shapes and the way tokens and gaps are counted follow SGLang's bench_serving
(shared/reference/sglang.md sections 1.2-1.3), so that a figure from here means what the same
figure from `python -m sglang.bench_serving --max-concurrency C --request-rate inf` means.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
import orjson

from .. import proxies
from ..metrics import RequestTiming, compute_metrics, first_errors
from ..settings import event_loop
from . import datasets, servermetrics, trace, transport
from .chatstream import ChatStream
from .clientload import ClientMonitor
from .types import BenchError, BenchResult, Prompt, RequestShape, Unreachable, Workload

PREFLIGHT_TIMEOUT_S = 5.0
_JSON = {"Content-Type": "application/json"}
STALE_RETRIES = 3
NONCE_IDS = 3  # ids of a shared prefix or a session drawn anew each run: the cache-bust, and all that varies
CALIBRATION_WORDS = 64  # chat: the probe's second prompt has this many words more than its first
# A window's request bodies are built before it (off the measured path) up to this many bytes; a larger window builds
# the rest as it sends them (100,000 prompts of 8k tokens would be gigabytes).
PREBUILT_BYTES = 256 * 2 ** 20
PROBE_TRIES = 8
FLUSH_TRIES = 3
# How often a run looks at its stop check, its stall clock and its progress line: each look wakes the client, and
# a timer's wake costs more than a token (clientload.TICK_S).
WATCH_S = 0.5


def lengths(full: int, ratio: float, count: int, rng: random.Random) -> list[int]:
    """bench_serving's compute_random_lens: uniform in [max(int(full * ratio), 1), full]; all `full` at ratio 1."""
    if ratio >= 1.0:
        return [full] * count
    return [rng.randint(max(int(full * ratio), 1), full) for _ in range(count)]


def make_prompts(workload: Workload, count: int, salt: int = 0, nonce: int = 0) -> list[list[int]]:
    """Seeded token-id prompts inside [token_low, token_high), input_len ids each (or bench_serving's range of
    lengths under range_ratio < 1), drawn as `workload.sampling` says; under a shared prefix, each opens with its
    group's prefix, whose first NONCE_IDS ids are drawn with `nonce` so another run's cache holds none of them. Only
    those: the rest is the seed's alone, so the words a chat prompt is sent as cost the server's tokenizer the same
    tokens run after run (drawn anew, their count moved 2% in 1 run of 8 on llama.cpp's BPE)."""
    rng = random.Random(workload.seed * 1_000_003 + salt)
    if workload.turns > 1:
        return _sessions(workload, count, rng, nonce)
    lo, hi = workload.token_low, workload.token_high
    lens = lengths(workload.input_len, workload.range_ratio, count, rng)
    if workload.sampling == "random-ids":
        span = hi - lo
        offsets = [rng.randrange(span) for _ in range(count)]
        out = [[lo + (offsets[i] + i + j) % span for j in range(lens[i])] for i in range(count)]
    else:
        out = [[rng.randrange(lo, hi) for _ in range(n)] for n in lens]
    if workload.prefix_len:
        # Each group's prefix, then the prompt's own tokens drawn one by one (bench_serving's generated-shared-prefix
        # draws them so): a run of consecutive ids would repeat another prompt's whole suffix at one start id in
        # ~1000, which a prefix cache serves too. `nonce` makes the prefixes new to this run.
        n = workload.prefix_len
        groups = [_fresh([rng.randrange(lo, hi) for _ in range(n)], nonce, g, lo, hi)
                  for g in range(workload.prefix_groups)]
        out = [groups[i % workload.prefix_groups] + [rng.randrange(lo, hi) for _ in range(len(p) - n)]
               for i, p in enumerate(out)]
    return out


def _prompts(workload: Workload, count: int, salt: int = 0, nonce: int = 0) -> Sequence[Prompt]:
    """A window's (or a warmup's) prompts: the prompt set's text where the workload names one (the warmup's from its
    end, so the window's are new to the prefix cache), else generated token ids (make_prompts)."""
    if workload.dataset is None:
        return make_prompts(workload, count, salt, nonce)
    try:
        prompts = datasets.load(workload.dataset)
    except datasets.DatasetError as exc:
        raise BenchError(str(exc)) from None
    return prompts.take(count, offset=len(prompts.prompts) - count if salt else 0)


def _fresh(ids: list[int], nonce: int, group: int, lo: int, hi: int) -> list[int]:
    """`ids` with its first NONCE_IDS made new to this run by `nonce` (0: as drawn): a prefix cache matches from the
    first token, so the whole prefix is new, and ~1e9 draws make another run's the same."""
    if not nonce:
        return ids
    fresh = random.Random(nonce * 1_000_003 + group)
    k = min(NONCE_IDS, len(ids))
    return [fresh.randrange(lo, hi) for _ in range(k)] + ids[k:]


def _sessions(workload: Workload, count: int, rng: random.Random, nonce: int = 0) -> list[list[int]]:
    """`count` prompts of multi-turn sessions, each session's turns in order: turn k is the conversation so far (the
    earlier turns' inputs, each followed by a stand-in answer of output_len ids) and input_len new ids. The answer is
    the client's, not the server's: the server finds the previous prompt in its cache, not its own reply."""
    lo, hi = workload.token_low, workload.token_high
    out: list[list[int]] = []
    while len(out) < count:
        context: list[int] = []
        for turn in range(workload.turns):
            said = [rng.randrange(lo, hi) for _ in range(workload.input_len)]
            context = context + (_fresh(said, nonce, len(out), lo, hi) if turn == 0 else said)
            out.append(context)
            context = context + [rng.randrange(lo, hi) for _ in range(workload.output_len)]
    return out[:count]


def segments(n: int, workload: Workload) -> list[int]:
    """The parts of an n-token prompt that must stay whole to share a prefix: a session's turns (inputs and answers
    in turn), a shared prefix and the rest, a trace's blocks, else the prompt itself."""
    if workload.turns > 1:
        out, at, user = [], 0, True
        while at < n:
            out.append(min(workload.input_len if user else workload.output_len, n - at))
            at, user = at + out[-1], not user
        return out
    if workload.trace is not None:
        return [min(trace.BLOCK, n - at) for at in range(0, n, trace.BLOCK)]
    if workload.prefix_len:
        return [workload.prefix_len, n - workload.prefix_len]
    return [n]


def chat_words(prompt: list[int], workload: Workload, shape: RequestShape) -> list[list[int]]:
    """The ids a chat prompt sends as words, part by part: each part as many words as the server's tokenizer makes
    its tokens of (shape.tokens_per_word), the template's tokens off the last, so that usage.prompt_tokens is the
    asked length and a part shared between prompts is sent as the same words."""
    out, at = [], 0
    sizes = segments(len(prompt), workload)
    for i, size in enumerate(sizes):
        tokens = size - (shape.template_tokens if i == len(sizes) - 1 else 0)
        out.append(prompt[at:at + min(size, max(1, round(tokens / shape.tokens_per_word)))])
        at += size
    return out


def arrival_gaps(workload: Workload, count: int, salt: int = 0) -> list[float]:
    """Seconds between scheduled sends, as bench_serving draws them: exponential at request_rate (Poisson), or
    gamma with shape `burstiness` and the same mean. Empty for a closed loop."""
    if workload.request_rate is None:
        return []
    rng = random.Random(workload.seed * 104_729 + salt)
    k = workload.burstiness
    return [rng.gammavariate(k, 1.0 / (workload.request_rate * k)) for _ in range(count)]


def _cv(values: Sequence[float]) -> float:
    mean = statistics.fmean(values) if values else 0.0
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


def output_lengths(workload: Workload, count: int, salt: int = 0) -> list[int]:
    """Each request's output length: output_len, or bench_serving's range under range_ratio < 1."""
    return lengths(workload.output_len, workload.range_ratio, count, random.Random(workload.seed * 7_919 + salt))


def prompt_text(prompt: list[int]) -> str:
    """A text prompt of about len(prompt) tokens for servers that refuse token ids (one short word per id)."""
    return " ".join(f"w{t}" for t in prompt)


def _hits(records: Sequence[RequestTiming], before: dict[str, float] | None, after: dict[str, float] | None,
          ideal: float) -> dict[str, float]:
    """The window's prefix hit: by the server's count of each request where it gave one, else by its counters
    around the window (`prefix_hit_counters` beside it where both are there), with what the shape implies."""
    out = {"prefix_hit_ideal": ideal}
    told = [r for r in records if r.success and r.cached_tokens is not None]
    if told:
        out["prefix_hit"] = sum(r.cached_tokens or 0 for r in told) / max(1, sum(r.prompt_len for r in told))
    if before is not None and after is not None:
        prompt = after.get("sglang:prompt_tokens_total", 0.0) - before.get("sglang:prompt_tokens_total", 0.0)
        cached = after.get("sglang:cached_tokens_total", 0.0) - before.get("sglang:cached_tokens_total", 0.0)
        if prompt > 0:
            out["prefix_hit_counters"] = cached / prompt
            out.setdefault("prefix_hit", out["prefix_hit_counters"])
    return out


def _trace_rows(workload: Workload) -> list[trace.Row]:
    """The rows a trace workload replays (none without a trace); BenchError for a trace that cannot be."""
    if workload.trace is None:
        return []
    try:
        rows = trace.load(workload.trace)
    except trace.TraceError as exc:
        raise BenchError(str(exc)) from None
    if len(rows) < workload.num_prompts:
        raise BenchError(f"trace {workload.trace} has {len(rows)} rows, fewer than num_prompts {workload.num_prompts}")
    try:
        trace.replay_s(rows[:workload.num_prompts], workload.request_rate, workload.duration_s)
    except trace.TraceError as exc:
        raise BenchError(f"trace {workload.trace}: {exc}") from None
    return rows[:workload.num_prompts]


def _payload(workload: Workload, prompt: Prompt, output_len: int, model: str,
             shape: RequestShape) -> tuple[str, dict[str, Any]]:
    if workload.protocol == "sglang":
        return "/generate", {
            **({"text": prompt} if isinstance(prompt, str) else {"input_ids": prompt}),
            "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True},
            "stream": True,
        }
    if workload.protocol == "chat":
        # The template's own tokens are part of input_len, as usage.prompt_tokens counts them (AIPerf compensates
        # them the same way): the words sent are the rest.
        parts = [prompt] if isinstance(prompt, str) else [
            prompt_text(part) for part in chat_words(prompt, workload, shape)]
        messages = ([{"role": "user" if i % 2 == 0 else "assistant", "content": part} for i, part in enumerate(parts)]
                    if workload.turns > 1 else [{"role": "user", "content": " ".join(parts)}])
        chat: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_completion_tokens": output_len,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": bool(workload.thinking)},
        }
        if shape.spec_details:
            chat["return_spec_tokens_details"] = True
        if shape.ignore_eos:
            chat["ignore_eos"] = True
        return "/v1/chat/completions", chat
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt if shape.token_ids or isinstance(prompt, str) else prompt_text(prompt),
        "max_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if shape.ignore_eos:
        body["ignore_eos"] = True
    return "/v1/completions", body


# What a chunk's fields of an unexpected type raise when read: a failed request with its reason, never a traceback.
_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError)


class _Stream:
    """Parses one SSE response into a RequestTiming, counting as bench_serving does."""

    def __init__(self, record: RequestTiming, protocol: str, asked: int) -> None:
        self.r = record
        self.protocol = protocol
        self.asked = asked
        self.last = 0.0
        self.tokens = 0
        self.done = False
        self.usage_seen = False
        self.server_prompt_len = False  # text prompts: the server's count of prompt tokens is the truth
        self.chat = ChatStream(record.start) if protocol == "chat" else None
        # Chosen once: this runs for every token of every stream.
        self._feed = (self._feed_native if protocol == "sglang" else self._feed_chat if protocol == "chat"
                      else self._feed_openai)

    def feed_line(self, payload: bytes, now: float) -> None:
        """One SSE `data:` payload."""
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise _StreamFailure(f"malformed SSE data: {payload[:80]!r}") from None
        if type(data) is not dict:
            raise _StreamFailure(f"SSE data is not a JSON object: {payload[:80]!r}")
        if "error" in data:
            err = data["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise _StreamFailure(f"server error in stream: {msg}")
        try:
            self._feed(data, now)
        except _MALFORMED as exc:  # a field of another type (`"choices": [7]`, a text usage): this request failed
            raise _StreamFailure(f"malformed stream chunk ({exc.__class__.__name__}: {exc}): {payload[:80]!r}") \
                from None

    def _feed_native(self, data: dict[str, Any], now: float) -> None:
        meta = data.get("meta_info") or {}
        count = int(meta.get("completion_tokens", self.tokens))
        if "cached_tokens" in meta:
            self.r.cached_tokens = int(meta["cached_tokens"])
        if self.server_prompt_len and meta.get("prompt_tokens"):  # a text prompt: the server's count is the length
            self.r.prompt_len = int(meta["prompt_tokens"])
        if "spec_verify_ct" in meta:  # the last chunk that says it wins, as in bench_serving
            self._spec(meta)
        if data.get("text"):
            if self.r.ttft == 0.0:
                self.r.ttft = now - self.r.start
                self.last = now
            elif (delta := count - self.tokens) > 0:
                # A chunk of n tokens (speculative decoding, a stream interval): n gaps of 1/n of its gap each. A
                # chunk without new tokens moves no clock: bench_serving's gap runs on to the next one's.
                self.r.itl.extend([(now - self.last) / delta] * delta)
                self.last = now
        self.tokens = count
        fr = meta.get("finish_reason")
        if fr:
            self.r.finish_reason = fr.get("type") if isinstance(fr, dict) else str(fr)

    def _spec(self, said: dict[str, Any]) -> None:
        """SGLang's speculative figures of this request (meta_info, or chat's sglext.spec_tokens_details)."""
        self.r.spec_verify_ct = int(said.get("spec_verify_ct") or 0)
        self.r.spec_correct = int(said.get("spec_num_correct_drafts") or 0)
        self.r.spec_proposed = int(said.get("spec_num_proposed_drafts") or 0)

    def _feed_openai(self, data: dict[str, Any], now: float) -> None:
        choices = data.get("choices") or []
        if choices:
            choice = choices[0]
            if choice.get("text"):
                if self.r.ttft == 0.0:
                    self.r.ttft = now - self.r.start
                else:
                    self.r.itl.append(now - self.last)
                self.last = now
                self.tokens += 1
            if choice.get("finish_reason"):
                self.r.finish_reason = str(choice["finish_reason"])
        timings = data.get("timings")
        if isinstance(timings, dict):
            self.r.server_timings = {k: float(v) for k, v in timings.items() if isinstance(v, int | float)}
            if timings.get("draft_n"):  # llama.cpp's speculative decoding: drafts proposed and accepted
                self.r.spec_proposed = int(timings["draft_n"])
                self.r.spec_correct = int(timings.get("draft_n_accepted") or 0)
        usage = data.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise TypeError(f"usage is {type(usage).__name__}, not an object")
        if usage and "completion_tokens" in usage:
            self.tokens = int(usage["completion_tokens"])
            self.usage_seen = True
            if self.server_prompt_len and usage.get("prompt_tokens"):
                self.r.prompt_len = int(usage["prompt_tokens"])

    def _feed_chat(self, data: dict[str, Any], now: float) -> None:
        assert self.chat is not None
        self.chat.feed(data, now)
        spec = (data.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(spec, dict):  # SGLang's extension chunk, asked with return_spec_tokens_details
            self._spec(spec)
        details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
        if "cached_tokens" in details:  # SGLang says it under --enable-cache-report
            self.r.cached_tokens = int(details["cached_tokens"])
        for choice in data.get("choices") or ():
            if choice.get("finish_reason"):
                self.r.finish_reason = str(choice["finish_reason"])

    def _chat_finish(self, now: float) -> None:
        assert self.chat is not None
        read = self.chat.result(now)
        # bench_serving's chat client: TTFT and ITL over chunks of either channel; the server's counts where sent.
        self.r.ttft = read.ttft or 0.0
        self.r.ttfo = read.ttfo or 0.0
        self.r.itl = list(read.itl)
        self.r.reasoning_tokens = read.reasoning_tokens
        self.tokens = read.output_tokens if read.counted_by == "usage" else self.asked
        self.usage_seen = read.counted_by == "usage"
        if read.prompt_tokens:
            self.r.prompt_len = read.prompt_tokens

    def finish(self, now: float) -> None:
        if self.chat is not None:
            try:
                self._chat_finish(now)
            except _MALFORMED as exc:
                raise _StreamFailure(f"malformed usage in the stream ({exc.__class__.__name__}: {exc})") from None
        self.r.latency = now - self.r.start
        if not (self.done or self.r.finish_reason):
            raise _StreamFailure(f"stream ended after {self.tokens} tokens without a finish_reason or [DONE]")
        if self.protocol != "sglang" and not self.usage_seen:
            # bench_serving keeps the asked length when the server sends no usage.
            self.tokens = self.asked
        self.r.output_len = self.tokens
        self.r.success = True


class _StreamFailure(Exception):
    pass


class LoadRunner:
    """Runs Workloads against one server URL over a shared HTTP session."""

    def __init__(self, url: str, stop_check: Callable[[], str | None] | None = None,
                 model_hint: str | None = None, busy_check: Callable[[], str | None] | None = None,
                 progress: Callable[[str, float], None] | None = None) -> None:
        self.url = url.rstrip("/")
        self.stop_check = stop_check
        self.model_hint = model_hint
        self.model = model_hint or "default"
        self.server_info: dict[str, Any] = {}
        self._in_flight = 0
        self.max_in_flight = 0
        self.aborted: str | None = None
        self.in_flight_at_abort = 0
        self.stalled = False
        self.shape = RequestShape()
        self.last_progress = time.perf_counter()
        self.stall_timeout_s: float | None = None
        self.cache_note: str | None = None  # why the prefix cache was not flushed before the measured window
        self.busy_check = busy_check  # a stall the server's log explains (it compiles) is a pause, not a hang
        self.progress = progress  # (line, elapsed s) while the measured window runs: a long point is not silent
        self.window: tuple[float, int, int, int] | None = None  # start, requests and tokens before it, its size
        self.completed_total = 0  # every phase's completed requests and their tokens: the server's /metrics counts
        self.tokens_total = 0  # the same requests, so the two can be held against each other
        self.pauses: list[str] = []
        self.lean: transport.Pool | None = None  # the streams' own transport (None: aiohttp carries them)

    async def preflight(self, session: aiohttp.ClientSession, workload: Workload) -> None:
        """Reach the server within 5 s and learn its model id, or raise BenchError."""
        timeout = aiohttp.ClientTimeout(total=PREFLIGHT_TIMEOUT_S)
        try:
            async with session.get(self.url + "/v1/models", timeout=timeout) as resp:
                if resp.status != 200 and self.model_hint:
                    # The server answers but cannot list its models (transformers serve 5.17 answers 500
                    # there): the model we launched it with is the id, and the probe will tell if it is not.
                    self.model = self.model_hint
                    await self._identify(session)
                    return
                if resp.status != 200:
                    raise BenchError(f"{self.url}/v1/models answered HTTP {resp.status}; is this an LLM server?")
                body = await resp.json(content_type=None)
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise Unreachable(self.url, f"{exc.__class__.__name__} {exc}".rstrip()) from None
        except (json.JSONDecodeError, aiohttp.ContentTypeError) as exc:
            raise BenchError(f"{self.url}/v1/models did not answer JSON: {exc}") from None
        data = body.get("data") if isinstance(body, dict) else None
        if data:
            self.model = str(data[0].get("id", "default"))
        await self._identify(session)

    async def _identify(self, session: aiohttp.ClientSession) -> None:
        """The server's identity (/server_info), and what it tells of the shape: a server that decodes speculatively
        is asked for its speculative figures."""
        self.server_info = await self.fetch_server_info(session)
        self.shape.spec_details = bool(self.server_info.get("speculative_algorithm"))

    async def _calibrate(self, session: aiohttp.ClientSession, workload: Workload, prompt: list[int],
                         counted: int) -> None:
        """What the server's chat template adds, and how many tokens its tokenizer makes of a word: a second prompt
        of CALIBRATION_WORDS more words, as the server counts both (later prompts send n / that many words)."""
        rng = random.Random(workload.seed * 31 + 7)
        more = prompt + [rng.randrange(workload.token_low, workload.token_high) for _ in range(CALIBRATION_WORDS)]
        rec = await self._watched(self.one(session, workload, more, 4))
        per = (rec.prompt_len - counted) / CALIBRATION_WORDS if rec is not None and rec.success else 1.0
        self.shape.tokens_per_word = per if per > 0 else 1.0
        self.shape.template_tokens = max(0, round(counted - len(prompt) * self.shape.tokens_per_word))

    async def probe(self, session: aiohttp.ClientSession, workload: Workload) -> None:
        """One small request before anything is measured: fall back to a shape the server accepts, or fail
        with what it said (never thousands of failed requests)."""
        prompt = make_prompts(workload, 1, salt=2)[0][:8]
        tried: list[str] = []
        transient = 0
        # One plain prompt of a few words, whatever the shape (a shared prefix or a session is the window's).
        single = replace(workload, turns=1, prefix_len=0, trace=None, duration_s=None)
        for _ in range(PROBE_TRIES):
            rec = await self._watched(self.one(session, single, prompt, 4))
            if rec is None:  # a server that answers nothing at all (hung before the load) is a stall, not a wait
                return
            if rec.success:
                if workload.protocol == "chat" and not self.shape.template_tokens:
                    await self._calibrate(session, single, prompt, rec.prompt_len)
                return
            tried.append(f"{self.shape.describe()}: {rec.error}")
            err = rec.error.lower()
            if workload.protocol == "openai" and self.shape.token_ids and "HTTP 400" in rec.error and "prompt" in err:
                self.shape.token_ids = False  # e.g. transformers serve: "prompt must be a string"
            elif workload.protocol == "openai" and self.shape.ignore_eos and rec.error.startswith("HTTP 422"):
                self.shape.ignore_eos = False  # fields outside OpenAI's schema refused
            elif not rec.error.startswith("HTTP 4") and transient < PROBE_TRIES - 3:
                transient += 1  # a server error or a cut stream may be passing: try the same shape again
            else:
                break
        hint = " (is it an SGLang server? for an OpenAI-style one use --protocol openai)" if (
            workload.protocol == "sglang" and "HTTP 404" in tried[-1]) else ""
        raise BenchError(f"{self.url} refuses every request shape tried{hint}: " + " | ".join(tried))

    async def _watched(self, request: Coroutine[Any, Any, RequestTiming]) -> RequestTiming | None:
        """One request under the run's watch (death, stall, compile pauses) as the measured phase is watched; None
        when the watch ended it (`aborted` says why)."""
        task = asyncio.ensure_future(request)
        self.last_progress = time.perf_counter()
        watching = self.stop_check is not None or self.stall_timeout_s is not None
        watcher = asyncio.ensure_future(self._watch([task])) if watching else None
        try:
            return await task
        except asyncio.CancelledError:
            if not self.aborted:
                raise
            return None
        finally:
            if watcher:
                watcher.cancel()

    async def fetch_server_info(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        """The server's /server_info (SGLang; /get_server_info before 0.5) or /props (llama.cpp); empty when it has
        none of them."""
        for path in ("/server_info", "/get_server_info", "/props"):
            try:
                async with session.get(self.url + path, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200:
                        body = await resp.json(content_type=None)
                        if isinstance(body, dict):
                            return body
            except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
                continue
        return {}

    async def one(
        self, session: aiohttp.ClientSession, workload: Workload, prompt: Prompt, output_len: int,
        scheduled: float | None = None, encoded: tuple[str, bytes] | None = None
    ) -> RequestTiming:
        """Send one streaming request (its path and body `encoded` before the window where given) and record what
        came back, timed from `scheduled` (an open loop's send time) where given, else from now; never raises for
        server faults."""
        path, body = encoded or self.encode(workload, prompt, output_len)
        now = time.perf_counter()
        rec = RequestTiming(start=scheduled if scheduled is not None else now, prompt_len=len(prompt) if isinstance(
                                prompt, list) else len(prompt.split()),
                            asked=output_len, queued=max(0.0, now - scheduled) if scheduled is not None else 0.0)
        stream = _Stream(rec, workload.protocol, output_len)
        stream.server_prompt_len = not self.shape.token_ids or isinstance(prompt, str)
        if not self._in_flight:
            self.last_progress = now  # the stall clock runs only while a request is owed a token
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.lean is not None:
                status, text = await self._lean_one(path, body, stream, workload)
            else:
                status, text = await self._aiohttp_one(session, path, body, stream, workload)
            if status == 200:
                self._ended(stream)
            else:
                rec.error = f"HTTP {status}: {text[:200]}".replace("\n", " ")
                rec.latency = time.perf_counter() - rec.start
        except _StreamFailure as exc:
            rec.error = str(exc)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            rec.error = f"{exc.__class__.__name__}: {exc}".rstrip(": ")
        finally:
            self._in_flight -= 1
        if not rec.success and not rec.latency:
            rec.latency = time.perf_counter() - rec.start
        if rec.success:
            self.completed_total += 1
            self.tokens_total += rec.output_len
        return rec

    def encode(self, workload: Workload, prompt: Prompt, output_len: int) -> tuple[str, bytes]:
        """A request's path and JSON body as the shape the probe settled on sends it."""
        path, body = _payload(workload, prompt, output_len, self.model, self.shape)
        return path, orjson.dumps(body)

    def encode_window(self, workload: Workload, prompts: Sequence[Prompt], out_lens: list[int]
                      ) -> list[tuple[str, bytes] | None]:
        """The window's bodies, built before it starts (a 32k-token chat prompt is ~4 ms of the client's CPU, ~6%
        of a long-input window at the rehearsal's time scale), up to PREBUILT_BYTES; the rest are built when sent."""
        out: list[tuple[str, bytes] | None] = []
        size = 0
        for prompt, n in zip(prompts, out_lens, strict=True):
            built = self.encode(workload, prompt, n) if size <= PREBUILT_BYTES else None
            size += len(built[1]) if built is not None else 0
            out.append(built)
        return out

    def _ended(self, stream: _Stream) -> None:
        if stream.done:
            self.shape.done_marker = True
        elif self.shape.done_marker is None:
            self.shape.done_marker = False
        stream.finish(time.perf_counter())

    async def _lean_one(self, path: str, body: bytes, stream: _Stream, workload: Workload) -> tuple[int, str]:
        rec = stream.r
        assert self.lean is not None

        def sent() -> None:
            rec.sent = time.perf_counter()

        # The pool stamps its last read (Pool.last): the stall watch reads it, so no call per line for it here.
        return await self.lean.post(path, body, stream.feed_line, workload.request_timeout_s,
                                    workload.concurrency + STALE_RETRIES, sent)

    async def _aiohttp_one(self, session: aiohttp.ClientSession, path: str, body: bytes, stream: _Stream,
                           workload: Workload) -> tuple[int, str]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=workload.request_timeout_s)
        async with await self._post(session, self.url + path, body, timeout,
                                    workload.concurrency + STALE_RETRIES, stream.r) as resp:
            if resp.status != 200:
                return resp.status, await resp.text()
            rest = b""
            # Whole reads, split here: one await per network read rather than one per line.
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                self.last_progress = now
                rest = transport.sse_lines(rest, data, now, stream.feed_line)
            transport.sse_last(rest, time.perf_counter(), stream.feed_line)
            return resp.status, ""

    async def _post(self, session: aiohttp.ClientSession, url: str, body: bytes,
                    timeout: aiohttp.ClientTimeout, tries: int, rec: RequestTiming) -> aiohttp.ClientResponse:
        # A kept-alive connection the server has closed fails before the request is sent (llama-server closes
        # idle ones, and each after a few requests): such a request never reached the server, so it is sent again.
        # Each failure drops one stale connection from the pool, which holds at most one per request ever in
        # flight: `tries` (concurrency + a few) always reaches a fresh connection. Seen in CI: one request at
        # concurrency 8 met four stale connections in a row when three tries were allowed.
        for _ in range(tries - 1):
            try:
                return await session.post(url, data=body, headers=_JSON, timeout=timeout, trace_request_ctx=rec)
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                continue  # The broken connection is dropped from the pool; the next try may get another.
        return await session.post(url, data=body, headers=_JSON, timeout=timeout, trace_request_ctx=rec)

    async def _phase(
        self, session: aiohttp.ClientSession, workload: Workload, prompts: Sequence[Prompt],
        output_len: int | list[int], schedule: Sequence[float] = (), encoded: Sequence[tuple[str, bytes] | None] = ()
    ) -> list[RequestTiming]:
        records: list[RequestTiming | None] = [None] * len(prompts)
        # A worker takes a session and sends its turns one after another (a single-turn request is a session of one).
        turns = workload.turns
        order = iter([list(range(i, min(i + turns, len(prompts)))) for i in range(0, len(prompts), turns)])
        at: list[float] = []
        if schedule:  # open loop: each request's send time, from the phase's start
            t = time.perf_counter()
            for gap in schedule:
                t += gap
                at.append(t)

        last = at[0] - schedule[0] + workload.duration_s if at and workload.duration_s else None

        async def worker() -> None:
            for group in order:
                for i in group:
                    n = output_len[i] if isinstance(output_len, list) else output_len
                    if last is not None and at[i] > last:
                        return  # past the open loop's duration: the rest are not sent
                    if at:
                        wait = at[i] - time.perf_counter()
                        if wait > 0:
                            await asyncio.sleep(wait)
                    records[i] = await self.one(session, workload, prompts[i], n, at[i] if at else None,
                                                encoded[i] if encoded else None)

        workers = [asyncio.ensure_future(worker()) for _ in range(min(workload.concurrency, len(prompts)))]
        self.last_progress = time.perf_counter()
        watching = self.stop_check is not None or self.stall_timeout_s is not None or self.progress is not None
        watcher = asyncio.ensure_future(self._watch(workers)) if watching else None
        try:
            await asyncio.gather(*workers, return_exceptions=False)
        except asyncio.CancelledError:
            if not self.aborted:
                raise
        finally:
            if watcher:
                watcher.cancel()
        return [r for r in records if r is not None]

    async def _watch(self, workers: Sequence[asyncio.Future[Any]]) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            if self.progress is not None and self.window is not None:
                t0, done0, tokens0, total = self.window
                elapsed = time.perf_counter() - t0
                tokens = self.tokens_total - tokens0
                self.progress(f"{self.completed_total - done0} of {total} requests, {tokens / max(elapsed, 1e-9):.1f} "
                              f"output tok/s so far", elapsed)
            reason = self.stop_check() if self.stop_check else None
            if self.lean is not None:
                self.last_progress = max(self.last_progress, self.lean.last)
            # An open loop's scheduled gap, with nothing in flight, is the workload's silence, not the server's.
            quiet = time.perf_counter() - self.last_progress if self._in_flight else 0.0
            if not reason and self.stall_timeout_s is not None and quiet > self.stall_timeout_s:
                busy = self.busy_check() if self.busy_check is not None else None
                if busy:
                    # The server says it compiles: give it another stall timeout, and keep the line for the record.
                    self.pauses.append(f"no token for {quiet:.0f} s while the server compiled: {busy}")
                    self.last_progress = time.perf_counter()
                    continue
                self.stalled = True
                reason = f"stalled: no token from any of {self._in_flight} requests for {quiet:.0f} s"
            if reason:
                self.aborted = reason
                self.in_flight_at_abort = self._in_flight
                for w in workers:
                    w.cancel()
                return

    async def run(self, workload: Workload) -> BenchResult:
        """Warm up, flush the cache, then measure one closed-loop window."""
        self.stall_timeout_s = workload.stall_timeout_s
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        # The moment each body is written: the client's own delay before the server can see the request.
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_stamp_sent)
        # A server on this machine is reached directly; one elsewhere through the proxy the environment names.
        async with aiohttp.ClientSession(connector=connector, trust_env=not proxies.is_local(self.url),
                                         trace_configs=[trace]) as session:
            # https and proxied servers keep aiohttp, which speaks both; the rest stream on the lean transport.
            if self.url.startswith("http://") and proxies.proxy_for(self.url) is None:
                self.lean = transport.Pool(self.url)
            try:
                return await self._run(session, workload)
            finally:
                if self.lean is not None:
                    self.lean.close()

    async def _run(self, session: aiohttp.ClientSession, workload: Workload) -> BenchResult:
        rows = _trace_rows(workload)  # a trace that cannot be replayed is refused before the server is reached
        await self.preflight(session, workload)
        await self.probe(session, workload)
        if workload.warmup and not self.aborted:
            warm = await self._phase(
                session, workload, _prompts(workload, workload.warmup, salt=1), min(workload.output_len, 32)
            )
            if warm and not self.aborted and not any(r.success for r in warm):
                raise BenchError(f"every warmup request failed: {first_errors(warm, 1)[0]}")
            if workload.flush_cache and workload.protocol in ("sglang", "chat"):
                self.cache_note = await self._flush(session)
        self.max_in_flight = 0
        # A shared-prefix shape's prefixes are new to this run: nothing another scenario left in the cache serves it.
        nonce = random.SystemRandom().randrange(1, 2 ** 31) if workload.prefix_len or workload.turns > 1 else 0
        prompts = (trace.prompts(rows, workload.token_low, workload.token_high) if rows
                   else _prompts(workload, workload.num_prompts, nonce=nonce))
        ideal = trace.ideal_hit(rows) if rows else workload.ideal_prefix_hit(self.shape.template_tokens)
        # The server's counters around exactly the window, where a hit is asked of it: its cached and prompt tokens
        # say the hit even where its replies do not (chat without --enable-cache-report).
        counted = servermetrics.snapshot(self.url) if ideal is not None or self.shape.spec_details else None
        out_lens = [r.output_length for r in rows] if rows else output_lengths(workload, workload.num_prompts)
        encoded = self.encode_window(workload, prompts, out_lens)
        started_at = time.time()
        t0 = time.perf_counter()
        monitor = ClientMonitor().start()
        self.window = (t0, self.completed_total, self.tokens_total, len(prompts))
        gaps = trace.gaps(rows, workload.request_rate) if rows else arrival_gaps(workload, len(prompts))
        records = [] if self.aborted else await self._phase(session, workload, prompts, out_lens, gaps, encoded)
        duration = time.perf_counter() - t0
        client = monitor.stop([r.sent - r.start - r.queued for r in records if r.sent])
        metrics = compute_metrics(records, duration, t0)
        # A duration-bounded open loop sends what its duration holds: the rest were never requests.
        sent_n = len(records) if workload.duration_s and not self.aborted else workload.num_prompts
        metrics["failed"] = float(sent_n - metrics["completed"])
        if workload.duration_s:
            metrics["sent"] = float(len(records))
        if "mean_input_tokens" in metrics and records:
            # What was asked of the prompts sent (a trace's rows or a range's draws differ from input_len), beside
            # what the server counted of them.
            # A prompt set's text is as long as the server counts it (its digest holds the text itself).
            metrics["mean_input_tokens_asked"] = metrics["mean_input_tokens"] if workload.dataset else sum(
                len(p) for p in prompts[:len(records)]) / len(records)
        sent = sorted(r.sent for r in records if r.sent)
        if gaps and len(sent) > 2:
            # What was asked (the drawn gaps) beside what the client kept: a cap that throttles sends, or a client
            # too busy to send on time, is an open loop that was not held.
            drawn = gaps[1:len(sent)]
            metrics.update(offered_rate=float(workload.request_rate or 0.0), arrival_cv_asked=_cv(drawn),
                           arrival_cv=_cv([b - a for a, b in itertools.pairwise(sent)]),
                           arrival_rate_asked=len(drawn) / max(sum(drawn), 1e-9),
                           arrival_rate=(len(sent) - 1) / max(sent[-1] - sent[0], 1e-9))
        after = servermetrics.snapshot(self.url) if counted else None
        if ideal is not None:
            metrics.update(_hits(records, counted, after, ideal))
        if self.shape.spec_details:
            metrics.update(servermetrics.accept_length(counted, after))
            said = (await self.fetch_server_info(session)).get("internal_states") or [{}]
            if isinstance(said[0], dict) and isinstance(said[0].get("avg_spec_accept_length"), int | float):
                metrics["spec_accept_length_server"] = float(said[0]["avg_spec_accept_length"])
        return BenchResult(
            url=self.url,
            workload=workload,
            metrics=metrics,
            records=records,
            errors=first_errors(records) + ([f"aborted: {self.aborted}"] if self.aborted else []),
            server_info=self.server_info,
            max_in_flight=self.max_in_flight,
            started_at=started_at,
            aborted=self.aborted,
            in_flight_at_abort=self.in_flight_at_abort,
            stalled=self.stalled,
            shape=self.shape,
            client=client,
            cache_note=self.cache_note,
            pauses=list(self.pauses),
            completed_total=self.completed_total,
            tokens_total=self.tokens_total,
        )

    async def _flush(self, session: aiohttp.ClientSession) -> str | None:
        """Empty the prefix cache; the reason it stayed warm, if it did."""
        said = ""
        for attempt in range(FLUSH_TRIES):
            try:
                async with session.post(self.url + "/flush_cache", timeout=aiohttp.ClientTimeout(total=60)) as resp:
                    text = (await resp.text())[:120].replace("\n", " ").strip()
                    if resp.status == 200:
                        return None
                    if resp.status == 404:
                        return "no /flush_cache here (HTTP 404): measured with whatever the server's cache holds"
                    said = f"HTTP {resp.status}: {text}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                said = f"{exc.__class__.__name__}: {exc}".rstrip(": ")
            # SGLang refuses while requests still run (the warmup's last ones may): ask again shortly.
            if attempt < FLUSH_TRIES - 1:
                await asyncio.sleep(1.0)
        return f"/flush_cache failed {FLUSH_TRIES} times ({said}): measured with a warm prefix cache"


async def _stamp_sent(session: aiohttp.ClientSession, ctx: Any, params: aiohttp.TraceRequestChunkSentParams) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestTiming) and not rec.sent:
        rec.sent = time.perf_counter()


def run_workload(url: str, workload: Workload, stop_check: Callable[[], str | None] | None = None,
                 model_hint: str | None = None, busy_check: Callable[[], str | None] | None = None,
                 progress: Callable[[str, float], None] | None = None) -> BenchResult:
    """Run one Workload against url from synchronous code (the CLI and the pytest plugin)."""
    with _COLLECTOR, asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(LoadRunner(url, stop_check, model_hint, busy_check, progress).run(workload))


class _QuietCollector:
    """The garbage collector held quiet while any load of this process runs.

    A full collection of thousands of live streams pauses the client for tens of ms mid-run: while measuring only the
    young generations are collected, and what lived before the load is frozen for it (never scanned). Frozen rather
    than collected first: a full collection before each load cost ~50 ms in a process that has held many runs' results
    (a test worker's heap). The first load in freezes and lifts the full collection's threshold, the last one out hands
    both back, so loads that overlap in threads of one process end in any order without leaving it lifted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads = 0
        self._threshold = gc.get_threshold()

    def __enter__(self) -> None:
        with self._lock:
            if self._loads == 0:
                gc.freeze()
                self._threshold = gc.get_threshold()
                gc.set_threshold(self._threshold[0], self._threshold[1], 1_000_000)
            self._loads += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._loads -= 1
            if self._loads == 0:
                gc.set_threshold(*self._threshold)
                gc.unfreeze()


_COLLECTOR = _QuietCollector()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (it halves the client's CPU per token at one stream), else
    asyncio's; GLM5_EVENT_LOOP=asyncio asks for asyncio's (another value: ValueError saying so)."""
    if event_loop(os.environ) == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
