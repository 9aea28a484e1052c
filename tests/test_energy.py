"""Energy and throttling over a window from NVML's counters, against a fake NVML that implements them, empty
answers included (groundwork of issue 30; the plugin does not report them yet)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from pytest_glm5.judge import regime
from pytest_glm5.telemetry import energy
from pytest_glm5.telemetry.energy import EnergyMeter, Window, field_ids, integrated_j


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def fake_nvml(clock: Clock, watts: list[float], counter: bool = True, hw_answers: bool = False) -> Any:
    """pynvml's energy and field-value calls: GPU i draws watts[i] constantly; the software power cap is hit half the
    time; hardware fields answer value 0 with timestamp 0 (as the H200 did) unless `hw_answers`."""
    nvml = types.SimpleNamespace(
        NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP=74, NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN=269,
        NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN=270,
        NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN=271)

    def energy_mj(h: int) -> int:
        if not counter:
            raise RuntimeError("NVMLError_NotSupported")
        return int(5_000_000 + watts[h] * clock.t * 1000)

    def values(h: int, ids: list[int]) -> list[Any]:
        out = []
        for fid in ids:
            ns = {74: clock.t * 0.5e9, 269: 0, 270: clock.t * 0.05e9, 271: 0}[fid]
            empty = fid in (270, 271) and not hw_answers
            out.append(types.SimpleNamespace(nvmlReturn=0, timestamp=0 if empty else 1,
                                             value=types.SimpleNamespace(ullVal=0 if empty else int(ns))))
        return out

    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetTotalEnergyConsumption = energy_mj
    nvml.nvmlDeviceGetFieldValues = values
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: 600_000  # mW
    nvml.nvmlDeviceGetPowerUsage = lambda h: 80_000 + 1_000 * h  # mW: idle before the load
    return nvml


def test_energy_over_a_window_from_the_counter() -> None:
    clock = Clock()
    meter = EnergyMeter(fake_nvml(clock, [330.0, 310.0]), [0, 1], clock.now, clock.sleep).start()
    clock.t += 60.0
    w = meter.stop()
    assert w.source == "energy counter" and w.seconds == pytest.approx(60.1)
    assert w.joules[0] == pytest.approx(330 * 60.1) and w.total_j == pytest.approx(640 * 60.1)
    assert w.power_line() == "GPUs drew 320 W of 600 W (53%)"
    # the power cap half the time is normal load, recorded; hardware fields gave no answer: None, not 0
    assert w.throttle_s[0]["sw_power_cap"] == pytest.approx(30.05)
    assert w.throttle_s[0]["hw_thermal"] is None and w.throttle_s[0]["sw_thermal"] == 0.0
    assert w.throttled() is None
    # What a verdict's provenance keeps of it: per GPU, the limit, the mean drawn, the cap share, the idle power.
    assert w.power() == {"limit_w": 600.0, "mean_w": 320.0, "cap_share": 0.5, "idle_w": 80.5}
    assert energy.merged_power([w, w]) == w.power() and energy.merged_power([]) == {}


def test_a_moved_power_regime_is_named_and_a_steady_one_is_not() -> None:
    ref = {"limit_w": 600.0, "cap_share": 0.95}
    assert regime.power_change(ref, {"limit_w": 450.0, "cap_share": 0.95}) == \
        "the enforced power limit changed (600 W to 450 W a GPU)"
    assert regime.power_change(ref, {"limit_w": 600.0, "cap_share": 0.3}) == \
        "GPUs at their power cap 30% of the window, 95% in the reference"
    # A reading's jitter, an unknown on either side, or a GPU that gave no answer: nothing to name.
    for today in ({"limit_w": 605.0, "cap_share": 0.9}, {}, None, {"limit_w": 600.0}):
        assert regime.power_change(ref, today) is None
    assert regime.power_change(None, ref) is None and regime.power_change({"cap_share": 0.1}, {"limit_w": 1.0}) is None


def test_hardware_thermal_slowdown_makes_a_window_not_comparable() -> None:
    clock = Clock()
    meter = EnergyMeter(fake_nvml(clock, [330.0], hw_answers=True), [0], clock.now, clock.sleep).start()
    clock.t += 60.0
    w = meter.stop()
    assert w.throttle_s[0]["hw_thermal"] == pytest.approx(3.005)  # 5% of the window
    assert w.throttled() == "throttled: not comparable (GPU 0 hw_thermal 3.0 s of 60 s)"


def test_integrated_power_is_the_labelled_fallback_without_a_counter() -> None:
    clock = Clock()
    meter = EnergyMeter(fake_nvml(clock, [330.0], counter=False), [0], clock.now, clock.sleep).start()
    clock.t += 60.0
    w = meter.stop({0: [(100.0 + k * 0.125, 330.0) for k in range(481)]})
    assert w.source == "integrated power (sampled)" and w.joules[0] == pytest.approx(330 * 60.0)
    assert integrated_j([(0.0, 100.0), (1.0, 300.0)]) == pytest.approx(200.0)


def test_field_ids_come_from_the_binding() -> None:
    import pynvml

    ids = field_ids(pynvml)
    assert ids == {name: getattr(pynvml, const) for name, const in energy.THROTTLE_FIELDS.items()}
    assert field_ids(types.SimpleNamespace()) == {}  # an older binding: no counters, no error


def test_no_energy_no_tokens_per_joule() -> None:
    assert Window(10.0, {}, "energy counter").tokens_per_joule(100) is None


ENERGY_NVML = """
import time
T0 = time.monotonic()
HW_THERMAL = {hw}
def nvmlDeviceGetTotalEnergyConsumption(h): return int(300_000 * (time.monotonic() - T0))  # 300 W, in mJ
def nvmlDeviceGetEnforcedPowerLimit(h):
    import os
    return int(os.environ.get("FAKE_LIMIT_MW", "600000"))
