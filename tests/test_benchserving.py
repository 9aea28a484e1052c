"""SGLang's own bench_serving as the cross-check of `glm5 bench`: read from the 0.5.23 wheel (scripts/test.sh
downloads it; GLM5_SGLANG_WHEEL names it), run on the same emulator with the same requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import Workload

from simproc import Sim

GLM5 = [sys.executable, "-m", "pytest_glm5.cli"]


def _glm5(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GLM5, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)


def test_bench_serving_measures_the_same_requests_as_glm5_bench(sim: Sim, wheel: str, tmp_path: Path) -> None:
    before = sim.metric("sglang:num_requests_total")
    out = _glm5("bench", "--client", "bench_serving", "--sglang-wheel", wheel, "--url", sim.url,
                "--concurrency", "1,4", "--num-prompts", "12", "--input-len", "32", "--output-len", "16",
                "--json", str(tmp_path / "bs.json"))
    assert out.returncode == 0, out.stderr
    assert "by bench_serving of sglang-0.5.23" in out.stderr
    table = out.stdout.splitlines()
    assert table[0].split()[:4] == ["limit", "conc", "done", "fail"] and len(table) == 3
    records = json.loads((tmp_path / "bs.json").read_text())
    assert [r["workload"]["concurrency"] for r in records] == [1, 4]
    for r in records:
        assert r["client"] == "bench_serving" and r["errors"] == []
        assert r["metrics"]["completed"] == 12 and r["metrics"]["failed"] == 0
        assert r["metrics"]["total_output_tokens"] == 12 * 16 and r["metrics"]["total_input_tokens"] == 12 * 32
        assert r["server_info"]["version"] == "0.5.23"  # bench_serving read /server_info directly, past no proxy
    # The server saw bench_serving's warmup (1 per concurrency, the --warmup default) and every measured request.
    assert sim.metric("sglang:num_requests_total") - before == (1 + 12) + (4 + 12)
    # Side by side with glm5 bench on the same server: the same token counts, and the same decode speed (the
    # emulator's ITL is its model time; both clients stamp the same chunks).
    ours = run_workload(sim.url, Workload(concurrency=4, num_prompts=12, input_len=32, output_len=16, warmup=4))
    theirs = records[1]["metrics"]
    assert ours.metrics["total_output_tokens"] == theirs["total_output_tokens"]
    assert ours.metrics["median_itl_ms"] == pytest.approx(theirs["median_itl_ms"], rel=0.25)


def test_bench_serving_ignores_the_proxy_for_a_local_server(sim: Sim, wheel: str) -> None:
    out = _glm5("bench", "--client", "bench_serving", "--sglang-wheel", wheel, "--url", sim.url,
                "--num-prompts", "8", "--output-len", "8",
                env={"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "no_proxy": ""})
    assert out.returncode == 0, out.stderr


def test_without_sglang_or_its_wheel_one_line_says_how_to_get_it(sim: Sim, tmp_path: Path) -> None:
    env = {"GLM5_SGLANG_WHEEL": ""}
    out = subprocess.run([*GLM5, "bench", "--client", "bench_serving", "--url", sim.url], capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "GLM5_SGLANG_WHEEL"},
                         check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("glm5 bench: error: SGLang's bench_serving is not importable")
    assert "--sglang-wheel" in out.stderr and "pip download --no-deps sglang==0.5.23" in out.stderr
    missing = _glm5("bench", "--client", "bench_serving", "--sglang-wheel", str(tmp_path / "nope.whl"),
                    "--url", sim.url, env=env)
    assert missing.returncode == 2 and f"no sglang wheel at {tmp_path / 'nope.whl'}" in missing.stderr
    (tmp_path / "fake.whl").write_bytes(b"not a zip")
    broken = _glm5("bench", "--client", "bench_serving", "--sglang-wheel", str(tmp_path / "fake.whl"),
                   "--url", sim.url, env=env)
    assert broken.returncode == 2 and "fake.whl" in broken.stderr and "Traceback" not in broken.stderr
