"""What GPU leases buy: k configs of 8/k GPUs each on the emulated 8 GPUs, run serially and on k xdist workers.

    python scripts/measure_leases.py                  # k = 2, three rounds, about 7 minutes on 2 cores
    python scripts/measure_leases.py --k 4 --rounds 1 --seconds 20

Each config's tests load its emulated server (profile tiny, time scale 1) with a closed loop long enough to take
about --seconds; a round runs `pytest --glm5-sim` once serially (-p no:xdist) and once with `-n K`, in a fresh
directory each, and times each session from start to exit. The claim checked: the parallel run takes at most
(serial / k) x 1.10; what is left over is xdist starting its workers (about 2.5 s here), which a real config's
minutes of model load and load runs dwarf. The report's launch and stop times show the k servers overlapping on
disjoint GPUs.
Prints one line per round and a JSON summary, e.g.

    round 1: serial 45.5 s, -n 2 25.5 s, ratio 0.561 (bound 0.550), overlap 21.9 s, GPUs [0-3] [4-7]   (--seconds 20)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TEST = """
import pytest

@pytest.mark.parametrize("c", [1, 2])
def test_point(perf, glm5_config, c):
    # Closed loop: PROMPTS requests of 128 output tokens at concurrency c on the tiny profile (about 250 tok/s
    # per stream), so the two points take about SECONDS seconds together.
    results = perf.run(f"c{c}", concurrency=c, num_prompts=PROMPTS * c, input_len=8, output_len=128, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput"])
"""


def configs(k: int) -> str:
    """k configs of 8/k GPUs each, on the tiny emulator profile (8 GPUs)."""
    out = [f'[defaults]\nengine = "sim"\nsim_profile = "tiny"\nmodel = "/models/measure-leases-{os.getpid()}"\n']
    for i in range(k):
        out.append(f'[config.part{i}]\nflags = {{ tp-size = {8 // k} }}\n')
    return "\n".join(out)


def session(k: int, seconds: float, workers: int) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one pytest session in a fresh directory, and its report."""
    with tempfile.TemporaryDirectory(prefix="glm5-leases-") as tmp:
        d = Path(tmp)
        (d / "configs.toml").write_text(configs(k))
        (d / "pytest.ini").write_text("[pytest]\nglm5_configs = configs.toml\n")
        prompts = max(1, round(seconds * 250 / 128 / 2))
        (d / "test_leases_bench.py").write_text(textwrap.dedent(TEST).replace("PROMPTS", str(prompts))
                                                .replace("SECONDS", f"{seconds:g}"))
        cmd = [sys.executable, "-m", "pytest", "-q", "--glm5-sim", "--glm5-report", "r.json", "-p", "no:randomly"]
        cmd += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"pytest exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
        return wall, json.loads((d / "r.json").read_text())


def overlap(doc: dict[str, Any]) -> tuple[float, list[list[int]]]:
    """Seconds all servers ran at once, and their GPU sets."""
    servers = list(doc["servers"].values())
    start = max(s["launched_at"] for s in servers)
    end = min(s["stopped_at"] for s in servers)
    return max(0.0, end - start), [s["gpus"] for s in servers]


def main() -> int:
    """Run the rounds and print each and the summary."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=2, choices=(2, 4, 8), help="configs (and workers); 8/k GPUs each")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40.0, help="load-generation seconds per config")
    args = ap.parse_args()
    rows = []
    for r in range(1, args.rounds + 1):
        serial, _ = session(args.k, args.seconds, 1)
        parallel, doc = session(args.k, args.seconds, args.k)
        both, gpus = overlap(doc)
        ratio = parallel / serial
        bound = 1.10 / args.k
        rows.append({"serial_s": round(serial, 2), "parallel_s": round(parallel, 2), "ratio": round(ratio, 3),
                     "overlap_s": round(both, 2), "gpus": gpus})
        spans = " ".join(f"[{g[0]}-{g[-1]}]" for g in gpus)
        print(f"round {r}: serial {serial:.1f} s, -n {args.k} {parallel:.1f} s, ratio {ratio:.3f} (bound {bound:.3f}),"
              f" overlap {both:.1f} s, GPUs {spans}", flush=True)
    ratios = [row["ratio"] for row in rows]
    summary = {"k": args.k, "seconds": args.seconds, "bound": round(1.10 / args.k, 3),
               "median_ratio": round(statistics.median(ratios), 3), "worst_ratio": max(ratios), "rounds": rows}
    print(json.dumps(summary))
    return 0 if max(ratios) <= 1.10 / args.k else 1


if __name__ == "__main__":
    sys.exit(main())
