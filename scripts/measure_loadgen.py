"""Measure the load client itself: its CPU per streamed token against SGLang's own bench_serving, side by side, and
its fidelity against the emulator's own count.

    python scripts/measure_loadgen.py --sglang-wheel sglang-0.5.23-*.whl [--concurrency 1,64,256,1024]
                                      [--repeats 5] [--json docs/loadgen.json]
    python scripts/measure_loadgen.py --fidelity [--scale 0.1]

Client cost: both clients run the same requests (128/128, bench_serving's random-ids ids, closed loop, warmup 1)
against one tiny-profile emulator at the same time, each in its own process (the server sees both: 2C streams). A
client's CPU per 1,000 output tokens is marginal: the process's CPU (user + system, from after its imports) over a
run of 3N requests minus that over a run of N, over the tokens between them, so start-up, imports and warmup
cancel. The table gives each client's median over repeats, the median of the repeats' ratios, and beside it glm5
bench's output throughput, mean TTFT and mean ITL over bench_serving's, each measured alone on the server with 3N
requests (the same requests, so alike unless a client falls behind; bench_serving's TTFT includes a TCP connect).

Fidelity (--fidelity, instead): at concurrency 1, 64 and 512 against glm5-sm120, `glm5 bench`'s output_throughput is
compared with the emulator's own generated tokens over its own busy time (`sglang:sim_busy_seconds_total`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import Workload

CLIENTS = ("bench_serving", "glm5")
COMPARED = ("output_throughput", "mean_ttft_ms", "mean_itl_ms")


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


def start_emulator(profile: str, scale: float, log: str) -> tuple[subprocess.Popen[bytes], str]:
    """An emulator on a free port, noise off; (process, URL) once it answers /ready."""
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
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit(f"emulator did not start; see {log}")


def child(client: str, url: str, concurrency: int, prompts: int, wheel: str | None) -> dict[str, Any]:
    """One run of one client in this process: its figures and the process's CPU seconds so far."""
    # No cache flush: the server refuses one while the other client's requests run.
    wl = Workload(concurrency=concurrency, num_prompts=prompts, warmup=1, flush_cache=False)
    source = None
    if client == "bench_serving":
        from pytest_glm5.load import benchserving

        source = benchserving.load(wheel)
    # From here: imports are done, and what is left is the run (its warmup and set-up cancel between sizes).
    cpu0 = _cpu()
    if source is not None:
        result = benchserving.run(url, wl, source)
        figures = {k: float(result[k]) for k in (*COMPARED, "total_output_tokens", "completed")}
    else:
        r = run_workload(url, wl)
        figures = {k: float(r.metrics[k]) for k in (*COMPARED, "total_output_tokens", "completed")}
    return {**figures, "cpu_s": _cpu() - cpu0}


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _run_children(url: str, c: int, n: int, wheel: str | None, only: str | None = None) -> dict[str, dict[str, Any]]:
    """Both clients at once (or only one), each in its own process: the same moment of the machine for both (a wake
    costs this VM two to three times as much at one moment as at another, which run-after-run comparisons read as
    noise)."""
    procs = {}
    for client in [only] if only else CLIENTS:
        argv = [sys.executable, __file__, "--child", client, "--url", url, "--concurrency", str(c),
                "--prompts", str(n)]
        if wheel:
            argv += ["--sglang-wheel", wheel]
        procs[client] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for client, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{client} at c{c} x {n} failed: {err.strip().splitlines()[-1:]}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        if result["completed"] < n:
            raise SystemExit(f"{client} at c{c}: {n - result['completed']:.0f} of {n} requests failed")
        results[client] = result
    return results


def sizes(c: int) -> tuple[int, int]:
    """The two run sizes at concurrency c: at least 8 requests, and every stream busy through both."""
    small = max(16, c)
    return small, 3 * small


