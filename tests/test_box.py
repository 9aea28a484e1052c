"""judge/box.py: the box's shift, read from the launches its latest nights made of the references' own builds, and
references moved by it with its error in the test, and named where it is beyond chance (a drifting box is not a
build's regression)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pytest_glm5.judge import box
from pytest_glm5.judge.baselines import BaselineStore
from pytest_glm5.judge.carry import digest
from pytest_glm5.judge.family import tested as launches_tested
from pytest_glm5.judge.gate import PerfGate
from pytest_glm5.judge.provenance import Provenance
from pytest_glm5.judge.stats import compare
from pytest_glm5.judge.verdicts import Kind
from pytest_glm5.report.terminal import box_lines

REF = [99.0, 101.0, 100.0, 98.0, 102.0, 100.0, 99.5, 100.5]
KEY = ("s", "output_throughput")


def baselines(root: Path) -> Path:
    (root / "hw").mkdir(parents=True, exist_ok=True)
    path = root / "hw" / "m.toml"
    path.write_text("".join(
        f"[{c}.s.output_throughput]\nfloor = 100.0\ntolerance = 0.05\ntolerance_why = 'hand-set'\n"
        f"launches = {REF}\nprovenance = {{build = 'b0'}}\n\n" for c in ("a", "b")))
    return path


def nights(path: Path, reads: list[float], build: str = "b0") -> list[dict[str, Any]]:
    """Nights of the reference's build on configs a and b, one launch each a night at these values."""
    store = BaselineStore(path)
    out = []
    for i, x in enumerate(reads):
        series = []
        for c in ("a", "b"):
            b = store.bound(c, *KEY)
            assert b is not None and b.build == "b0"
            series.append({"config": c, "scenario": "s", "metric": "output_throughput", "build": build,
                           "ref": digest([list(b.launches), b.tolerance, b.value]), "workload": "w",
                           "launches": [x], "verdict": "pass"})
        out.append({"time": f"2027-01-{i + 1:02d}", "series": series})
    return out


def judged(root: Path, runs: list[dict[str, Any]], tonight: list[float]) -> Any:
    gate = PerfGate(root, history=lambda hardware, model: runs)
    bound = BaselineStore(root / "hw" / "m.toml").bound("a", *KEY)
    assert bound is not None
    prov = Provenance("hw", "m", "", "sim", "", build="b1", workload={})
    return gate.against_reference("a", *KEY, list(tonight), list(tonight), bound, prov, gate.look(3))


def test_a_box_that_reads_its_references_slower_moves_them(tmp_path: Path) -> None:
    path = baselines(tmp_path)
    drifted = nights(path, [97.1, 96.8, 97.2, 96.9, 97.0])  # the reference's own build, 3% slower for 5 nights
    tonight = [94.2, 93.8, 94.5]  # a new build: 3% below the box as it reads b0 now, 6% below the recorded
    v = judged(tmp_path, drifted, tonight)
    assert v.stat["box"]["shift"] < -0.025 and v.stat["box"]["launches"] == 10 and v.stat["box"]["configs"] == 2
    assert v.stat["against"].startswith("8 reference launches moved by the box (the box reads the references' own "
                                        "builds -3.0% on its last 5 nights (10 launches of 2 configs))"), v.stat
    assert -0.04 < v.stat["change"] < -0.02 and v.verdict != Kind.REGRESSION, v.line()
    # The same launches against the recorded reference (no nights of b0 to read the box by): a 6% drop, confirmed.
    alone = judged(tmp_path, [], tonight)
    assert "box" not in alone.stat and alone.stat["change"] < -0.05 and alone.verdict == Kind.REGRESSION, alone.line()


def test_a_box_whose_nights_agree_with_the_references_moves_them_by_its_estimate_and_its_error(tmp_path: Path
                                                                                               ) -> None:
    path = baselines(tmp_path)
    steady = nights(path, [100.4, 99.1, 100.9, 99.6, 100.2])  # b0 as recorded: within chance
    v = judged(tmp_path, steady, [94.2, 93.8, 94.5])
    # Moved by what the nights read (+0.1%, within chance), never by a pre-test's 0 or nothing: the shift's standard
    # error is in the test, and the summary does not call it news.
    box = v.stat["box"]
    assert not box["beyond"] and abs(box["shift"]) < 0.005 and 0 < box["se"] < 0.005, box
    assert v.verdict == Kind.REGRESSION and box_lines([v]) == [], v.line()
    moved = compare(launches_tested(v), v.stat["reference"], True)
    assert v.stat["p_worse"] > moved.p_worse  # the same launches and reference without the shift's error
    # Launches of another build are no control: a patch may have slowed them.
    other = nights(path, [97.1, 96.8, 97.2, 96.9, 97.0], build="b2")
    assert "box" not in judged(tmp_path, other, [94.2, 93.8, 94.5]).stat


