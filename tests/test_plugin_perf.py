"""The perf gate through real pytest sessions on the emulator: verdicts, repeats, updates, gating, isolation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_helpers import FAKE_NVML, HARDWARE, assert_no_server_left, model_of, said_lines, write_configs

PERF_TEST = """
import pytest

@pytest.mark.server_config("t")
def test_point(perf):
    results = perf.run("c2", concurrency=2, num_prompts=8, input_len=8, output_len=16, warmup=2)
    perf.check(results, "c2", ["output_throughput", "median_ttft_ms"])
"""


def setup(pytester: pytest.Pytester, defaults: str = "[defaults]\ntolerance = 0.5\nlatency_slack_ms = 50\n") -> Path:
    """A tiny-emulator config `t` and its (emulator) baselines file; returns that file's path."""
    model = write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(PERF_TEST)
    path = pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml"
    path.parent.mkdir(parents=True)
    path.write_text("# kept comment\n" + defaults)
    return path


@pytest.mark.slow
def test_new_then_update_then_pass(pytester: pytest.Pytester) -> None:
    path = setup(pytester)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    said_lines(result, ["*glm5 performance*", "t * c2 * output_throughput * new*",
                                 "new metrics without a baseline (2):",
                                 "*record them with: pytest ... --update-baselines"])
    result = pytester.runpytest("--update-baselines")
    result.assert_outcomes(passed=1)
    said_lines(result, ["baselines updated (2):", "  t c2 output_throughput: new -> * (new)"])
    text = path.read_text()
    assert text.startswith("# kept comment") and "[t.c2.output_throughput]" in text and "floor = " in text
    assert "[t.c2.median_ttft_ms]" in text and "ceiling = " in text and f'hardware = "{HARDWARE}"' in text
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    said_lines(result, ["t * c2 * output_throughput * >=* ok*"])


@pytest.mark.slow
def test_strict_baselines_fail_new_metrics(pytester: pytest.Pytester) -> None:
    setup(pytester)
    result = pytester.runpytest("--glm5-strict-baselines")
    result.assert_outcomes(failed=1)
    said_lines(result, ["*t c2 output_throughput * (new: no baseline yet); --glm5-strict-baselines needs "
                                 f"an entry in *{HARDWARE}*"])


