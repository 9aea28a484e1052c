"""The emulator's life as SGLang's: load weights (no listener yet), start HTTP, run one warmup request through the
scheduler, then `/ready` turns 200 and "The server is fired up and ready to roll!" is logged; serve until SIGTERM or
a modelled crash. `main` is `glm5 sim` and `python -m pytest_glm5.sim`."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import os
import signal
import sys
import time

from aiohttp import web

from .. import __version__
from ..spec.sglang import gpus_needed
from .app import BACKLOG, SimServer, build_app, say


async def _load(srv: SimServer) -> None:
    m, a = srv.model, srv.args
    say(f"server_args=ServerArgs(model_path='{a['model_path']}', tp_size={a['tp_size']}, "
         f"ep_size={a['ep_size']}, pp_size={a['pp_size']}, moe_runner_backend='{a['moe_runner_backend']}', "
         f"quantization={a['quantization']!r}, max_running_requests={a['max_running_requests']}, "
         f"mem_fraction_static={a['mem_fraction_static']}, port={a['port']}, ...)")
    say(f"Emulated by pytest-glm5 {__version__}: profile {m.name}, time scale {srv.scale}"
         + (f", rules: {'; '.join(m.applied_rules)}" if m.applied_rules else ""))
    total = m.load_s * srv.scale
    shards = 20
    say(f"Load weight begin. avail mem={m.gpu.get('memory_gb', 0) - 1.2:.2f} GB", 0)
    for i in range(1, shards + 1):
        await asyncio.sleep(total / shards)
        say(f"Loading safetensors checkpoint shards: {100 * i // shards:3d}% Completed | {i}/{shards}", 0)
    used = float(m.gpu.get("weights_gb_per_gpu", 0.0))
    say(f"Load weight end. type={m.architecture}, dtype=torch.bfloat16, "
         f"avail mem={m.gpu.get('memory_gb', 0) - used:.2f} GB, mem usage={used:.2f} GB.", 0)
    say(f"KV Cache is allocated. #tokens: {m.kv_capacity_tokens}", 0)
    say(f"max_total_num_tokens={m.kv_capacity_tokens}, max_prefill_tokens={m.max_prefill_tokens}, "
         f"max_running_requests={m.max_running_requests}, context_len={m.context_length}", 0)


async def _warmup(srv: SimServer) -> None:
    say("Start of warmup: POST /generate max_new_tokens=8")
    await asyncio.sleep(srv.model.warmup_s * srv.scale)
    failure = srv.model.failure
    if failure and failure.phase == "warmup":
        srv.fail(failure.kind, failure.exit_code)
    req = srv.new_request(4, 8, True)
    await srv.wait_finished(req)
    srv.in_flight -= 1
    srv.status = "Up"
    srv.startup_time = time.time() - srv.started
    # What exists after warmup lives as long as the server: keep it out of every later collection,
    # and spare the model's clock the full collections thousands of streams would trigger.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000_000)
    say("End of warmup")
    say("The server is fired up and ready to roll!")


async def serve(srv: SimServer) -> int:
    """Load, listen, warm up, then serve until SIGTERM/SIGINT or a modelled crash; return the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine_task = asyncio.ensure_future(srv.engine.run())
    # SGLang stops at once on SIGTERM while it loads weights: the load must not hold the signal back.
    loading = asyncio.ensure_future(_load(srv))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([loading, stopping], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        loading.cancel()
        engine_task.cancel()
        say("SIGTERM received during model load. Shutting down...")
        return 0
    stopping.cancel()
    # On SIGTERM, streams still open get 5 s to finish (SGLang drains too), not aiohttp's default 60 s.
    runner = web.AppRunner(build_app(srv), access_log=None, handle_signals=False, shutdown_timeout=5.0)
    await runner.setup()
    host, port = srv.args["host"], srv.args["port"]
    try:
        # uvicorn's backlog, which SGLang serves with: at aiohttp's 128, a burst of 256 connects met while the loop
        # was busy lost SYNs, and those requests came a whole retransmit (1 s) later.
        await web.TCPSite(runner, host, port, reuse_address=True, backlog=BACKLOG).start()
    except OSError as exc:
        say(f"ERROR: [Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): "
             f"{exc.strerror}")
        return 1
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    warm = asyncio.ensure_future(_warmup(srv))
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([engine_task, stopper], return_when=asyncio.FIRST_COMPLETED)
    warm.cancel()
    if srv.engine.crash:
        failure = srv.model.failure
        srv.fail(srv.engine.crash, failure.exit_code if failure else 1)
    say("SIGTERM received. signum=15, frame=None. Draining requests and shutting down...")
    srv.status = "Shutting down"
    engine_task.cancel()
    await runner.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`glm5 sim ARGS` / `python -m pytest_glm5.sim ARGS`."""
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    srv = SimServer(list(sys.argv[1:] if argv is None else argv))
    _set_parent_death_signal()
    faulthandler.register(signal.SIGUSR1, file=sys.stdout, all_threads=True)
    if srv.ns.sim_require_model_path and not os.path.exists(srv.args["model_path"]):
        # SGLang's own words when the weights are not there (transformers' config loading).
        print(f"OSError: Can't load the configuration of '{srv.args['model_path']}'. If you were trying to load it "
              "from 'https://huggingface.co/models', make sure you don't have a local directory with the same "
              f"name. Otherwise, make sure '{srv.args['model_path']}' is the correct path to a directory "
              "containing a config.json file", flush=True)
        return 1
    have, need = len(srv.devices), gpus_needed(srv.args)
    if need.count > have:
        # What torch says when a rank's device does not exist (SGLang starts one process per GPU).
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        print(f"RuntimeError: CUDA error: invalid device ordinal (this config needs {need.count} GPUs: {need.why}; "
              f"the {srv.model.name} profile has {srv.model.gpu.get('count', 1)}"
              + (f", CUDA_VISIBLE_DEVICES={shown} shows {have}" if shown is not None else "") + ")", flush=True)
        return 1
    return asyncio.run(serve(srv))


def _set_parent_death_signal() -> None:
    """Die with the parent that launched us (Linux), like a server under a killed pytest should."""
    if os.environ.get("GLM5_PDEATHSIG") != "1" or not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