def test_references_of_another_session_are_moved_by_their_own_shift(tmp_path: Path) -> None:
    # a and b recorded on one day, c and d later: since a's session the box (and the host's share of the figure)
    # moved +20%, since c's nothing. Pooled over both sessions the shift moved c's reference up with a's, and an
    # unchanged c read as a confirmed regression (issue 39's tp8-mtp single-stream median TTFT).
    (tmp_path / "hw").mkdir()
    path = tmp_path / "hw" / "m.toml"
    path.write_text("".join(
        f"[{c}.s.output_throughput]\nfloor = 100.0\ntolerance = 0.05\ntolerance_why = 'hand-set'\nlaunches = {REF}\n"
        f"updated = '{day}'\nprovenance = {{build = 'b0', commit = '{commit}'}}\n\n"
        for c, day, commit in (("a", "2027-01-01", "x1"), ("b", "2027-01-01", "x1"), ("c", "2027-01-05", "y2"),
                               ("d", "2027-01-05", "y2"))))
    store = BaselineStore(path)
    bound = store.bound("c", *KEY)
    assert bound is not None and bound.recorded == "2027-01-05 y2"
    runs = []
    for i, (old, new) in enumerate(zip([120.5, 119.2, 120.8, 119.6, 120.1], [100.4, 99.1, 100.9, 99.6, 100.2],
                                       strict=True)):
        series = []
        for c, x in (("a", old), ("b", old), ("c", new), ("d", new)):
            b = store.bound(c, *KEY)
            assert b is not None
            series.append({"config": c, "scenario": "s", "metric": "output_throughput", "build": "b0",
                           "ref": digest([list(b.launches), b.tolerance, b.value]), "workload": "w",
                           "launches": [x], "verdict": "pass"})
        runs.append({"time": f"2027-01-{i + 6:02d}", "series": series})
    gate = PerfGate(tmp_path, history=lambda hardware, model: runs)
    prov = Provenance("hw", "m", "", "sim", "", build="b1", workload={})
    tonight = [99.8, 100.3, 100.1]  # c as it was recorded
    v = gate.against_reference("c", *KEY, list(tonight), list(tonight), bound, prov, gate.look(3))
    assert not v.stat["box"]["beyond"] and abs(v.stat["box"]["shift"]) < 0.005 and v.verdict == Kind.PASS, v.line()
    # a's references are still moved by their session's shift: the line names the session.
    a = store.bound("a", *KEY)
    assert a is not None
    w = gate.against_reference("a", *KEY, [120.0, 119.7, 120.4], [120.0, 119.7, 120.4], a, prov, gate.look(3))
    assert 0.17 < w.stat["box"]["shift"] < 0.23 and w.stat["box"]["recorded"] == "2027-01-01 x1", w.stat
    assert "recorded 2027-01-01 x1 +20.0%" in w.stat["against"] and w.verdict == Kind.PASS, w.line()


def test_a_bad_launch_of_the_references_build_does_not_move_the_box(tmp_path: Path) -> None:
    # One launch 15% slow on both configs (a cold clock): the box is the other launches; with it, the mean read -3%
    # and moved every reference down by it, so a true drop read 3% smaller (the heavy-tail cell of
    # scripts/simulate_nights.py confirmed 30% within 3 nights where it had read 47%).
    path = baselines(tmp_path)
    v = judged(tmp_path, nights(path, [100.4, 99.1, 85.0, 99.6, 100.2]), [94.2, 93.8, 94.5])
    assert abs(v.stat["box"]["shift"]) < 0.005 and v.stat["box"]["launches"] == 8, v.stat["box"]


def test_a_scenario_only_one_config_runs_borrows_its_metrics_shift_over_every_scenario() -> None:
    # The reference config's own scenarios (chat, agentic, trace) are run by it alone: their kind never reads two
    # configs, and without a shift their long samples read a drift of the box as a drop (scripts/simulate_nights.py
    # --drift). They borrow the shift of their metric over every scenario.
    def entry(config: str, scenario: str, x: float) -> dict[str, Any]:
        return dict(config=config, scenario=scenario, metric="output_throughput", build="b0", ref="r",
                    launches=[x], verdict="pass")

    runs = [{"series": [entry("a", "sweep", 97.0 + 0.1 * i), entry("b", "sweep", 96.9 - 0.1 * i),
                        entry("a", "chat", 97.1 + 0.05 * i)]} for i in range(5)]
    shifts = box.of(runs, lambda key, build, ref: (math.log(100.0), True, "d1") if (build, ref) == ("b0", "r")
                    else None)
    own = shifts[("chat", "output_throughput", "d1")]
    assert own.launches == 5 and own.configs == 1 and not own.usable  # one config's five launches
    borrowed = box.for_series(shifts, "chat", "output_throughput", "d1")
    assert borrowed is shifts[(box.ANY, "output_throughput", "d1")] and borrowed is not None and borrowed.usable
    assert borrowed.launches == 15 and borrowed.configs == 2 and -0.035 < borrowed.shift < -0.025, borrowed
    assert box.for_series(shifts, "sweep", "output_throughput", "d1") is shifts[("sweep", "output_throughput", "d1")]
    assert box.for_series(shifts, "chat", "median_ttft_ms", "d1") is None  # a metric no night read: nothing moves
