"""Baselines files: validation, verdicts, round-trip updates, atomic and concurrent writes."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from pytest_glm5.judge.baselines import BaselineError, BaselineStore, judge, write_updates
from pytest_glm5.judge.verdicts import Bound, Verdict


def store(tmp_path: Path, text: str) -> BaselineStore:
    p = tmp_path / "b.toml"
    p.write_text(text)
    return BaselineStore(p)


@pytest.mark.parametrize(("text", "message"), [
    ("[tp8.s.output_throughput]\nfloor = 1\nfloar = 2\n", "[tp8.s.output_throughput]: unknown key 'floar'"),
    ("[tp8.s.output_throughput]\nfloor = \"ten\"\n", "[tp8.s.output_throughput]: floor must be a number"),
    ("[tp8.s.output_throughput]\nfloor = 1\ntolerance = -0.1\n", "tolerance must be a fraction in [0, 1)"),
    ("[tp8.s.output_throughput]\nfloor = 1\ntolerance = 1.0\n", "tolerance must be a fraction in [0, 1)"),
    ("[defaults]\ntolerance = 2\n", "[defaults]: tolerance must be a fraction"),
    ("[defaults]\ntolerence = 0.1\n", "[defaults]: unknown key 'tolerence'"),
    ("[tp8.s.output_tput]\nfloor = 1\n", "'output_tput' is not a known metric name"),
    ("[tp8.s.p99_ttft_ms]\nfloor = 1\n", "p99_ttft_ms is lower is better, so it takes a ceiling, not a floor"),
    ("[tp8.s.output_throughput]\nmeasured = 1\n", "needs exactly one of floor or ceiling"),
    ("[tp8.s.output_throughput\nfloor = 1\n", "invalid TOML"),
    ("tp8 = 3\n", "'tp8' must be a table of scenarios"),
    # Numbers that parse but mean nothing: each passed or printed nonsense before (issue 28).
    ("[tp8.s.output_throughput]\nfloor = nan\n", "floor must be a finite number > 0, got nan"),
    ("[tp8.s.output_throughput]\nfloor = -5\n", "floor must be a finite number > 0, got -5"),
    ("[tp8.s.output_throughput]\nfloor = inf\n", "floor must be a finite number > 0, got inf"),
    ("[tp8.s.p99_ttft_ms]\nceiling = nan\n", "ceiling must be a finite number >= 0, got nan"),
    ("[tp8.s.output_throughput]\nfloor = 1\nmeasured = nan\n", "measured must be a finite number > 0"),
    ("[tp8.s.output_throughput]\nfloor = 1\ntolerance = nan\n", "tolerance must be a fraction in [0, 1)"),
    ("[tp8.s.output_throughput]\nfloor = 1\nlaunches = [1.0, nan]\n", "launches must be a list of positive"),
    # 0 is an attainment's value (no request within the SLO), never a throughput's; below 0 is nobody's.
    ("[tp8.s.output_throughput]\nfloor = 0\n", "floor must be a finite number > 0, got 0"),
    ("[tp8.s.slo_attainment]\nfloor = -0.1\n", "floor must be a finite number >= 0, got -0.1"),
    ("[tp8.s.slo_attainment]\nfloor = 0.5\nlaunches = [0.0, -1.0]\n", "launches must be a list of numbers >= 0"),
    ("[defaults]\nlatency_slack_ms = nan\n", "[defaults]: latency_slack_ms must be a finite number >= 0"),
    ("[defaults]\nlatency_slack_ms = inf\n", "[defaults]: latency_slack_ms must be a finite number >= 0"),
    ("[costs.tp8]\nload_s = nan\n", "[costs.tp8]: load_s must be a finite number >= 0 and <= 604800, got nan"),
    ("[costs.tp8]\nload_s = inf\n", "[costs.tp8]: load_s must be a finite number"),
    ("[costs.tp8]\nload_s = 1e300\n", "[costs.tp8]: load_s must be a finite number >= 0 and <= 604800"),
    ("[costs.tp8]\nmeasure_s = -1\n", "[costs.tp8]: measure_s must be a finite number >= 0"),
    ("costs = 5\n", "costs must be a table of [costs.CONFIG] tables"),
    ("[targets.single]\noutput_tput = 100\n", "[targets.single]: 'output_tput' is not a known metric name"),
    ("[targets.single]\noutput_throughput = -1\n", "[targets.single]: target must be a finite number > 0"),
    ("targets = 5\n", "targets must be a table of [targets.SCENARIO] tables"),
])
def test_validation_names_file_table_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BaselineError) as exc:
        store(tmp_path, text)
    assert str(tmp_path / "b.toml") in str(exc.value)
    assert message in str(exc.value)


def test_an_slo_point_that_no_request_met_is_recorded_as_zero(tmp_path: Path) -> None:
    """The ladder's top point misses by design: its attainment of 0 (and a capacity of 0) is a reference to keep."""
    s = store(tmp_path, "[tp8.c64.slo_attainment]\nfloor = 0.0\nlaunches = [0.0, 0.0]\n"
                        "[tp8.cap.slo_capacity]\nfloor = 0\n")
    assert s.bound("tp8", "c64", "slo_attainment").value == 0.0  # type: ignore[union-attr]


