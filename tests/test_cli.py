"""`glm5 bench` and `glm5 sim` as a user runs them: tables, JSON, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simproc import Sim, free_port


def glm5(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_glm5.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_bench_table_and_json(sim: Sim, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = glm5("bench", "--url", sim.url, "--concurrency", "1,4", "--num-prompts", "8", "--input-len", "16",
             "--output-len", "8", "--json", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "out tok/s" in lines[0] and "TTFT p99 ms" in lines[0]
    assert [ln.split()[0] for ln in lines[1:]] == ["1", "4"]
    recs = json.loads(out.read_text())
    assert [r["workload"]["concurrency"] for r in recs] == [1, 4]
    assert recs[1]["metrics"]["total_output_tokens"] == 64
    assert recs[0]["server_info"]["launch_command"].startswith("sglang serve")


def test_bench_unreachable_is_one_line(tmp_path: Path) -> None:
    t = time.monotonic()
    p = glm5("bench", "--url", f"http://127.0.0.1:{free_port()}", "--concurrency", "1")
    assert time.monotonic() - t < 8
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "glm5 bench: error: cannot reach" in p.stderr


def test_bench_invalid_arguments() -> None:
    p = glm5("bench", "--url", "http://x", "--concurrency", "0,2")
    assert p.returncode == 2 and "expected positive integers" in p.stderr and "Traceback" not in p.stderr
    p = glm5("bench", "--url", "http://127.0.0.1:1", "--input-len", "0")
    assert p.returncode == 2 and "argument --input-len: expected a whole number >= 1, got '0'" in p.stderr


def test_bench_exit_1_when_requests_fail(sim_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    s = sim_factory("--sim-fault", "http500=0.3")
    p = glm5("bench", "--url", s.url, "--concurrency", "2", "--num-prompts", "10", "--output-len", "4",
             "--warmup", "0")
    assert p.returncode == 1
    assert "HTTP 500" in p.stderr


def test_sim_subcommand_help() -> None:
    p = glm5("sim", "--help")
    assert p.returncode == 0 and "--sim-time-scale" in p.stdout and "--moe-runner-backend" in p.stdout


def test_glm5_plan_prices_a_resolution() -> None:
    p = glm5("plan", "--cv", "0.02", "--tolerance", "0.05", "--reference", "8", "--load-time", "30m",
             "--measure-time", "15m")
    assert p.returncode == 0 and p.stdout.strip() == (
        "resolving 5% at CV 2.0% against 8 reference launches: about 2 launches, 1.5 h more on this box (45 min a "
        "launch)")
    p = glm5("plan", "--cv", "0.05", "--tolerance", "0.03", "--load-time", "30m")
    assert "a reference this small cannot, at any count; record at least 18 launches" in p.stdout
    shipped = Path(__file__).parent.parent / "baselines" / "sim-glm5-sm120-x0.01" / "GLM-5-NVFP4.toml"
    p = glm5("plan", str(shipped), "--load-time", "30m")
    assert p.returncode == 0
    import re

    assert re.match(r"tp8 single-stream output_throughput: CV (\d+\.\d)% over (\d+) launches; one new launch finds a "
                    r"drop of \d+%; resolving 3% at CV \1% against \2 reference launches: ", p.stdout), p.stdout
    p = glm5("plan")
    assert p.returncode == 2 and "give a report or baselines file, or --cv and --load-time" in p.stderr
    p = glm5("plan", "--cv", "0.05", "--load-time", "tonight")
    assert p.returncode == 2 and "'tonight' is not a duration" in p.stderr


@pytest.mark.slow
def test_glm5_capacity_prices_then_narrows_the_bracket(sim: Sim) -> None:
    """The price first, each middle point's attainment, and a final bracket the points agree with: every point
    within the SLO at or under its feasible end, every one that missed at or over its infeasible end."""
    import re

    p = glm5("capacity", "--url", sim.url, "--concurrency", "8,64", "--ttft-ms", "12", "--input-len", "64",
             "--output-len", "32", "--resolution", "8", timeout=120)
    assert p.returncode in (0, 1), p.stderr  # 1: a point its bounds could not call ended the search (said)
    lines = p.stderr.splitlines()
    assert lines[0] == ("glm5 capacity: [8, 64] to 8 wide within TTFT <= 12 ms at 95%: at most 3 points of 128 "
                        "requests (12,288 output tokens); 8 taken as within it and 64 as not (the ladder's bracket)")
    points = {int(c): state for c, state in re.findall(r"^  c(\d+): .*\): (meets|misses|undecided)", p.stderr, re.M)}
    assert 1 <= len(points) <= 3 and next(iter(points)) == 36, p.stderr
    feasible, infeasible = map(int, re.match(r"capacity (\d+) concurrent within TTFT <= 12 ms at 95% \(infeasible "
                                             r"at (\d+)", p.stdout).groups())  # type: ignore[union-attr]
    assert 8 <= feasible < infeasible <= 64
    assert all(c <= feasible for c, s in points.items() if s == "meets")
    assert all(c >= infeasible for c, s in points.items() if s == "misses")
    assert (p.returncode == 0) == (infeasible - feasible <= 8) == ("undecided" not in points.values())


def test_glm5_capacity_refuses_what_it_cannot_search() -> None:
    for args, says in ((["--concurrency", "8"], "--concurrency takes the bracket LOW,HIGH, got 1 values"),
                       (["--concurrency", "8,64"], "an SLO needs at least one limit"),
                       (["--concurrency", "64,8", "--ttft-ms", "5"], "the lower first"),
                       (["--concurrency", "8,64", "--ttft-ms", "5", "--client", "bench_serving"],
                        "--client glm5 keeps them"),
                       (["--concurrency", "8,64", "--ttft-ms", "5", "--target", "1"],
                        "argument --target: '1' must be a share strictly between 0 and 1, e.g. 0.95 for 95%")):
        p = glm5("capacity", "--url", "http://127.0.0.1:9", *args)
        assert p.returncode == 2 and says in p.stderr, p.stderr
