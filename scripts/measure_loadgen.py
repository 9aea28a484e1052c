"""Measure the load generator itself: fidelity against the emulator's own count, and its CPU cost.

    python scripts/measure_loadgen.py [--scale 0.1]

Fidelity: at concurrency 1, 64 and 512 against glm5-sm120, `glm5 bench`'s output_throughput is
compared with the emulator's own generated tokens over its own busy time (`sglang:sim_busy_seconds_total`).
Client cost: CPU seconds of this process per 1,000 streamed tokens at concurrency 256 against the tiny profile.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from pytest_glm5.loadgen import Workload, run_workload


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def _start(profile: str, scale: float, log: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    argv = [sys.executable, "-m", "pytest_glm5.sim", "--model-path", "/models/GLM-5-NVFP4", "--port", str(port),
            "--sim-profile", profile, "--sim-time-scale", str(scale), "--sim-startup-s", "0", "--sim-noise", "0",
            "--enable-metrics"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/ready", timeout=1) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"emulator did not start; see {log}")


def main() -> int:
    """Print the fidelity table and the client cost."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.1, help="time scale of the glm5-sm120 emulator")
    ns = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="glm5-measure-")
    proc, url = _start("glm5-sm120", ns.scale, os.path.join(tmp, "glm5.log"))
    try:
        print(f"fidelity (glm5-sm120 at time scale {ns.scale}, 128/128 tokens):")
        print("  conc  bench out tok/s  emulator out tok/s  diff")
        for c, n in ((1, 4), (64, 192), (512, 1024)):
            tok0 = _metric(url, "sglang:generation_tokens_total")
            busy0 = _metric(url, "sglang:sim_busy_seconds_total")
            r = run_workload(url, Workload(concurrency=c, num_prompts=n, warmup=0))
            time.sleep(0.2)
            tokens = _metric(url, "sglang:generation_tokens_total") - tok0
            busy = _metric(url, "sglang:sim_busy_seconds_total") - busy0
            own = tokens / busy
            bench = r.metrics["output_throughput"]
            print(f"  {c:4d}  {bench:15.2f}  {own:18.2f}  {100 * (bench - own) / own:+.2f}%")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    proc, url = _start("tiny", 1.0, os.path.join(tmp, "tiny.log"))
    try:
        before = resource.getrusage(resource.RUSAGE_SELF)
        r = run_workload(url, Workload(concurrency=256, num_prompts=1024, input_len=128, output_len=128, warmup=0))
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        tokens = r.metrics["total_output_tokens"]
        print(f"client cost (tiny profile, concurrency 256, {int(tokens)} tokens in {r.metrics['duration']:.1f} s): "
              f"{1000 * cpu / tokens:.3f} CPU s per 1,000 tokens, "
              f"{r.metrics['output_throughput']:.0f} out tok/s, emulator lag "
              f"{_metric(url, 'sglang:sim_max_lag_seconds') * 1000:.1f} ms max")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