@pytest.mark.slow
def test_regression_fails_with_one_line(pytester: pytest.Pytester) -> None:
    path = setup(pytester)
    path.write_text(path.read_text() + "\n[t.c2.output_throughput]\nfloor = 1e9\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)  # the measurement, and its gate item
    said_lines(result, ["*t c2 output_throughput * tok/s < floor 1000000000.00 tok/s (-*%, tolerance 50%; "
                                 "provisional: recorded from 1 launch)",
                                 "regressions (1):"])
    assert "Traceback" not in result.stdout.str()
    assert_no_server_left(model_of(pytester.path))  # a failed test leaves no server either


@pytest.mark.slow
def test_slowdown_is_caught_and_update_all_acknowledges_it(pytester: pytest.Pytester) -> None:
    path = setup(pytester, "[defaults]\ntolerance = 0.3\n")
    pytester.runpytest("--update-baselines").assert_outcomes(passed=1)
    floor_before = _floor(path)
    # A build at half speed, well beyond the 30% tolerance (a quarter speed took twice as long to measure). Three
    # launches of it: on 2 vs 2 launches a -73% drop at CV 1.2% reached its look's alpha (p 3.9e-05 < 4.6e-05) but not
    # the run's Benjamini-Hochberg line, so the test was a coin toss, not a check.
    result = pytester.runpytest("--glm5-sim-slowdown", "0.5", "--glm5-launches", "3")
    result.assert_outcomes(passed=1, failed=1)
    said_lines(result, ["glm5: t: round 2 (planned): a new launch measures c2",
                        "  t c2 output_throughput * vs * reference launches: -[45]*, * vs * launches (*): regression"])
    # Default update writes only new and improved entries: the regression stays recorded as it was.
    pytester.runpytest("--glm5-sim-slowdown", "0.5", "--update-baselines")
    assert _floor(path) == floor_before
    # =all acknowledges it, from the two launches that confirmed it (one launch alone is never recorded as a worse
    # bound: tests/test_baselines.py).
    result = pytester.runpytest("--glm5-sim-slowdown", "0.5", "--update-baselines=all", "--glm5-launches", "3")
    said_lines(result, ["  t c2 output_throughput: * -> * (*)"])
    assert _floor(path) < 0.6 * floor_before


@pytest.mark.slow
def test_improvement_passes_and_hints_update(pytester: pytest.Pytester) -> None:
    path = setup(pytester, "[defaults]\ntolerance = 0.2\n")
    path.write_text(path.read_text() + "\n[t.c2.output_throughput]\nfloor = 1.0\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    said_lines(result, ["improvements (1):", "  t c2 output_throughput * > floor 1.000 tok/s (+*%, *",
                                 "  record them with: pytest ... --update-baselines*"])
    pytester.runpytest("--update-baselines").assert_outcomes(passed=1)
    assert _floor(path) > 100


def _floor(path: Path) -> float:
    import tomllib

    return float(tomllib.loads(path.read_text())["t"]["c2"]["output_throughput"]["floor"])


@pytest.mark.slow
def test_repeats_report_median_and_spread(pytester: pytest.Pytester) -> None:
    setup(pytester)
    result = pytester.runpytest("--glm5-repeats", "3", "--glm5-report", "r.json")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    v = next(v for v in doc["verdicts"] if v["metric"] == "output_throughput")
    assert len(v["samples"]) == 3 and v["measured"] == sorted(v["samples"])[1]
    assert v["spread"]["n"] == 3 and v["spread"]["min"] <= v["measured"] <= v["spread"]["max"]
    assert doc["servers"]["t"]["how"] == "launched"


def test_malformed_baselines_name_the_file(pytester: pytest.Pytester) -> None:
    path = setup(pytester)
    path.write_text("[t.c2.output_throughput]\nfloor = 1\ntolerance = -0.2\n")
    result = pytester.runpytest()
    # Found when the run starts (the emulator's hardware key is known then), before any server is launched.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: glm5: {path}: ?t.c2.output_throughput?: tolerance must be a fraction in "
                                 "?0, 1), got -0.2"])
    assert "launched" not in result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_emulator_never_touches_real_hardware_baselines(pytester: pytest.Pytester) -> None:
    setup(pytester)
    real = pytester.path / "baselines" / "8x-rtx-pro-6000-blackwell-sm120"
    real.mkdir()
    (real / "x.toml").write_text("[t.c2.output_throughput]\nfloor = 1e9\n")
    before = (real / "x.toml").read_text()
    result = pytester.runpytest("--glm5-hardware", "8x-rtx-pro-6000-blackwell-sm120")
    result.assert_outcomes(failed=1)
    said_lines(result, ["*--glm5-hardware 8x-rtx-pro-6000-blackwell-sm120 given for an emulator run; "
                                 f"emulator baselines are keyed {HARDWARE}*"])
    pytester.runpytest("--update-baselines").assert_outcomes(passed=1)
    assert (real / "x.toml").read_text() == before
    # Another time scale is another key: nothing recorded at x0.5 (the ini's, SCALE) is compared at x1.
    result = pytester.runpytest("--glm5-sim", "--glm5-sim-time-scale", "1", "--glm5-sim-profile", "tiny")
    said_lines(result, ["*new metrics without a baseline (2):*"])


GATED = """
import pytest
pytestmark = pytest.mark.sm120
def test_gated(): pass
"""