def nvmlDeviceGetPowerUsage(h): return 75_000
NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
class _V:
    def __init__(self, ns): self.nvmlReturn, self.timestamp, self.value = 0, 1, type("U", (), {{"ullVal": ns}})()
def nvmlDeviceGetFieldValues(h, ids): return [_V(int((time.monotonic() - T0) * 1e9 * HW_THERMAL)) for _ in ids]
"""


@pytest.mark.parametrize("hw_thermal", [0.0, 0.5])
def test_a_run_reports_tokens_per_joule_and_a_throttled_window_is_not_judged(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, hw_thermal: float) -> None:
    import json

    from plugin_helpers import FAKE_NVML, said_lines, write_configs

    write_configs(pytester, "[config.t]\nflags = {}\n")
    gpus = [("NVIDIA RTX PRO 6000 Blackwell", (12, 0))]
    pytester.makepyfile(fake_energy_nvml=FAKE_NVML.format(gpus=gpus) + ENERGY_NVML.format(hw=hw_thermal))
    pytester.syspathinsert()
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_energy_nvml")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c2", concurrency=2, num_prompts=8, input_len=8, output_len=32, warmup=0), "c2",
               ["output_throughput", "output_tokens_per_joule"])
""")
    result = pytester.runpytest("--glm5-sim", "--glm5-report", "r.json", "--glm5-markdown", "s.md", "-p", "no:randomly")
    doc = json.loads((pytester.path / "r.json").read_text())
    [run] = doc["results"][0]["runs"]
    assert run["energy"]["source"] == "energy counter"
    assert run["energy"]["power_line"] == "GPUs drew 300 W of 600 W (50%)"
    tpj = run["metrics"]["output_tokens_per_joule"]
    assert tpj == pytest.approx(run["metrics"]["total_output_tokens"] / run["energy"]["total_j"], rel=0.5)
    kinds = {v["metric"]: v["verdict"] for v in doc["verdicts"]}
    if hw_thermal:
        assert kinds == {"output_throughput": "throttled", "output_tokens_per_joule": "throttled"}
        said_lines(result, ["not judged, a GPU slowed for heat or a hardware power brake (not comparable) (2):",
                            "  t c2: output_throughput, output_tokens_per_joule",
                            "  why (1 point), e.g. t c2: throttled: not comparable (GPU 0 hw_thermal * s of * s)"])
        md = (pytester.path / "s.md").read_text()
        assert "### Throttled (not comparable: a GPU slowed for heat or a power brake) (2)" in md, md
    else:
        assert kinds == {"output_throughput": "new", "output_tokens_per_joule": "new"}
        assert run["metrics"]["joules_per_request"] == pytest.approx(run["energy"]["total_j"] / 8, rel=0.5)
        assert run["energy"]["power"]["idle_w"] == 75.0 and run["energy"]["power"]["limit_w"] == 600.0
    # The campaign's diagnosis in every output: the summary, the markdown, the page.
    said = "GPUs drew 300 W of 600 W (50%) at concurrency 2"
    assert said in result.stdout.str()


