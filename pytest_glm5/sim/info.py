"""The emulator's endpoints that describe and steer it rather than generate: health, model and server info, the
model list, the prefix cache's flush, Prometheus metrics, and its own `/sim/*` (each request's ground-truth times,
the clock a point runs on)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from .. import __version__
from ..spec.sglang import VERSION as SGLANG_VERSION
from ..spec.sglang import gpus_needed

if TYPE_CHECKING:
    from .app import SimServer


async def handle_sim_requests(request: web.Request) -> web.Response:
    """Not SGLang's: the emulator's own times of each finished request (seconds on its perf_counter): received (its
    handler started), first and last token written to the stream, and the scheduler's own moments; the ground truth
    a client's TTFT, ITL and E2E are checked against (native /generate).
    `?clear=1` forgets them after answering."""
    srv: SimServer = request.app["srv"]
    body = [{"received": r.received_at, "first_token": r.sent_first_at, "last_token": r.sent_last_at,
             "scheduled": r.arrival, "model_first_token": r.first_token_at, "model_last_token": r.finished_at,
             "output_tokens": r.generated, "prompt_tokens": r.prompt_len}
            for r in srv.finished if r.sent_last_at]
    if request.query.get("clear"):
        srv.finished.clear()
    return web.json_response(body)


async def handle_sim_clock(request: web.Request) -> web.Response:
    """Not SGLang's: POST `{"factor": 4}` runs the model's clock that many times slower than the launch's time scale
    (1 restores it), so a point whose requests cost the host more CPU than the launch's clock leaves it is measured
    at a clock the emulator keeps (the plugin converts its figures back: load/clock.py). The launch's own time scale,
    the one /server_info reports and the baselines are keyed by, never changes."""
    srv: SimServer = request.app["srv"]
    try:
        factor = float((await request.json())["factor"])
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'POST {"factor": F}, F a number from 1 to 64'}, status=400)
    if not 1.0 <= factor <= 64.0:
        return web.json_response({"error": f"factor {factor:g} is outside 1 to 64"}, status=400)
    srv.engine.scale = srv.scale * factor
    return web.json_response({"time_scale": srv.scale, "factor": factor})


async def handle_health(request: web.Request) -> web.Response:
    """/health and /health_generate: 503 until warmup is done, then 200."""
    srv: SimServer = request.app["srv"]
    return web.Response(status=200 if srv.status == "Up" else 503)


async def handle_model_info(request: web.Request) -> web.Response:
    """GET /model_info."""
    srv: SimServer = request.app["srv"]
    a = srv.args
    return web.json_response({
        "model_path": a["model_path"], "tokenizer_path": a.get("tokenizer_path") or a["model_path"],
        "served_model_name": a["served_model_name"], "is_generation": True, "preferred_sampling_params": None,
        "weight_version": "default", "load_format": a.get("load_format", "auto"),
        "reasoning_parser": a.get("reasoning_parser"),
        "tool_call_parser": None, "disaggregation_mode": "null", "has_image_understanding": False,
        "has_audio_understanding": False, "model_type": srv.model.model_type,
        "architectures": [srv.model.architecture]})


async def handle_server_info(request: web.Request) -> web.Response:
    """GET /server_info: resolved args, launch command, version, and the emulator's own settings."""
    srv: SimServer = request.app["srv"]
    s = srv.scheduler
    body = dict(srv.args)
    body.update({
        "launch_command": srv.launch_command,
        "version": SGLANG_VERSION,
        "startup_time": srv.startup_time,
        "status": srv.status,
        "internal_states": [{"last_gen_throughput": srv.gen_throughput,
                             "avg_spec_accept_length": (s.spec_flushed_tokens / s.spec_flushed_verifies
                                                        if srv.spec is not None and s.spec_flushed_verifies
                                                        else None)}],
        "max_total_num_tokens": srv.model.kv_capacity_tokens,
        "gpu": srv.model.gpu,
        "sim": {
            "emulator": f"pytest-glm5 {__version__}",
            "profile": srv.model.name,
            "time_scale": srv.scale,
            "slowdown": srv.ns.sim_slowdown,
            "prefill_slowdown": srv.ns.sim_prefill_slowdown,
            "reasoning_scale": srv.ns.sim_reasoning_scale,
            "noise_cv": srv.model.noise_cv,
            "launch_cv": srv.model.launch_cv,
            "launch_factor": round(srv.model.launch_factor, 6),
            "seed": srv.ns.sim_seed,
            "rules": list(srv.model.applied_rules),
            "gpus": gpus_needed(srv.args).count,
            "devices": srv.devices,
        },
    })
    return web.json_response(body)


async def handle_models(request: web.Request) -> web.Response:
    """GET /v1/models."""
    srv: SimServer = request.app["srv"]
    name = srv.args["served_model_name"]
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "created": int(srv.started), "owned_by": "sglang", "root": name,
         "max_model_len": srv.model.context_length}]})


async def handle_flush(request: web.Request) -> web.Response:
    """/flush_cache: 200 when idle, 400 while requests run (as SGLang after its timeout)."""
    srv: SimServer = request.app["srv"]
    if srv.scheduler.running or srv.scheduler.waiting:
        return web.Response(status=400, text="Cache not flushed. Please check the server log for details.")
    if srv.scheduler.cache is not None:
        srv.scheduler.cache.flush()
    srv.scheduler.flush_spec()
    return web.Response(text="Cache flushed.\nPlease check backend logs for more details. "
                             "(When there are running or waiting requests, the operation will not be performed.)\n")


async def handle_metrics(request: web.Request) -> web.Response:
    """Prometheus text with SGLang's metric names, plus sglang:sim_* about the emulator's own pacing."""
    srv: SimServer = request.app["srv"]
    s, e = srv.scheduler, srv.engine
    label = f'{{model_name="{srv.args["served_model_name"]}"}}'
    rows = [
        ("sglang:prompt_tokens_total", "counter", s.prompt_tokens_total),
        ("sglang:generation_tokens_total", "counter", s.generation_tokens_total),
        ("sglang:cached_tokens_total", "counter", s.cached_tokens_total),
        ("sglang:num_requests_total", "counter", s.requests_total),
        ("sglang:num_running_reqs", "gauge", len(s.running)),
        ("sglang:num_queue_reqs", "gauge", len(s.waiting)),
        ("sglang:gen_throughput", "gauge", srv.gen_throughput),
        ("sglang:token_usage", "gauge", s.kv_used / max(1, srv.model.kv_capacity_tokens)),
        ("sglang:max_total_num_tokens", "gauge", srv.model.kv_capacity_tokens),
        ("sglang:sim_max_running_reqs", "gauge", s.max_running_seen),
        ("sglang:sim_max_in_flight_requests", "gauge", srv.max_in_flight),
        ("sglang:sim_lag_seconds", "gauge", e.lag_s),
        ("sglang:sim_max_lag_seconds", "gauge", e.max_lag_s),
        ("sglang:sim_behind_seconds_total", "counter", e.behind_s_total),
        ("sglang:sim_busy_seconds_total", "counter", e.busy_s_total),
        ("sglang:sim_coalesce_factor", "gauge", e.coalesce),
    ]
    if srv.spec is not None:
        rows += [("sglang:spec_accept_length", "gauge", s.spec_last_length),
                 ("sglang:spec_verify_calls_total", "counter", s.spec_verify_total)]
    lines = []
    for name, kind, value in rows:
        lines += [f"# TYPE {name} {kind}", f"{name}{label} {float(value)}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