def compare(url: str, concurrencies: list[int], repeats: int, wheel: str | None,
            figures_too: bool = True) -> list[dict[str, Any]]:
    """Per concurrency: each client's marginal CPU ms per 1,000 tokens (median of repeats) and, with figures_too,
    the figure ratios."""
    rows = []
    for c in concurrencies:
        small, large = sizes(c)
        cost: dict[str, list[float]] = {k: [] for k in CLIENTS}
        figures: dict[str, list[dict[str, Any]]] = {k: [] for k in CLIENTS}
        for _ in range(repeats):
            smalls = _run_children(url, c, small, wheel)
            larges = _run_children(url, c, large, wheel)
            for client in CLIENTS:
                a, b = smalls[client], larges[client]
                tokens = b["total_output_tokens"] - a["total_output_tokens"]
                cost[client].append(1000 * (b["cpu_s"] - a["cpu_s"]) / tokens)
        # The figures from each client alone on the server (side by side, each one's requests shift the other's).
        for client in CLIENTS if figures_too else ():
            figures[client].append(_run_children(url, c, large, wheel, only=client)[client])
        row: dict[str, Any] = {"concurrency": c, "requests": [small, large], "repeats": repeats}
        for client in CLIENTS:
            row[f"{client}_cpu_s_per_1k_tokens"] = round(statistics.median(cost[client]), 4)
            row[f"{client}_runs"] = [round(x, 4) for x in cost[client]]
        # Each repeat's two clients ran side by side, so each repeat's ratio is of one machine state: the median
        # of those is the ratio.
        ratios = [ours / theirs for ours, theirs in zip(cost["glm5"], cost["bench_serving"], strict=True)]
        row["ratio"] = round(statistics.median(ratios), 3)
        row["ratios"] = [round(x, 3) for x in ratios]
        for k in COMPARED if figures_too else ():
            ours = statistics.median(f[k] for f in figures["glm5"])
            theirs = statistics.median(f[k] for f in figures["bench_serving"])
            row[f"{k}_ratio"] = round(ours / theirs, 3) if theirs else None
        rows.append(row)
        if figures_too:
            print(_line(row), flush=True)
    return rows


HEADER = ("| concurrency | bench_serving | glm5 bench | ratio | out tok/s ratio | mean TTFT ratio | mean ITL ratio |\n"
          "|---|---|---|---|---|---|---|")


def _line(row: dict[str, Any]) -> str:
    return (f"| {row['concurrency']} | {row['bench_serving_cpu_s_per_1k_tokens']:.4f} | "
            f"{row['glm5_cpu_s_per_1k_tokens']:.4f} | {row['ratio']:.2f} | {row['output_throughput_ratio']:.3f} | "
            f"{row['mean_ttft_ms_ratio']:.3f} | {row['mean_itl_ms_ratio']:.3f} |")


def fidelity(scale: float, tmp: str) -> None:
    """glm5 bench's throughput against the emulator's own count at three concurrencies."""
    proc, url = start_emulator("glm5-sm120", scale, os.path.join(tmp, "glm5.log"))
    try:
        print(f"fidelity (glm5-sm120 at time scale {scale}, 128/128 tokens):")
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


def main() -> int:
    """Print the CPU table (and the fidelity table with --fidelity)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,64,256,1024", help="comma-separated (default 1,64,256,1024)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sglang-wheel", default=os.environ.get("GLM5_SGLANG_WHEEL"),
                    help="the sglang wheel bench_serving is read from where sglang is not installed "
                         "(pip download --no-deps sglang==0.5.23)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--fidelity", action="store_true",
                    help="instead: glm5 bench's throughput against the emulator's own count")
    ap.add_argument("--scale", type=float, default=0.1, help="time scale of glm5-sm120 for --fidelity")
    ap.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--prompts", type=int, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(ns.child, ns.url, int(ns.concurrency), ns.prompts, ns.sglang_wheel)))
        return 0
    concurrencies = [int(x) for x in ns.concurrency.split(",")]
    tmp = tempfile.mkdtemp(prefix="glm5-measure-")
    if ns.fidelity:
        fidelity(ns.scale, tmp)
        return 0
    proc, url = start_emulator("tiny", 1.0, os.path.join(tmp, "tiny.log"))
    try:
        print(f"client CPU seconds per 1,000 output tokens (tiny emulator, 128/128, marginal over runs of N and 3N "
              f"requests, median of {ns.repeats}; {os.cpu_count()} CPUs):")
        print(HEADER, flush=True)
        rows = compare(url, concurrencies, ns.repeats, ns.sglang_wheel)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    if ns.json:
        ns.json.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
