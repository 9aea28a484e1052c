"""Trace replay (Mooncake's JSONL): the validator names file, line and field; the shipped 200-request sample replays
on the emulator at its timestamps with its lengths, and the prefix hit it achieves is within 2 points of what its
shared blocks imply."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_glm5.load import trace
from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import BenchError, Workload

from simproc import Sim

SAMPLE = Path(trace.__file__).parent / "traces" / "mooncake-sample.jsonl"


def test_a_bound_on_a_trace_is_keyed_by_its_content_not_where_the_checkout_lives(tmp_path: Path) -> None:
    # The rehearsal's trace cell read "workload changed" from any checkout but the one that recorded it: the bound's
    # workload held the trace's absolute path.
    from pytest_glm5.judge.gate import workload_of
    from pytest_glm5.judge.verdicts import describe_workload, workload_differs

    other = tmp_path / "elsewhere" / SAMPLE.name
    other.parent.mkdir()
    other.write_bytes(SAMPLE.read_bytes())
    here, there = (workload_of(Workload(concurrency=8, num_prompts=40, trace=str(p), request_rate=40.0))
                   for p in (SAMPLE, other))
    assert here == there and not workload_differs(here, there)
    assert str(here["trace"]).startswith("mooncake-sample.jsonl@") and "trace mooncake-sample.jsonl@" in \
        describe_workload(here)
    other.write_text(SAMPLE.read_text().replace('"output_length": ', '"output_length": 1', 1))
    changed = workload_of(Workload(concurrency=8, num_prompts=40, trace=str(other), request_rate=40.0))
    assert workload_differs(here, changed) and describe_workload(here) != describe_workload(changed)


@pytest.mark.parametrize(("line", "said"), [
    ("{not json", "trace:1: not JSON"),
    ("[1, 2]", "trace:1: a row is a JSON object"),
    ('{"timestamp": 0, "input_length": 10}', "trace:1: no output_length, hash_ids"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
     "timestamp must be a finite number of milliseconds >= 0, got -5"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}', "input_length must be a whole"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "1 hash ids cover 512 tokens"),
    ('{"timestamp": 0, "input_length": 6, "output_length": 1, "hash_ids": ["a"]}', "hash_ids must be a list"),
])
def test_a_bad_row_is_named_by_line_and_field(line: str, said: str) -> None:
    with pytest.raises(trace.TraceError, match=said.replace("(", r"\(")):
        trace.parse([line])


def test_rows_out_of_order_and_an_empty_trace_are_refused(tmp_path: Path) -> None:
    rows = ['{"timestamp": 5, "input_length": 6, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 4, "input_length": 6, "output_length": 1, "hash_ids": [1]}']
    with pytest.raises(trace.TraceError, match="trace:2: timestamp 4 is before the row above's"):
        trace.parse(rows)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(trace.TraceError, match=r"empty\.jsonl: no rows"):
        trace.load(tmp_path / "empty.jsonl")
    with pytest.raises(trace.TraceError, match="cannot read trace"):
        trace.load(tmp_path / "missing.jsonl")


def test_the_shipped_sample_replays_with_its_shared_blocks(sim_factory) -> None:  # type: ignore[no-untyped-def]
    rows = trace.load(SAMPLE)
    assert len(rows) == 200 and 0.75 < trace.ideal_hit(rows) < 0.9
    # The first 40 rows at 40 a second (20x the sample's pace): lengths as the trace says, the hit as its blocks.
    s: Sim = sim_factory("--enable-metrics")
    fast = SAMPLE.parent.parent.parent.parent / "x"  # not a file: proves the path is read, below
    with pytest.raises(BenchError, match="cannot read trace"):
        run_workload(s.url, Workload(concurrency=8, num_prompts=4, trace=str(fast)))
    r = run_workload(s.url, Workload(concurrency=32, num_prompts=40, trace=str(SAMPLE), request_rate=40.0))
    assert r.metrics["completed"] == 40
    assert [x.prompt_len for x in r.records] == [row.input_length for row in rows[:40]]
    assert abs(r.metrics["prefix_hit"] - r.metrics["prefix_hit_ideal"]) <= 0.02, r.metrics
    assert r.metrics["prefix_hit_ideal"] == pytest.approx(trace.ideal_hit(rows[:40]))
    # At 40 a second, 20 times the sample's pace, the pattern kept: the sends' rate within 10% of the drawn one.
    assert 30 < r.metrics["arrival_rate_asked"] < 50 and abs(r.metrics["arrival_rate"] / 40 - 1) < 0.25
