"""Change points on synthetic nightly histories (CV 2%), as the history issue asks; rates over many seeds, so a
test does not hang on one lucky draw."""

from __future__ import annotations

import random

from pytest_glm5.report.changepoints import find, trend

SEEDS = 100


def nights(seed: int, n: int = 90, cv: float = 0.02, step_at: int | None = None, step: float = 0.95,
           outlier_at: int | None = None) -> list[float]:
    rng = random.Random(seed)
    out = [1000.0 * rng.lognormvariate(0, cv) for _ in range(n)]
    if step_at is not None:
        out[step_at:] = [x * step for x in out[step_at:]]
    if outlier_at is not None:
        out[outlier_at] *= 0.85
    return out


def test_a_5pct_step_at_night_60_is_found_within_one_night_with_its_size() -> None:
    hits = 0
    for seed in range(SEEDS):
        steps = find(nights(seed, step_at=60))
        near = [s for s in steps if abs(s.index - 60) <= 1]
        if near:
            hits += 1
            lo, hi = near[0].ci
            assert lo < near[0].change < hi < 0, near[0]
            assert -0.08 < near[0].change < -0.02
    assert hits >= 0.9 * SEEDS, f"found within one night in {hits} of {SEEDS} histories"


def test_flat_nights_give_no_change_point() -> None:
    marked = sum(bool(find(nights(seed))) for seed in range(SEEDS))
    assert marked <= 0.05 * SEEDS, f"change points in {marked} of {SEEDS} flat histories"


def test_a_single_outlier_night_is_not_a_change_point() -> None:
    marked = sum(any(abs(s.index - 45) <= 1 for s in find(nights(seed, outlier_at=45))) for seed in range(SEEDS))
    assert marked == 0, f"the outlier night was a change point in {marked} of {SEEDS} histories"


def test_the_step_size_and_trend_are_measured() -> None:
    steps = find(nights(7, step_at=60, step=0.9, cv=0.01))
    assert [s.index for s in steps] == [60]
    assert abs(steps[0].change - (-0.1)) < 0.01
    assert "p " in steps[0].describe() and steps[0].describe().startswith("-")
    rising = [1000.0 * 1.01**i for i in range(20)]
    t = trend(rising)
    assert t is not None and abs(t - 0.01) < 1e-6
    assert trend([1.0, 2.0]) is None