ENERGY_POINT = """
import pytest
@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c2", concurrency=2, num_prompts=8, input_len=8, output_len=32, warmup=0), "c2",
               ["output_throughput", "output_tokens_per_joule"])
"""


@pytest.mark.slow
def test_energy_reaches_every_output_and_a_changed_power_limit_is_named(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from plugin_helpers import FAKE_NVML, said_lines, write_configs
    from test_reports import page_data

    write_configs(pytester, "[config.t]\nflags = {}\n")
    gpus = [("NVIDIA RTX PRO 6000 Blackwell", (12, 0))]
    pytester.makepyfile(fake_energy_nvml=FAKE_NVML.format(gpus=gpus) + ENERGY_NVML.format(hw=0.0))
    pytester.syspathinsert()
    monkeypatch.setenv("GLM5_NVML_MODULE", "fake_energy_nvml")
    pytester.makepyfile(ENERGY_POINT)
    rec = pytester.runpytest("--glm5-sim", "--update-baselines", "--glm5-launches", "3", "-p", "no:randomly")
    assert rec.ret == 0, rec.stdout.str()[-3000:]
    text = next((pytester.path / "baselines").rglob("*.toml")).read_text()
    assert "power = {" in text and "limit_w = 600.0" in text  # the power regime is recorded with the reference
    # Tonight the GPUs are capped lower and the build is slower: the verdict names the likely cause.
    monkeypatch.setenv("FAKE_LIMIT_MW", "450000")
    slow = pytester.runpytest("--glm5-sim", "--glm5-sim-slowdown", "0.5", "--glm5-report", "r.json", "--glm5-markdown",
                              "s.md", "--glm5-html", "r.html", "-p", "no:randomly")
    doc = json.loads((pytester.path / "r.json").read_text())
    v = next(v for v in doc["verdicts"] if v["metric"] == "output_throughput")
    assert v["verdict"] in ("regression", "unresolved"), v
    assert v["note"].endswith("likely cause: the enforced power limit changed (600 W to 450 W a GPU)"), v["note"]
    said_lines(slow, ["*likely cause: the enforced power limit changed (600 W to 450 W a GPU)*"])
    md = (pytester.path / "s.md").read_text()
    assert "### Energy (NVML) (1)" in md and "GPUs drew 300 W of 450 W (67%) at concurrency 2" in md, md
    [config] = page_data(pytester.path / "r.html")["configs"]
    assert any("output tok/J" in x and "GPUs drew 300 W of 450 W" in x for x in config["energy"]), config["energy"]
    from browser import CHROMIUM, open_page

    if Path(CHROMIUM).exists():  # the page shows them (CI installs Chromium)
        opened = open_page(pytester.path / "r.html")
        assert opened.errors == [] and opened.energy == config["energy"], opened
