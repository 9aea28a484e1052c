"""The traps between a green rehearsal and a real night: a proxy in the environment, Hugging Face snapshot paths,
a gate that found no baselines, and a regression that must show as a failed test in every view of the run."""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import HARDWARE, model_of, write_configs

from pytest_glm5 import proxies
from pytest_glm5.judge.baselines import baseline_path, model_key

PERF_TEST = """
import pytest

@pytest.mark.server_config("t")
def test_point(perf):
    results = perf.run("c2", concurrency=2, num_prompts=8, input_len=8, output_len=16, warmup=2)
    perf.check(results, "c2", ["output_throughput"])
"""
SNAPSHOT = "/hf/hub/models--zai-org--{name}/snapshots/3f2a9c1e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a39"


def _suite(pytester: pytest.Pytester, model: str | None = None, entry: str = "") -> Path:
    default_model = write_configs(pytester, "[config.t]\nflags = {}\n" + (f'model = "{model}"\n' if model else ""))
    pytester.makepyfile(PERF_TEST)
    path = baseline_path(pytester.path / "baselines", HARDWARE, model or default_model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[defaults]\ntolerance = 0.5\n" + entry)
    return path


@pytest.mark.parametrize(("model", "key"), [
    ("/models/GLM-5-NVFP4", "GLM-5-NVFP4"),
    ("/models/GLM-5-NVFP4/", "GLM-5-NVFP4"),
    ("zai-org/GLM-5-NVFP4", "GLM-5-NVFP4"),
    (SNAPSHOT.format(name="GLM-5-NVFP4"), "GLM-5-NVFP4"),
    (SNAPSHOT.format(name="GLM-5-NVFP4") + "/model.gguf", "GLM-5-NVFP4"),
    ("/models/tiny.gguf", "tiny"),
])
def test_model_key_survives_paths(model: str, key: str) -> None:
    assert model_key(model) == key


@pytest.mark.slow
def test_snapshot_path_finds_the_plain_paths_baselines(pytester: pytest.Pytester) -> None:
    snapshot = SNAPSHOT.format(name=f"m-{pytester.path.name}")
    path = _suite(pytester, snapshot, "\n[t.c2.output_throughput]\nfloor = 1.0\n")
    assert path.name == f"m-{pytester.path.name}.toml"  # the name a plain /models/<name> path gets too
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"glm5: baselines *{path.name} (model key m-{pytester.path.name} of {snapshot}) "
                                 "for t: an entry for each"])
    assert "NO BASELINES" not in result.stdout.str()
    assert "(new: no baseline yet)" not in result.stdout.str()


@pytest.mark.slow
def test_no_baselines_is_one_loud_line_and_fails_under_ci(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _suite(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"glm5: baselines {path} (*) for t: nothing for t"])
    said = " ".join(result.stdout.str().split())  # the summary wraps at 120 characters
    assert (f"NO BASELINES: t has no entry in {path} (hardware {HARDWARE}, model key {path.stem} of "
            f"{model_of(pytester.path)}): every metric reads new, nothing is gated; record them with "
            "--update-baselines") in said
    assert "PASSED: no regression; NO BASELINES for t (nothing gated there)" in said
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "this fails under CI=true or --glm5-require-baselines" in " ".join(result.stdout.str().split())
    # Recording is how a CI job gets its first baselines: it is never refused for having none.
    pytester.runpytest("-p", "no:cacheprovider", "--update-baselines").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.slow