def test_a_target_for_every_config_unless_an_entry_sets_its_own(tmp_path: Path) -> None:
    """The campaign's 100 tok/s is the box's aim, whichever config reaches it: [targets] sets it once."""
    s = store(tmp_path, "[targets.natural-single]\noutput_throughput = 100\n"
                        "[tp8.natural-single.output_throughput]\nfloor = 10\n"
                        "[mtp.natural-single.output_throughput]\nfloor = 22\ntarget = 150\n"
                        "[tp8.other.output_throughput]\nfloor = 10\n")
    assert [s.bound(c, sc, "output_throughput").target  # type: ignore[union-attr]
            for c, sc in (("tp8", "natural-single"), ("mtp", "natural-single"), ("tp8", "other"))] == [100, 150, None]
    assert not s.has_config("targets") and {c for c, *_ in s.entries()} == {"tp8", "mtp"}


def test_verdicts_floor_and_ceiling() -> None:
    floor = Bound("output_throughput", "floor", 10.36, 0.05)
    assert judge("tp8", "single-stream", "output_throughput", [8.9], floor).verdict == "regression"
    assert judge("tp8", "single-stream", "output_throughput", [10.0], floor).verdict == "pass"
    assert judge("tp8", "single-stream", "output_throughput", [11.0], floor).verdict == "improvement"
    ceil = Bound("p99_ttft_ms", "ceiling", 100.0, 0.1)
    assert judge("tp8", "s", "p99_ttft_ms", [111.0], ceil).verdict == "regression"
    assert judge("tp8", "s", "p99_ttft_ms", [85.0], ceil).verdict == "improvement"
    slack = Bound("p99_ttft_ms", "ceiling", 2.0, 0.1, slack=10.0)
    assert judge("tp8", "s", "p99_ttft_ms", [11.5], slack).verdict == "pass"
    assert judge("tp8", "s", "p99_ttft_ms", [12.5], slack).verdict == "regression"
    assert judge("tp8", "s", "output_throughput", [5.0], None).verdict == "new"


def test_regression_line_reads_at_a_glance() -> None:
    v = judge("tp8", "single-stream", "output_throughput", [8.9], Bound("output_throughput", "floor", 10.36, 0.05))
    assert v.line() == ("tp8 single-stream output_throughput 8.900 tok/s < floor 10.36 tok/s (-14.1%, tolerance 5%; "
                        "provisional: recorded from 1 launch)")


def test_median_of_repeats_decides_not_the_minimum() -> None:
    floor = Bound("output_throughput", "floor", 100.0, 0.05)
    v = judge("c", "s", "output_throughput", [50.0, 100.0, 101.0], floor)
    assert v.measured == 100.0 and v.verdict == "pass"
    assert judge("c", "s", "output_throughput", [50.0, 60.0, 101.0], floor).verdict == "regression"


COMMENTED = """# Baselines for a test box.
[defaults]
tolerance = 0.05  # five percent

# the reference config
[tp8.single-stream.output_throughput]
floor = 10.0  # from the campaign
source = "campaign"

[tp8.dual-stream.output_throughput]
floor = 19.0
"""


def verdict(metric: str, value: float, kind: str, scenario: str = "single-stream") -> Verdict:
    return Verdict("tp8", scenario, metric, value, None, kind, {"min": value, "max": value, "cv": 0.0, "n": 1})


