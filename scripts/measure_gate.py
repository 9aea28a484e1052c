"""The gate's operating characteristic, measured on the emulator: how often the nightly gate (against recorded
reference launches) reads regression, pass and unresolved, and how the A/B gate answers, at launch-to-launch CV 2%,
5% and 10% and slowdowns 1.00, 0.97, 0.95, 0.90 and 0.50 (a halving: decided on the first round that can show it?).

    python scripts/measure_gate.py                      # both parts, about 30 minutes on 2 cores
    python scripts/measure_gate.py --launches 30 --trials 2000 --pytest-runs 0

Part 1 launches the emulator (profile glm5-sm120, time scale 0.01) --launches times per (CV, slowdown) cell, one
measurement each (concurrency 1, 4 requests of 128/128; output tok/s), then resamples those recorded launches
--trials times per cell through the plugin's own decision code (decide.py): the nightly gate with 8 reference
launches and up to 5 new ones, the A/B gate in ABBA blocks up to 4 blocks (8 launches per arm): the plugin's
defaults.
Part 2 runs pytest itself --pytest-runs times on a one-test suite with --glm5-ab base,base and base,slow (a build
whose env slows the emulator by 5%), and counts exit codes and verdicts.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_glm5.judge.decide import ab, against_reference  # noqa: E402
from pytest_glm5.judge.looks import Look  # noqa: E402
from pytest_glm5.judge.verdicts import Bound  # noqa: E402
from pytest_glm5.load.client import run_workload  # noqa: E402
from pytest_glm5.load.types import Workload  # noqa: E402

SLOWDOWNS = (1.00, 0.97, 0.95, 0.90, 0.50)
CVS = (0.02, 0.05, 0.10)
N_REF = 8
NIGHTLY_LOOKS = 5
AB_BLOCKS = 4
ALPHA, EFFECT, TOLERANCE, AB_TOLERANCE = 0.01, 0.05, 0.05, 0.02  # the real box's file: tolerance 5%


def record_launches(cv: float, slowdown: float, n: int, tmp: Path) -> list[float]:
    """n emulator launches, one measurement each."""
    sys.path.insert(0, str(ROOT / "tests"))
    from simproc import start_sim  # the tests' launcher: free port, waits for /ready

    out = []
    for _ in range(n):
        sim = start_sim(tmp, "--sim-noise", str(cv), "--sim-slowdown", str(slowdown), "--sim-startup-s", "1",
                        profile="glm5-sm120", scale=0.01)
        try:
            r = run_workload(sim.url, Workload(concurrency=1, num_prompts=4, warmup=1))
            out.append(r.metrics["output_throughput"])
        finally:
            sim.stop()
    return out


def nightly_trial(rng: random.Random, base: list[float], pool: list[float]) -> tuple[str, int]:
    ref = rng.sample(base, N_REF)
    bound = Bound("output_throughput", "floor", sum(ref) / N_REF, TOLERANCE, launches=tuple(ref))
    new: list[float] = []
    for look in range(1, NIGHTLY_LOOKS + 1):
        new.append(rng.choice(pool))
        v = against_reference("c", "s", "output_throughput", new, new, bound, {}, Look(ALPHA, look, NIGHTLY_LOOKS,
                                                                                     EFFECT))
        if v.verdict != "unresolved":
            break
    return v.verdict, len(new)


def ab_trial(rng: random.Random, base: list[float], pool: list[float]) -> tuple[str, int]:
    a: list[float] = []
    b: list[float] = []
    for block in range(1, AB_BLOCKS + 1):
        a += [rng.choice(base), rng.choice(base)]
        b += [rng.choice(pool), rng.choice(pool)]
        v = ab("c", "s", "output_throughput", a, b, ("A", "B"), b, Look(ALPHA, block, AB_BLOCKS, EFFECT),
               AB_TOLERANCE)
        if v.stat["answer"] != "UNKNOWN":
            break
    return v.stat["answer"], len(a)


def resample(recorded: dict[str, list[float]], trials: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for cv in CVS:
        base = recorded[f"{cv}-1.0"]
        for slowdown in SLOWDOWNS:
            pool = recorded[f"{cv}-{slowdown}"]
            nightly = [nightly_trial(rng, base, pool) for _ in range(trials)]
            abt = [ab_trial(rng, base, pool) for _ in range(trials)]
            rows.append({
                "cv": cv, "slowdown": slowdown, "trials": trials,
                "nightly_flagged": sum(v == "regression" for v, _ in nightly) / trials,
                "nightly_pass": sum(v == "pass" for v, _ in nightly) / trials,
                "nightly_unresolved": sum(v == "unresolved" for v, _ in nightly) / trials,
                "nightly_launches": sum(n for _, n in nightly) / trials,
                # A regression is confirmed on a second launch at the earliest: how often it was decided there.
                "nightly_flagged_by_2": sum(v == "regression" and n <= 2 for v, n in nightly) / trials,
                "ab_flagged": sum(v == "DIFFERENT/worse" for v, _ in abt) / trials,
                "ab_same": sum(v == "SAME" for v, _ in abt) / trials,
                "ab_launches_per_arm": sum(n for _, n in abt) / trials,
                "measured_cv": _cv(base),
            })
    return rows


def _cv(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 / m


SUITE = '''
import pytest

@pytest.mark.server_config("tp8")
def test_single(perf):
    perf.check(perf.run("single", concurrency=1, num_prompts=4, warmup=1), "single", ["output_throughput"])
'''

CONFIGS = '''
[config.tp8]
flags = { tp-size = 8, enable-metrics = true }

[build.base]

[build.slow]
env = { GLM5_SIM_SLOWDOWN = "0.95" }
'''


def pytest_runs(n: int, cv: float) -> dict[str, object]:
    """n pytest sessions of each A/B pair; exit codes and the answers in their reports."""
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "test_ab.py").write_text(textwrap.dedent(SUITE))
        (root / "configs.toml").write_text(textwrap.dedent(CONFIGS))
        for pair in ("base,base", "base,slow"):
            exits: list[int] = []
            answers: list[str] = []
            for i in range(n):
                report = root / f"r{i}.json"
                p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root),
                                    "--rootdir", str(root), "--glm5-sim", "--glm5-configs", str(root / "configs.toml"),
                                    "--glm5-baselines", str(root / "baselines"), "--glm5-ab", pair,
                                    "--glm5-sim-noise", str(cv), "--glm5-sim-time-scale", "0.01",
                                    "--glm5-sim-startup-s", "1",
                                    "--glm5-report", str(report)], capture_output=True, text=True, cwd=root)
                exits.append(p.returncode)
                doc = json.loads(report.read_text()) if report.exists() else {"verdicts": []}
                answers += [(v.get("test") or {}).get("answer", "?") for v in doc["verdicts"]]
                print(f"  pytest {pair} run {i + 1}/{n}: exit {p.returncode} {answers[-1] if answers else '-'}",
                      file=sys.stderr)
            out[pair] = {"runs": n, "exit_1": exits.count(1), "other_exits": sorted(set(exits) - {0, 1}),
                         "answers": {a: answers.count(a) for a in sorted(set(answers))}}
    return out


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| launch CV | slowdown | nightly: regression | by launch 2 | pass | unresolved | launches (mean) | "
             "A/B: DIFFERENT/worse | A/B: SAME | A/B: launches per arm (mean) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['cv']:.0%} | {r['slowdown']:.2f} | {r['nightly_flagged']:.1%} | "
                     f"{r['nightly_flagged_by_2']:.1%} | {r['nightly_pass']:.1%} | {r['nightly_unresolved']:.1%} | "
                     f"{r['nightly_launches']:.2f} | {r['ab_flagged']:.1%} | {r['ab_same']:.1%} | "
                     f"{r['ab_launches_per_arm']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=40, help="recorded emulator launches per cell")
    parser.add_argument("--trials", type=int, default=2000, help="resampled trials per cell")
    parser.add_argument("--pytest-runs", type=int, default=50, help="pytest sessions per A/B pair (base,base and "
                                                                     "base,slow)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--recorded", type=Path, default=None,
                        help="reuse the launches recorded by an earlier run (its --json file) instead of launching")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "gate_oc.json")
    ns = parser.parse_args()
    t0 = time.monotonic()
    recorded: dict[str, list[float]] = json.loads(ns.recorded.read_text())["recorded"] if ns.recorded else {}
    with tempfile.TemporaryDirectory() as d:
        for cv in CVS if not recorded else ():
            for slowdown in SLOWDOWNS:
                recorded[f"{cv}-{slowdown}"] = record_launches(cv, slowdown, ns.launches, Path(d))
                print(f"recorded {ns.launches} launches at CV {cv}, slowdown {slowdown} "
                      f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    rows = resample(recorded, ns.trials, ns.seed)
    e2e = pytest_runs(ns.pytest_runs, 0.02) if ns.pytest_runs else {}
    if not e2e and ns.recorded:
        e2e = json.loads(ns.recorded.read_text()).get("pytest", {})  # kept with the launches it was run beside
    print(table(rows))
    for pair, res in e2e.items():
        print(f"pytest --glm5-ab {pair}, CV 2%: {res}")
    ns.json.write_text(json.dumps({"rows": rows, "pytest": e2e, "recorded": recorded,
                                   "settings": {"alpha": ALPHA, "effect": EFFECT, "tolerance": TOLERANCE,
                                                "ab_tolerance": AB_TOLERANCE, "n_ref": N_REF,
                                                "nightly_looks": NIGHTLY_LOOKS, "ab_blocks": AB_BLOCKS},
                                   "seconds": time.monotonic() - t0}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