@pytest.mark.parametrize(("gpus", "outcome", "found"), [
    (None, "skipped", "no NVML (nvidia-ml-py or the driver is missing)"),
    ([("NVIDIA H200", (9, 0))], "skipped", "1x NVIDIA H200 (compute capability 9.0)"),
    ([("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))] * 8, "passed", ""),
])
def test_sm120_gating_by_nvml(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                              gpus: list[tuple[str, tuple[int, int]]] | None, outcome: str, found: str) -> None:
    if gpus is None:
        monkeypatch.setenv("GLM5_NVML_MODULE", "no_such_nvml_module")
    else:
        pytester.makepyfile(fake_nvml=FAKE_NVML.format(gpus=gpus))
        pytester.syspathinsert()
        monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml")
    pytester.makepyfile(test_gated=GATED)
    pytester.makeconftest("def pytest_glm5_suite(config):\n    return {'gated_markers': {'sm120': '12.0'}}\n")
    result = pytester.runpytest("-rs", "test_gated.py")
    result.assert_outcomes(**{outcome: 1})
    if found:
        said_lines(result, [f"*sm120: needs compute capability 12.0 GPUs; found {found}. Rehearse on the "
                                     "emulator with --glm5-sim, or use a running server with --sglang-url URL*"])
    assert pytester.runpytest("--glm5-sim", "test_gated.py").ret == 0  # the rehearsal always runs


def test_hardware_key_from_fake_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pytest_glm5.telemetry import nvml as telemetry

    (tmp_path / "fake_nvml2.py").write_text(FAKE_NVML.format(
        gpus=[("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))] * 8))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml2")
    gpus = telemetry.inventory()
    assert gpus is not None and telemetry.hardware_key(gpus) == "8x-rtx-pro-6000-blackwell-sm120"
    assert gpus[0].pcie_gen == 5 and gpus[0].driver == "580.82" and gpus[0].memory_gb == 96.0


@pytest.mark.slow
def test_two_pytest_processes_updating_one_file_both_land(pytester: pytest.Pytester) -> None:
    import subprocess
    import sys
    import tomllib

    model = write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = { tp-size = 2 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.parametrize("cfg", [pytest.param(n, marks=pytest.mark.server_config(n)) for n in ("a", "b")])
def test_point(perf, cfg):
    perf.check(perf.run("c2", concurrency=2, num_prompts=4, output_len=8, warmup=0), "c2")
""")
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "-k", k, "--update-baselines", "-p", "no:cacheprovider"],
                              cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for k in ("a", "b")]
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    doc = tomllib.loads((pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml").read_text())
    assert set(doc) - {"costs"} == {"a", "b"} and all("output_throughput" in doc[c]["c2"] for c in ("a", "b"))


TELEMETRY_NVML = FAKE_NVML + """
import time
T0 = time.monotonic()
class _Util:
    gpu = 87
class _MemUsed:
    total = 96 * 2**30
    @property
    def used(self):
        return int((59.5 + GROW * (time.monotonic() - T0)) * 1e9)
GROW = {grow}
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
def nvmlDeviceGetMemoryInfo(h): return _MemUsed()
def nvmlDeviceGetPowerUsage(h): return 330000
def nvmlDeviceGetUtilizationRates(h): return _Util()
def nvmlDeviceGetClockInfo(h, kind): return 1980
def nvmlDeviceGetTemperature(h, kind): return 61
"""


@pytest.mark.parametrize(("grow", "workers"), [(0.0, 0), (2.0, 0), (0.0, 2)])
@pytest.mark.slow
def test_telemetry_sampled_during_load_and_memory_growth(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                        grow: float, workers: int, tmp_path: Path) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(fake_nvml=TELEMETRY_NVML.format(gpus=[("NVIDIA H200", (9, 0))] * 2, grow=grow))
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))  # xdist's workers import the fake NVML too
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml")
    monkeypatch.setenv("GLM5_LEASE_DIR", str(tmp_path / "leases"))
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("t")
def test_stable(perf):
    perf.stability(concurrency=8, num_prompts=200, output_len=64)
    perf.check(perf.run("c8", concurrency=8, num_prompts=64, output_len=64), "c8")
""")
    # Under -n the summary is the controller's, which has no gate of its own: at c979bd9 it printed no telemetry.
    result = pytester.runpytest("--glm5-report", "r.json", *(["-n", str(workers)] if workers else []))
    if grow:
        result.assert_outcomes(failed=1)
        said_lines(result, ["*GPU memory kept growing across the run: GPU 0 +*GB (last quarter vs first), "
                                     "GPU 1 +*"])
        return
    result.assert_outcomes(passed=1)
    said_lines(result, ["GPU telemetry during the runs (NVML):",
                                 "  t c8: 2 GPU, power mean 330 W (max 330 W), memory max 59.5 GB, utilisation 87%, "
                                 "SM clock 1980 MHz, * samples"])
    run = json.loads((pytester.path / "r.json").read_text())["results"][0]["runs"][0]
    assert run["telemetry"]["hz"] == 8.0 and run["telemetry"]["summary"]["0"]["power_w"]["mean"] == 330.0
    assert len(run["telemetry"]["samples"]) >= 2


@pytest.mark.slow
def test_no_nvml_is_said_once_never_an_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    setup(pytester)
    monkeypatch.setenv("GLM5_NVML_MODULE", "no_such_nvml")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert result.stdout.str().count("GPU telemetry: none (no NVML") == 1