def test_update_keeps_comments_and_order(tmp_path: Path) -> None:
    p = tmp_path / "b.toml"
    p.write_text(COMMENTED)
    changes = write_updates(p, [verdict("output_throughput", 11.5, "improvement"),
                                verdict("p99_ttft_ms", 250.0, "new")], {"commit": "abc"}, today="2026-12-02")
    text = p.read_text()
    for comment in ("# Baselines for a test box.", "tolerance = 0.05  # five percent", "# the reference config",
                    'source = "campaign"'):
        assert comment in text
    assert "floor = 11.5" in text and "# from the campaign" in text
    assert text.index("single-stream.output_throughput") < text.index("dual-stream.output_throughput")
    s = BaselineStore(p)
    assert s.bound("tp8", "single-stream", "p99_ttft_ms") == Bound("p99_ttft_ms", "ceiling", 250.0, 0.05, 250.0,
                                                                   recorded="2026-12-02 abc")
    assert [c.line() for c in changes] == [
        "tp8 single-stream output_throughput: 10.00 -> 11.50 (improvement)",
        "tp8 single-stream p99_ttft_ms: new -> 250.00 (new)"]


def _writer(path: str, worker: int, n: int) -> None:
    for i in range(n):
        write_updates(Path(path), [Verdict(f"w{worker}", f"s{i}", "output_throughput", float(i + 1), None, "new",
                                           {})], {"worker": worker})


