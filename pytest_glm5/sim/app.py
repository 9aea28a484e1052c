"""The emulator's HTTP server: the modelled server's state (`SimServer`) and SGLang 0.5.23's generation endpoints
and their shapes, on aiohttp; the rest of its routes are sim/info.py's, its lifecycle sim/lifecycle.py's."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import shlex
import sys
import time
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from aiohttp import web

from . import sse
from .answers import Answers
from .args import parse_args, sglang_args
from .chat import Reasoning, handle_chat
from .engine import AsyncEngine, Scheduler, SimRequest, Step
from .info import (
    handle_flush,
    handle_health,
    handle_metrics,
    handle_model_info,
    handle_models,
    handle_server_info,
    handle_sim_clock,
    handle_sim_requests,
)
from .prefix import PrefixCache, blocks_of
from .profile import Model, ProfileError, load_profile, resolve
from .speculative import Speculative, resolve_speculative, rng_of, spec_meta

OPENAI_COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                            "stop", "seed", "logprobs", "echo", "presence_penalty", "frequency_penalty", "best_of",
                            "logit_bias", "suffix", "user"}
DECODE_LOG_INTERVAL = 40
BACKLOG = 2048  # pending connections the listening socket holds: uvicorn's default, as SGLang serves
log = logging.getLogger("sglang.sim")


def _ts() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def say(msg: str, rank: int | None = None) -> None:
    """One log line as SGLang writes it: `[time TPn] message`."""
    tag = f"{_ts()} TP{rank}" if rank is not None else _ts()
    print(f"[{tag}] {msg}", flush=True)


def resolve_args(args: dict[str, Any], model: Model) -> dict[str, Any]:
    """What SGLang's resolution would make of the args on the profile's hardware (sglang.md 4.3)."""
    out = dict(args)
    cc = str(model.gpu.get("compute_capability", ""))
    if out.get("moe_runner_backend") == "auto" and out.get("quantization") == "modelopt_fp4" and cc in ("12.0", "11.0"):
        out["moe_runner_backend"] = "flashinfer_cutlass"
    if out.get("max_running_requests") is None:
        out["max_running_requests"] = model.max_running_requests
    if out.get("mem_fraction_static") is None:
        out["mem_fraction_static"] = 0.85
    out["served_model_name"] = out.get("served_model_name") or out["model_path"]
    out["context_length"] = model.context_length
    return out


def visible_devices(count: int, cuda_visible: str | None) -> list[int]:
    """The profile's GPUs this process sees, as CUDA reads CUDA_VISIBLE_DEVICES: indices in the given order, up
    to the first entry that names no device (CUDA ignores the rest)."""
    if cuda_visible is None:
        return list(range(count))
    out: list[int] = []
    for entry in cuda_visible.split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= count or int(entry) in out:
            break
        out.append(int(entry))
    return out


class SimServer:
    """State shared by the handlers: the args, the model, the engine and the counters."""

    def __init__(self, argv: list[str]) -> None:
        ns = parse_args(argv)
        self.ns = ns
        self.raw_args = sglang_args(ns)
        try:
            self.profile = load_profile(ns.sim_profile)
            self.model = resolve(self.profile, self.raw_args, slowdown=ns.sim_slowdown,
                                 prefill_slowdown=ns.sim_prefill_slowdown,
                                 noise_cv=ns.sim_step_noise, startup_s=ns.sim_startup_s, warmup_s=ns.sim_warmup_s)
        except ProfileError as exc:
            print(f"sglang serve: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        self.args = resolve_args(self.raw_args, self.model)
        self.spec = self._speculative(ns)
        self.devices = visible_devices(int(self.model.gpu.get("count", 1)), os.environ.get("CUDA_VISIBLE_DEVICES"))
        # One speed factor per launch (median 1): what differs between two launches of the same server.
        launch_rng = random.Random(ns.sim_seed) if ns.sim_seed is not None else random.SystemRandom()
        cv = self.model.launch_cv if ns.sim_noise is None else ns.sim_noise
        factor = math.exp(cv * launch_rng.gauss(0.0, 1.0)) if cv > 0 else 1.0
        # Rules may match resolved values (e.g. the MoE backend that auto picked).
        self.model = resolve(self.profile, self.args, slowdown=ns.sim_slowdown,
                             prefill_slowdown=ns.sim_prefill_slowdown, noise_cv=ns.sim_step_noise,
                             startup_s=ns.sim_startup_s, warmup_s=ns.sim_warmup_s, launch_cv=cv, launch_factor=factor)
        self.scale = ns.sim_time_scale
        seed = ns.sim_seed if ns.sim_seed is not None else 0
        # SGLang's radix cache holds prompt prefixes in the KV pool unless --disable-radix-cache.
        off = self.args.get("disable_radix_cache") or ns.sim_prefix_cache_broken
        cache = None if off else PrefixCache(self.model.kv_capacity_tokens)
        self.scheduler = Scheduler(self.model, seed=seed, cache=cache, spec=self.spec)
        self.engine = AsyncEngine(self.scheduler, self.scale, on_step=self._on_step,
                                  max_wakeups_per_s=ns.sim_max_chunk_rate)
        self.engine.hang_after_tokens = ns.sim_hang_after_tokens
        self.engine.jit_pause_s = ns.sim_jit_pause_s
        self.fault_rng = random.Random(seed + 7)
        accuracy = float(self.profile.get("answers", {}).get("accuracy", 0.9))
        self.answers = Answers(seed=seed, accuracy=accuracy, garbage=ns.sim_garbage, garbage_late=ns.sim_garbage_late,
                               nondeterminism=ns.sim_nondeterminism, changed_from=ns.sim_changed_from,
                               off_by_one=ns.sim_off_by_one, eos_per_token=self.model.eos_per_token)
        self.faults: dict[str, float] = dict(ns.sim_fault)
        self.reasoning = Reasoning(self.profile, ns.sim_reasoning_scale)
        self.status = "Starting"
        self.started = time.time()
        self.startup_time = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._steps = 0
        self._log_tokens = 0
        self._log_t = time.perf_counter()
        self.gen_throughput = 0.0
        self.finished: deque[SimRequest] = deque(maxlen=100_000)  # for /sim/requests
        self.launch_command = "sglang serve " + shlex.join(argv)

    def _speculative(self, ns: Any) -> Speculative | None:
        """The launch's speculative decoding, resolved as SGLang resolves its flags (exit 2 where it refuses)."""
        try:
            spec = resolve_speculative(self.profile, self.args, accept_drop=ns.sim_accept_drop,
                                       draft_slowdown=ns.sim_draft_slowdown, lossy=ns.sim_lossy_verify)
        except ValueError as exc:
            print(f"sglang serve: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        if spec is None:
            return None
        asked = self.args.get("speculative_num_draft_tokens")
        if asked is not None and asked != spec.draft_tokens:
            log.warning("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                        "speculative_eagle_topk == 1")
        self.args.update(speculative_algorithm="EAGLE", speculative_num_steps=spec.steps,
                         speculative_eagle_topk=spec.topk, speculative_num_draft_tokens=spec.draft_tokens)
        return spec

    # -- logging like SGLang's scheduler -------------------------------------------------------
    def _on_step(self, step: Step, now: float) -> None:
        self.finished.extend(r for r in step.batch if r.finished and r.finished_at == now)
        if step.kind == "prefill":
            return
        self._steps += 1
        if self._steps % DECODE_LOG_INTERVAL:
            return
        s = self.scheduler
        elapsed = max(now - self._log_t, 1e-9)
        self.gen_throughput = (s.generation_tokens_total - self._log_tokens) / elapsed
        self._log_tokens, self._log_t = s.generation_tokens_total, now
        usage = s.kv_used / max(1, self.model.kv_capacity_tokens)
        say(f"Decode batch, #running-req: {len(s.running)}, #token: {s.kv_used}, token usage: {usage:.2f}, "
             f"cuda graph: {not self.args.get('disable_cuda_graph', False)}, "
             f"gen throughput (token/s): {self.gen_throughput:.2f}, #queue-req: {len(s.waiting)}", 0)

    def fail(self, kind: str, exit_code: int) -> None:
        """Die the way the profile says this config dies: its log lines, then the exit code."""
        for line in self.model.failure_logs.get(kind, [f"[{{ts}}] fatal: {kind}"]):
            print(line.replace("{ts}", _ts()), flush=True)
        sys.stdout.flush()
        os._exit(exit_code)

    # -- request plumbing ------------------------------------------------------------------------
    def fault(self) -> str | None:
        for kind, p in self.faults.items():
            if p and self.fault_rng.random() < p:
                return kind
        return None

    def new_request(self, prompt_len: int, max_new: int, ignore_eos: bool, text: str | None = None,
                    stop_at: int | None = None, prompt: Sequence[int | str] = ()) -> SimRequest:
        """A request admitted to the scheduler; a text prompt gets the emulated model's reply (sim.answers), which
        ends where the reply does unless EOS is ignored; `stop_at` where the caller drew its end (chat's thinking)."""
        words = None
        if text is not None:
            words = self.answers.reply(text, max_new, ignore_eos)
        if stop_at is None:
            stop_at = len(words) if words else self.scheduler.stop_point(max_new, ignore_eos)
        req = SimRequest(rid=uuid.uuid4().hex, prompt_len=prompt_len, max_new_tokens=max_new, stop_at=stop_at,
                         words=words, blocks=blocks_of(prompt) if self.scheduler.cache is not None else ())
        if self.spec is not None:
            said = text if text is not None else prompt
            req.accept_p, req.spec_rng = self.spec.chance(said), rng_of(said)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.engine.submit(req)
        return req

    async def wait_tokens(self, req: SimRequest, have: int, interval: int) -> None:
        """Wait until req has `interval` more tokens than `have`, or finished.

        As SGLang's OutputStreamer does, the first token goes out at once whatever the interval.
        """
        loop = asyncio.get_running_loop()
        if have == 0:
            interval = 1
        while not req.finished and req.generated - have < interval:
            req.waiter = loop.create_future()
            await req.waiter

    async def wait_finished(self, req: SimRequest) -> None:
        """Wait until req has its last token."""
        loop = asyncio.get_running_loop()
        while not req.finished:
            req.waiter = loop.create_future()
            await req.waiter


def _prompt_len(srv: SimServer, body: dict[str, Any], key_ids: str, key_text: str) -> int | web.Response:
    ids = body.get(key_ids)
    if isinstance(ids, list) and ids and all(type(t) is int for t in ids):
        if min(ids) < 0 or max(ids) >= srv.model.vocab_size:  # one pass each: this runs for every request
            bad = next(t for t in ids if not 0 <= t < srv.model.vocab_size)
            return sse.error(400, f"token id {bad} is out of vocabulary range [0, {srv.model.vocab_size})")
        n = len(ids)
    elif isinstance(body.get(key_text), str) and body[key_text]:
        n = max(1, len(body[key_text].split()))  # The emulator's tokenizer: one token per word.
    else:
        return sse.error(400, f"Either {key_text} or {key_ids} should be provided.")
    if n >= srv.model.context_length:
        return sse.error(400, f"The input ({n} tokens) is longer than the model's context length "
                           f"({srv.model.context_length} tokens).")
    return n


def _finish_native(req: SimRequest) -> dict[str, Any] | None:
    if not req.finished:
        return None
    if req.finish_reason == "length":
        return {"type": "length", "length": req.max_new_tokens}
    return {"type": "stop", "matched": 2}


_ARRIVALS: dict[int, float] = {}  # protocol id -> when its current request's first bytes were read
_BUSY: set[int] = set()  # protocols whose request is being handled


def _stamp_arrivals() -> None:
    """Stamp each connection's first bytes of a request as they are read: a handler starts later when many requests
    arrive at once (the loop runs earlier handlers first), and that queueing is the server's latency too, which a
    client's TTFT includes. aiohttp has no such timestamp, so its protocol's data_received is wrapped."""
    from aiohttp.web_protocol import RequestHandler

    original = RequestHandler.data_received
    if getattr(original, "_glm5", False):
        return

    def stamped(self: Any, data: bytes) -> None:
        if id(self) not in _BUSY:  # bytes while a request is handled are its body, not a new request
            _ARRIVALS.setdefault(id(self), time.perf_counter())
        original(self, data)

    stamped._glm5 = True  # type: ignore[attr-defined]
    RequestHandler.data_received = stamped  # type: ignore[method-assign]


@web.middleware
async def _arrival(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every request takes its connection's stamp (else now), so the next request on it is stamped anew."""
    key = id(request.protocol)
    at = _ARRIVALS.pop(key, None)
    request["arrival"] = at if at is not None else time.perf_counter()
    _BUSY.add(key)
    try:
        response: web.StreamResponse = await handler(request)
    finally:
        _BUSY.discard(key)
        _ARRIVALS.pop(key, None)
    return response


@sse.posted
async def handle_generate(request: web.Request, body: dict[str, Any], received: float) -> web.StreamResponse:
    """SGLang's native POST /generate: cumulative text and meta_info per chunk, then [DONE]."""
    srv: SimServer = request.app["srv"]
    plen = _prompt_len(srv, body, "input_ids", "text")
    if isinstance(plen, web.Response):
        return plen
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        return sse.error(400, "sampling_params must be a JSON object")
    max_new = sse.max_new(sp.get("max_new_tokens"), 128, plen, srv.model.context_length)
    if isinstance(max_new, web.Response):
        return max_new
    interval = int(sp.get("stream_interval") or srv.args.get("stream_interval") or 1)
    fault = srv.fault()
    if fault == "http500":
        return sse.error(500, "Internal server error (injected by --sim-fault)")
    text = body.get("text") if isinstance(body.get("text"), str) and body.get("input_ids") is None else None
    ids = body.get("input_ids")
    req = srv.new_request(plen, max_new, bool(sp.get("ignore_eos", False)), text,
                          prompt=ids if isinstance(ids, list) else str(body.get("text") or "").split())
    req.received_at = received
    t0 = time.perf_counter()
    try:
        if not body.get("stream"):
            await srv.wait_finished(req)
            req.sent_first_at = req.sent_last_at = time.perf_counter()
            return web.json_response(_native_obj(req, plen, t0, srv.spec))
        resp, last = await sse.stream_tokens(request, srv, req, fault, interval,
                                          lambda sent, n: [_native_obj(req, plen, t0, srv.spec)], stamp=True)
        if last is not None:
            await resp.write_eof(last + sse.DONE)
        return resp
    finally:
        req.aborted = not req.finished
        srv.in_flight -= 1


def _native_obj(req: SimRequest, plen: int, t0: float, spec: Speculative | None = None) -> dict[str, Any]:
    ids, text = sse.pieces(req, 0, req.generated)
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": _finish_native(req),
        "prompt_tokens": plen,
        "completion_tokens": req.generated,
        "cached_tokens": req.cached,
        "weight_version": "default",
    }
    if spec is not None:
        meta.update(spec_meta(req, spec.draft_tokens))
    if req.finished:
        meta["e2e_latency"] = time.perf_counter() - t0
    return {"text": text, "output_ids": ids, "meta_info": meta}


@sse.posted
async def handle_completions(request: web.Request, body: dict[str, Any], received: float) -> web.StreamResponse:
    """OpenAI POST /v1/completions with SGLang's extras (ignore_eos) and stream_options.include_usage."""
    srv: SimServer = request.app["srv"]
    prompt = body.get("prompt")
    strict = srv.ns.sim_openai_strict
    if strict and not isinstance(prompt, str):
        return sse.error(400, "prompt must be a string")
    extra = sorted(set(body) - OPENAI_COMPLETION_FIELDS)
    if strict and extra:
        return web.json_response({"detail": [{"type": "extra_forbidden", "loc": ["body", k],
                                              "msg": "Extra inputs are not permitted"} for k in extra]}, status=422)
    plen = _prompt_len(srv, {"ids": prompt, "text": prompt}, "ids", "text")
    if isinstance(plen, web.Response):
        return plen
    max_new = sse.max_new(body.get("max_tokens") or None, 16, plen, srv.model.context_length, "max_tokens")
    if isinstance(max_new, web.Response):
        return max_new
    include_usage = bool((body.get("stream_options") or {}).get("include_usage")) or bool(
        srv.args.get("stream_response_default_include_usage"))
    fault = srv.fault()
    if fault == "http500":
        return sse.error(500, "Internal server error (injected by --sim-fault)")
    req = srv.new_request(plen, max_new, bool(body.get("ignore_eos", False)), prompt if isinstance(prompt, str)
                          else None, prompt=prompt.split() if isinstance(prompt, str) else list(prompt or []))
    model = srv.args["served_model_name"]
    cid = "cmpl-" + req.rid
    created = int(time.time())
    interval = int(srv.args.get("stream_interval") or 1)
    try:
        if not body.get("stream"):
            await srv.wait_finished(req)
            text = sse.pieces(req, 0, req.generated)[1]
            return web.json_response({
                "id": cid, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": req.finish_reason}],
                "usage": sse.usage(plen, req.generated)})
        def chunk(sent: int, n: int) -> list[dict[str, Any]]:
            text = sse.pieces(req, sent, n)[1]
            return [{"id": cid, "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": 0, "text": text, "logprobs": None,
                                  "finish_reason": req.finish_reason if req.finished else None}],
                     "usage": None}]

        resp, last = await sse.stream_tokens(request, srv, req, fault, interval, chunk, stamp=False)
        if last is None:
            return resp
        if include_usage:
            last += sse.event({"id": cid, "object": "text_completion", "created": created, "model": model,
                               "choices": [], "usage": sse.usage(plen, req.generated)})
        await resp.write_eof(last if strict else last + sse.DONE)
        return resp
    finally:
        req.aborted = not req.finished
        srv.in_flight -= 1


def build_app(srv: SimServer) -> web.Application:
    """The aiohttp application with SGLang's routes."""
    _stamp_arrivals()
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_arrival])
    app["srv"] = srv
    app.router.add_get("/health", handle_health)
    app.router.add_get("/health_generate", handle_health)
    app.router.add_get("/ready", handle_health)
    app.router.add_get("/model_info", handle_model_info)
    app.router.add_get("/get_model_info", handle_model_info)
    app.router.add_get("/server_info", handle_server_info)
    app.router.add_get("/get_server_info", handle_server_info)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_post("/generate", handle_generate)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_route("*", "/flush_cache", handle_flush)
    app.router.add_get("/sim/requests", handle_sim_requests)
    app.router.add_post("/sim/clock", handle_sim_clock)
    if srv.args.get("enable_metrics"):
        app.router.add_get("/metrics", handle_metrics)
    return app