def test_a_regression_is_a_failed_item_in_the_summary_junit_and_lf(pytester: pytest.Pytester) -> None:
    _suite(pytester, entry="\n[t.c2.output_throughput]\nfloor = 1e9\n")
    result = pytester.runpytest("--junitxml=j.xml")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1)
    # A baseline written by hand has no reference answers: the outcome says so (issue 40), after the regression.
    result.stdout.fnmatch_lines(["FAILED: 1 regression (t c2 output_throughput -*%); NO REFERENCE ANSWERS for t "
                                 "(correctness not checked*",
                                 "FAILED test_a_regression_is_a_failed_item_in_the_summary_junit_and_lf.py::"
                                 "glm5-gate::test_point*"])
    suite = ET.parse(pytester.path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["test_point"] and failed[0].get("classname", "").endswith("glm5-gate")
    lastfailed = json.loads((pytester.path / ".pytest_cache/v/cache/lastfailed").read_text())
    assert any(k.endswith("::test_point") and "glm5-gate" not in k for k in lastfailed), lastfailed
    rerun = pytester.runpytest("--lf")
    rerun.stdout.fnmatch_lines(["run-last-failure: rerun previous *"])
    rerun.assert_outcomes(passed=1, failed=1)  # the measurement ran again, and regressed again


@pytest.mark.slow
def test_a_proxy_in_the_environment_never_carries_loopback_probes(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _suite(pytester, entry="\n[t.c2.output_throughput]\nfloor = 1.0\n")
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: a probe sent to it fails
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    result = pytester.runpytest("-p", "no:cacheprovider", "--glm5-startup-timeout", "20")
    result.assert_outcomes(passed=1)
    assert proxies.proxy_for("http://10.1.2.3:30000") == "http://127.0.0.1:9"
    assert proxies.proxy_for("http://127.0.0.1:30000") is None and proxies.proxy_for("http://localhost:1") is None
    result = pytester.runpytest("-p", "no:cacheprovider", "--sglang-url", "http://10.1.2.3:30000",
                                "--glm5-hardware", "x", "--collect-only")
    result.stdout.fnmatch_lines(["glm5: requests to http://10.1.2.3:30000 go through the proxy http://127.0.0.1:9 *"])


class _DriverFreesLate:
    """NVML as a driver shows it: a stopped server's processes stay listed on its GPUs for a few polls."""

    def __init__(self, polls: int) -> None:
        self.polls = polls

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[object]:
        self.polls -= 1
        if self.polls < 0:
            return []

        class P:
            pid, usedGpuMemory = 4242, 60 * 2**30

        return [P()]


def test_teardown_waits_for_the_gpus_memory_and_says_when_it_is_not_back() -> None:
    from types import ModuleType
    from typing import cast

    from pytest_glm5.telemetry.nvml import wait_released

    late = _DriverFreesLate(polls=3)
    assert wait_released(["GPU-a"], {4242}, 10, cast(ModuleType, late), poll_s=0.01) is None
    assert late.polls < 0  # it waited until the driver let go
    stuck = _DriverFreesLate(polls=10**6)
    said = wait_released(["GPU-a"], {4242}, 0.05, cast(ModuleType, stuck), poll_s=0.01)
    assert said is not None and said.startswith("1 process(es) of the stopped server still hold 60.0 GB on 1 GPU(s)")
    assert "pids 4242" in said and "may run out of memory" in said
    assert wait_released(["GPU-a"], {999}, 0.05, cast(ModuleType, stuck), poll_s=0.01) is None  # someone else's


@pytest.mark.slow
def test_a_jit_compile_pause_is_not_a_hang(pytester: pytest.Pytester) -> None:
    # Each new decode batch size makes the emulator pause 2 s and log FlashInfer's JIT lines; the stall timeout
    # is 1 s. A pause the log explains is waited out and said; the hung scheduler of test_plugin_failures is not.
    write_configs(pytester, "[config.jit]\nflags = { sim-jit-pause-s = 2 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("jit")
def test_load(bench):
    r = bench(concurrency=2, num_prompts=4, input_len=8, output_len=16, warmup=0)
    assert r.metrics["completed"] == 4 and r.pauses, r.pauses
    assert "while the server compiled: [flashinfer-jit] flashinfer.jit: Loading JIT ops: fused_moe" in r.pauses[0]
""")
    # No canary: its 16 prompts at once would meet (and compile) the batch sizes before the load does.
    result = pytester.runpytest("-p", "no:cacheprovider", "--glm5-stall-timeout", "1", "--glm5-no-canary")
    result.assert_outcomes(passed=1)


def test_the_gate_counts_the_gpus_a_config_will_lease(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from plugin_helpers import FAKE_NVML

    pytester.makepyfile(fake_nvml=FAKE_NVML.format(
        gpus=[("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))] * 8))
    pytester.syspathinsert()
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml")
    write_configs(pytester, '[config.tp8]\nengine = "sglang"\nflags = { tp-size = 8 }\n'
                            '[config.one]\nengine = "sglang"\nflags = { tp-size = 1 }\n')
    pytester.makepyfile(test_gated="""
import pytest
pytestmark = pytest.mark.sm120
@pytest.mark.server_config("tp8")
def test_tp8(): pass
@pytest.mark.server_config("one")
def test_one(): pass
""")
    pytester.makeconftest("def pytest_glm5_suite(config):\n    return {'gated_markers': {'sm120': '12.0'}}\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    result = pytester.runpytest("-rs", "test_gated.py", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)  # one SM120 GPU no longer unlocks an 8-GPU config
    result.stdout.fnmatch_lines(["*sm120: config tp8 needs 8 GPUs of compute capability 12.0 (tp-size 8 *); this "
                                 "run sees 1 (CUDA_VISIBLE_DEVICES=3)*"])
    result.stdout.fnmatch_lines(["glm5: baselines */1x-rtx-pro-6000-blackwell-sm120/* for one*"])


@pytest.mark.slow
def test_the_servers_own_count_agrees_and_catches_another_client(sim_factory: Any) -> None:
    import threading

    from pytest_glm5.load import servermetrics
    from pytest_glm5.load.client import run_workload
    from pytest_glm5.load.types import Workload

    s = sim_factory("--enable-metrics", profile="tiny", scale=1.0)
    wl = Workload(concurrency=4, num_prompts=16, input_len=8, output_len=16, warmup=4)
    before = servermetrics.snapshot(s.url)
    r = run_workload(s.url, wl)
    seen = servermetrics.view(before, servermetrics.snapshot(s.url))
    assert seen is not None and seen.requests == r.completed_total == 1 + 4 + 16  # probe, warmup, window
    assert seen.generated_tokens == r.tokens_total and seen.mismatch(r.completed_total, r.tokens_total) is None
    assert {"num_running_reqs", "num_queue_reqs", "gen_throughput"} <= set(seen.gauges)
    before = servermetrics.snapshot(s.url)
    other = threading.Thread(target=run_workload, args=(s.url, wl))
    other.start()
    r = run_workload(s.url, wl)
    other.join()
    both = servermetrics.view(before, servermetrics.snapshot(s.url))
    assert both is not None
    said = both.mismatch(r.completed_total, r.tokens_total)
    assert said is not None and "another client was using the server" in said


@pytest.mark.slow
def test_a_failed_cache_flush_is_said(sim_factory: Any) -> None:
    import threading

    from pytest_glm5.load.client import run_workload
    from pytest_glm5.load.types import Workload

    s = sim_factory(profile="tiny", scale=1.0)
    quiet = run_workload(s.url, Workload(concurrency=2, num_prompts=4, input_len=8, output_len=8, warmup=2))
    assert quiet.cache_note is None
    # Someone else's requests keep the server busy: SGLang (and the emulator) refuse to flush while requests run.
    busy = threading.Thread(target=run_workload, args=(s.url, Workload(
        concurrency=8, num_prompts=48, input_len=8, output_len=256, warmup=0)))
    busy.start()
    try:
        r = run_workload(s.url, Workload(concurrency=2, num_prompts=4, input_len=8, output_len=8, warmup=2))
    finally:
        busy.join()
    assert r.cache_note is not None and r.cache_note.startswith("/flush_cache failed 3 times (HTTP 400: Cache not "
                                                                "flushed")
    assert r.cache_note.endswith("measured with a warm prefix cache")


@pytest.mark.slow
def test_a_long_point_says_how_far_it_got(sim_factory: Any) -> None:
    from pytest_glm5.load.client import run_workload
    from pytest_glm5.load.types import Workload
    from pytest_glm5.report.terminal import TerminalProgress

    s = sim_factory(profile="tiny", scale=1.0)
    said: list[tuple[str, float]] = []
    run_workload(s.url, Workload(concurrency=2, num_prompts=12, input_len=8, output_len=64, warmup=2),
                 progress=lambda line, elapsed: said.append((line, elapsed)))
    assert said and said[-1][0].startswith(("10 of 12 requests", "11 of 12 requests", "12 of 12 requests"))
    assert " output tok/s so far" in said[-1][0] and said[-1][1] > said[0][1]

    class Tty:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def isatty(self) -> bool:
            return True

        def rewrite(self, line: str, erase: bool = False) -> None:
            self.lines.append(line)

        def write_line(self, line: str) -> None:
            self.lines.append("LINE " + line)

    tty = Tty()
    TerminalProgress(tty)("tp8 c1 128/128 sglang", 12.0, "3 of 4 requests, 10.2 output tok/s so far", "measuring")
    assert tty.lines == ["glm5: measuring tp8 c1 128/128 sglang [   12 s] 3 of 4 requests, 10.2 output tok/s so far"]


def test_prompts_follow_bench_servings_random_ids_and_range_ratio() -> None:
    from pytest_glm5.load.client import make_prompts, output_lengths
    from pytest_glm5.load.types import Workload

    wl = Workload(concurrency=1, num_prompts=200, input_len=64, output_len=32, token_low=10, token_high=1000)
    prompts = make_prompts(wl, 200)
    assert all(len(p) == 64 for p in prompts) and output_lengths(wl, 200) == [32] * 200
    # bench_serving's random-ids: request i is a run of consecutive ids from a random offset, wrapping in the vocab.
    for p in prompts:
        assert all((b - a) % 990 == 1 for a, b in itertools.pairwise(p)) and all(10 <= t < 1000 for t in p)
    assert len({p[0] for p in prompts}) > 150  # the offsets are spread
    ranged = Workload(concurrency=1, num_prompts=500, input_len=128, output_len=128, range_ratio=0.5)
    lens = [len(p) for p in make_prompts(ranged, 500)]
    outs = output_lengths(ranged, 500)
    assert min(lens) >= 64 and max(lens) == 128 and 90 < sum(lens) / 500 < 102  # uniform in [64, 128]
    assert min(outs) >= 64 and max(outs) <= 128 and len(set(outs)) > 40
    with pytest.raises(ValueError, match="range_ratio must be in"):
        Workload(concurrency=1, num_prompts=1, range_ratio=1.5)