def test_concurrent_writers_both_land(tmp_path: Path) -> None:
    p = tmp_path / "b.toml"
    p.write_text("# shared\n")
    procs = [multiprocessing.get_context("fork").Process(target=_writer, args=(str(p), w, 15)) for w in (1, 2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    s = BaselineStore(p)
    for w in (1, 2):
        for i in range(15):
            assert s.bound(f"w{w}", f"s{i}", "output_throughput") is not None, (w, i)
    assert p.read_text().startswith("# shared")


def test_failed_replace_leaves_the_original_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "b.toml"
    p.write_text(COMMENTED)

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("pytest_glm5.textfiles.os.replace", refuse)
    with pytest.raises(PermissionError):
        write_updates(p, [verdict("output_throughput", 99.0, "improvement")], {})
    assert p.read_text() == COMMENTED
    assert [f.name for f in tmp_path.iterdir() if f.name.endswith(".tmp")] == []


def test_recording_never_widens_the_tolerance_from_noise(tmp_path: Path) -> None:
    # The tolerance is the practical threshold (the file's [defaults] or what the user writes), never 3x the
    # measured spread: with that, a 30% drop passed on perfect data (issue 20; c979bd9 wrote tolerance = 0.36).
    path = tmp_path / "m.toml"
    path.write_text("[defaults]\ntolerance = 0.05\n")
    noisy = {"min": 70.0, "max": 130.0, "cv": 0.12, "n": 6}
    write_updates(path, [Verdict("c", "s", "output_throughput", 100.0, None, "new", noisy,
                                 launches=[90.0, 100.0, 110.0])])
    bound = BaselineStore(path).bound("c", "s", "output_throughput")
    assert bound is not None and bound.tolerance == 0.05
    assert "tolerance" not in path.read_text().split("[c.s.output_throughput]")[1]


WIDENED = """[defaults]
tolerance = 0.05

[c.s.output_throughput]
floor = 100.0
spread = {min = 70.0, max = 130.0, cv = 0.12, n = 6}
tolerance = 0.36

[c.s.p99_ttft_ms]
ceiling = 9.0
spread = {min = 8.0, max = 10.0, cv = 0.05, n = 6}
tolerance = 0.2
tolerance_why = "tail latency of 64 requests: only a 20% rise is worth a red build"

[c.t.output_throughput]
floor = 50.0
tolerance = 0.1
"""


def test_tolerances_widened_from_noise_are_ignored_and_migrated(tmp_path: Path) -> None:
    # Recorded entries (with `spread`) whose tolerance gives no why were widened by the old 3 x CV rule: the gate
    # judges them at [defaults], and the next --update-baselines removes them and says which. A tolerance someone
    # wrote (tolerance_why, or a hand-written entry without spread) is theirs and stays.
    path = tmp_path / "m.toml"
    path.write_text(WIDENED)
    st = BaselineStore(path)
    assert st.widened() == ["c.s.output_throughput"]
    tolerances = [b.tolerance if (b := st.bound("c", s, m)) else None
                  for s, m in [("s", "output_throughput"), ("s", "p99_ttft_ms"), ("t", "output_throughput")]]
    assert tolerances == [0.05, 0.2, 0.1]
    changes = write_updates(path, [Verdict("c", "t", "output_throughput", 60.0, None, "improvement")])
    assert [c.line() for c in changes][1:] == [
        "c s output_throughput: 100.00 -> 100.00 (tolerance 0.36 removed: an old recording widened it from the "
        "spread; the tests weigh the spread, the practical threshold is [defaults] 0.05)"]
    after = BaselineStore(path)
    assert after.widened() == [] and "tolerance = 0.36" not in path.read_text()
    assert after.bound("c", "s", "p99_ttft_ms").tolerance == 0.2  # type: ignore[union-attr]


def test_no_shipped_baseline_carries_a_tolerance_widened_from_noise() -> None:
    shipped = sorted((Path(__file__).parent.parent / "baselines").glob("*/*.toml"))
    assert shipped and {str(p): BaselineStore(p).widened() for p in shipped} == {str(p): [] for p in shipped}


def test_a_recorded_distribution_is_kept_once_per_family_and_filled_in_where_missing(tmp_path: Path) -> None:
    p = tmp_path / "b.toml"
    p.write_text("[defaults]\ntolerance = 0.05\n\n[tp8.c8.p99_ttft_ms]\nceiling = 9.0\n\n[tp8.c8.median_ttft_ms]\n"
                 "ceiling = 5.0\n")
    cdf = [float(x) for x in range(21)]

    def measured(metric: str, value: float, kind: str, scenario: str = "c8") -> Verdict:
        return Verdict("tp8", scenario, metric, value, None, kind, cdf=cdf)

    # A new scenario records one TTFT and one ITL distribution, not one per metric.
    changes = write_updates(p, [measured("p99_ttft_ms", 9.0, "new", "c1"), measured("mean_ttft_ms", 4.0, "new", "c1"),
                                measured("p99_itl_ms", 2.0, "new", "c1")], {})
    assert len(changes) == 3
    s = BaselineStore(p)
    assert s.bound("tp8", "c1", "p99_ttft_ms").cdf == tuple(cdf)  # type: ignore[union-attr]
    assert s.bound("tp8", "c1", "mean_ttft_ms").cdf == ()  # type: ignore[union-attr]
    assert s.bound("tp8", "c1", "p99_itl_ms").cdf == tuple(cdf)  # type: ignore[union-attr]
    # An entry recorded before distributions were kept gains one from a passing measurement; its bound stays.
    changes = write_updates(p, [], {}, distributions=[measured("median_ttft_ms", 5.1, "pass"),
                                                      measured("p99_ttft_ms", 9.1, "pass")])
    assert [c.line() for c in changes] == [
        "tp8 c8 median_ttft_ms: 5.000 -> 5.000 (bound kept; its TTFT distribution recorded, 21 quantiles, for the "
        "page)"]
    s = BaselineStore(p)
    assert s.bound("tp8", "c8", "median_ttft_ms").cdf == tuple(cdf)  # type: ignore[union-attr]
    assert s.bound("tp8", "c8", "median_ttft_ms").value == 5.0  # type: ignore[union-attr]
    # Once there, it is not filled in again.
    assert write_updates(p, [], {}, distributions=[measured("p99_ttft_ms", 9.1, "pass")]) == []
    # A rewritten entry takes its family's distribution over: still one per scenario and family.
    newer = [x + 1 for x in cdf]
    write_updates(p, [Verdict("tp8", "c1", "mean_ttft_ms", 3.0, None, "improvement", cdf=newer)], {})
    s = BaselineStore(p)
    assert s.bound("tp8", "c1", "mean_ttft_ms").cdf == tuple(newer)  # type: ignore[union-attr]
    assert s.bound("tp8", "c1", "p99_ttft_ms").cdf == ()  # type: ignore[union-attr]
    assert s.bound("tp8", "c1", "p99_itl_ms").cdf == tuple(cdf)  # type: ignore[union-attr]


@pytest.mark.parametrize("cdf", ["[3.0, 2.0]", "[-1.0, 2.0]", "[1.0]", '["a", "b"]'])
def test_a_distribution_must_rise(tmp_path: Path, cdf: str) -> None:
    with pytest.raises(BaselineError, match=r"\[tp8.s.p99_ttft_ms\]: cdf must be a rising list of numbers >= 0"):
        store(tmp_path, f"[tp8.s.p99_ttft_ms]\nceiling = 1\ncdf = {cdf}\n")
