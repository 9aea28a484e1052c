"""The emulator's performance model, in virtual time: calibration and the campaign's config effects."""

from __future__ import annotations

import itertools

import pytest

from pytest_glm5.sim.engine import Crash, Scheduler, SimRequest, simulate_closed_loop
from pytest_glm5.sim.profile import ProfileError, load_profile, resolve

BASE = {"tp_size": 8, "ep_size": 1, "moe_runner_backend": "flashinfer_cutlass", "quantization": "modelopt_fp4",
        "max_running_requests": 1024}


def model(**overrides: object):  # type: ignore[no-untyped-def]
    return resolve(load_profile("glm5-sm120"), {**BASE, **overrides}, noise_cv=0.0)


def point(c: int, m=None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return simulate_closed_loop(m or model(), c, max(8, 4 * c), 128, 128)


@pytest.mark.parametrize(("conc", "metric", "target"), [
    (1, "output_throughput", 10.36),
    (2, "output_throughput", 19.29),
    (1024, "total_throughput", 3740.0),
])
def test_calibrated_to_the_campaign(conc: int, metric: str, target: float) -> None:
    assert point(conc)[metric] == pytest.approx(target, rel=0.05)


def test_curve_is_smooth_and_monotone() -> None:
    concs = [1, 2, 4, 10, 32, 64, 128, 256, 512, 768, 1024]
    tput = [point(c)["output_throughput"] for c in concs]
    assert all(b > a for a, b in itertools.pairwise(tput)), tput
    # Per-stream throughput falls as the batch grows: no cliff, no bump.
    per = [t / c for t, c in zip(tput, concs, strict=True)]
    assert all(b < a for a, b in itertools.pairwise(per)), per


def test_allreduce_fusion_is_catastrophic() -> None:
    slow = point(512, model(enable_flashinfer_allreduce_fusion=True))["output_throughput"]
    assert point(512)["output_throughput"] / slow == pytest.approx(1867 / 236, rel=0.1)


def test_four_decode_steps_bring_no_gain() -> None:
    ratio = point(512, model(num_continuous_decode_steps=4))["output_throughput"] / point(512)["output_throughput"]
    assert 0.95 < ratio < 1.0


def test_slowdown_scales_decode() -> None:
    m = resolve(load_profile("glm5-sm120"), BASE, slowdown=0.8, noise_cv=0.0)
    ratio = point(1, m)["output_throughput"] / point(1)["output_throughput"]
    assert ratio == pytest.approx(0.8, rel=0.02)


def test_ep8_crashes_under_load_but_not_single_stream() -> None:
    m = model(ep_size=8)
    assert m.failure is not None and m.failure.phase == "load"
    point(10, m)  # light load survives
    with pytest.raises(Crash, match="cuda_oom"):
        point(256, m)


@pytest.mark.parametrize("overrides", [
    {"ep_size": 8, "mem_fraction_static": 0.75, "max_running_requests": 512},
    {"moe_runner_backend": "flashinfer_trtllm"},
])
def test_warmup_failures(overrides: dict[str, object]) -> None:
    m = model(**overrides)
    assert m.failure is not None and m.failure.phase == "warmup" and m.failure.kind == "cutlass_tile"
    assert any("128x256x128" in line for line in m.failure_logs["cutlass_tile"])


def test_max_running_requests_queues() -> None:
    m = model(max_running_requests=4)
    s = Scheduler(m)
    for i in range(10):
        s.submit(SimRequest(rid=str(i), prompt_len=8, max_new_tokens=4, stop_at=4))
    s.next_step()
    assert len(s.running) == 4 and len(s.waiting) == 6


def test_kv_capacity_limits_admission() -> None:
    m = resolve(load_profile("tiny"), {}, noise_cv=0.0)
    object.__setattr__(m, "kv_capacity_tokens", 100)
    s = Scheduler(m)
    for i in range(5):
        s.submit(SimRequest(rid=str(i), prompt_len=30, max_new_tokens=10, stop_at=10))
    s.next_step()
    assert len(s.running) == 2  # 2 x 40 tokens fit in 100, a third would not


def test_noise_is_seeded_and_has_the_asked_spread() -> None:
    m = resolve(load_profile("glm5-sm120"), BASE, noise_cv=0.05)
    a = [Scheduler(m, seed=3).noise_factor() for _ in range(3)]
    b = [Scheduler(m, seed=3).noise_factor() for _ in range(3)]
    assert a == b
    s = Scheduler(m, seed=1)
    xs = [s.noise_factor() for _ in range(200_000)]
    mean = sum(xs) / len(xs)
    sd = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5
    assert sd == pytest.approx(0.05, rel=0.3)


def test_unknown_profile_names_the_bundled_ones() -> None:
    with pytest.raises(ProfileError, match="glm5-sm120"):
        load_profile("no-such-profile")


def test_a_failure_in_no_phase_is_refused_not_silently_never_raised() -> None:
    profile = load_profile("tiny")
    bad = {**profile, "rule": [{"when": {}, "note": "typo", "fail": {"phase": "laod", "kind": "cuda_oom"}}]}
    with pytest.raises(ProfileError, match=r"fail.phase must be warmup or load, got 'laod' \(rule: typo\)"):
        resolve(bad, {})
