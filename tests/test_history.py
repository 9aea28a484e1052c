"""The history store as an attacker and a full disk meet it: a write is whole or not at all, a torn line never
swallows the next night, a line of another shape or a date in the future is named instead of crashing or steering
the schedule, and a night is written once however many outputs append it."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from report_docs import night_doc

from pytest_glm5.cli import main as glm5
from pytest_glm5.night.schedule import standing_of
from pytest_glm5.report import history
from pytest_glm5.report.history import HistoryError, Reader, append, load


def _doc(night: int = 1, run_id: str = "r1", **run: Any) -> dict[str, Any]:
    doc = night_doc(night, tests=9)  # configs cfg0 (8 points) and cfg1 (1 point)
    doc["run"].update(run_id=run_id, **run)
    return doc


def _store(root: Path) -> Path:
    [path] = list(root.rglob("*.jsonl"))
    return path


def test_a_short_write_leaves_the_store_as_it_was_and_the_next_night_reads(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    append(tmp_path, _doc(1, "r1"))
    before = _store(tmp_path).read_bytes()
    real = os.write
    calls = []

    def full_disk(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data)[: len(data) // 2])  # half the line fits
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(history.os, "write", full_disk)
    with pytest.raises(HistoryError, match=r"cannot append to the history .*No space left on device; the store is "
                                           r"as it was"):
        append(tmp_path, _doc(2, "r2"))
    monkeypatch.setattr(history.os, "write", real)
    assert _store(tmp_path).read_bytes() == before
    append(tmp_path, _doc(3, "r3"))
    st = load(_store(tmp_path))
    assert st.skipped == [] and [r["runs"] for r in st.runs] == [["r1"], ["r3"]]


def test_a_torn_last_line_stays_alone_and_is_named(tmp_path: Path) -> None:
    append(tmp_path, _doc(1, "r1"))
    path = _store(tmp_path)
    with path.open("ab") as fh:
        fh.write(b'{"time": "2026-09-01T02:00:00+00:00", "series": [{"con')  # a writer killed mid-line
    append(tmp_path, _doc(2, "r2"))
    st = load(path)
    assert [r["runs"] for r in st.runs] == [["r1"], ["r2"]]
    assert len(st.skipped) == 1 and st.skipped[0].startswith(f"{path}:2: not a JSON line")


@pytest.mark.parametrize(("line", "why"), [
    ({"series": [1]}, "series[0] is not an object"),
    ({"series": [], "launched": 5}, "launched 5 is not a list of names"),
    ({"series": [{"config": "cfg0", "scenario": "c1", "metric": "m", "value": 1.0, "verdict": "unresolved",
                  "suspect": True, "to_add": "x"}]}, "series[0] to_add 'x' is not a whole number"),
    ({"series": [{"config": "cfg0", "scenario": "c1", "metric": "m", "value": "fast"}]},
     "series[0] value 'fast' is not a number"),
    ({"series": [{"config": "cfg0", "scenario": "c1", "metric": "m", "value": 1.0, "launches": ["x"]}]},
     "series[0] launches ['x'] is not a list of numbers"),
    ({"series": [{"config": 3, "scenario": "c1", "metric": "m", "value": 1.0}]},
     "series[0] lacks a config, scenario or metric name"),
    ({"series": [], "time": 5}, "time 5 is not text"),
    ([1, 2], "not an object"),
])
def test_a_line_of_another_shape_is_skipped_and_named_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  line: Any, why: str) -> None:
    append(tmp_path, _doc(1, "r1"))
    path = _store(tmp_path)
    with path.open("a") as fh:
        fh.write(json.dumps({"time": "2026-09-01T05:00:00+00:00", **line} if isinstance(line, dict) else line) + "\n")
    append(tmp_path, _doc(2, "r2"))
    st = load(path)
    assert st.skipped == [f"{path}:2: not a glm5 history line ({why}); skipped"]
    assert len(st.runs) == 2
    standing_of(st.runs, dt.date(2026, 9, 2))  # the schedule reads what load returns
    assert glm5(["history", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"{path}:2: not a glm5 history line ({why}); skipped" in err and "2 runs" in out


def test_a_night_dated_in_the_future_counts_as_now_and_is_named(tmp_path: Path) -> None:
    now = dt.datetime(2026, 9, 10, tzinfo=dt.UTC)
    append(tmp_path, _doc(1, "r1", time="2027-01-01T00:00:00+00:00"))
    st = load(_store(tmp_path), now=now)
    assert st.runs[0]["time"] == "2026-09-10T00:00:00+00:00"
    assert st.skipped == [f"{_store(tmp_path)}:1: dated 2027-01-01T00:00:00+00:00, after now: read as now"]
    # The schedule then sees it judged on the 10th, not 'today' until next year.
    assert standing_of(st.runs, dt.date(2026, 9, 12))["cfg0"].nights_ago == 2


def test_the_reader_says_each_skipped_line_once(tmp_path: Path) -> None:
    append(tmp_path, _doc(1, "r1"))
    path = _store(tmp_path)
    with path.open("a") as fh:
        fh.write('{"series": [1]}\n')
    said: list[str] = []
    reader = Reader(tmp_path, said.append)
    key = ("sim-big", "/models/GLM-5-NVFP4")
    assert len(reader.runs([key])) == 1 and len(reader.of(*key)) == 1
    assert said == [f"history: {path}:2: not a glm5 history line (series[0] is not an object); skipped"]


def test_a_night_is_written_once_by_its_shard_and_by_the_merge(tmp_path: Path) -> None:
    shard = _doc(1, "shard-a")
    shard["verdicts"] = [v for v in shard["verdicts"] if v["config"] == "cfg0"]
    assert append(tmp_path, shard)
    merged = _doc(1, "", run_ids=["shard-a", "shard-b"])
    merged["run"].pop("run_id")
    assert append(tmp_path, merged)  # cfg1 was in no line yet: it is added, cfg0 is not again
    st = load(_store(tmp_path))
    assert [sorted({s["config"] for s in r["series"]}) for r in st.runs] == [["cfg0"], ["cfg1"]]
    assert append(tmp_path, merged) == []  # the whole night is there: nothing appended
    assert len(load(_store(tmp_path)).runs) == 2


def test_a_store_that_cannot_be_read_is_said_and_carries_nothing(tmp_path: Path) -> None:
    # A directory where the store should be: the gate's reading of it failed the test with a bare exception.
    key = ("sim-big", "/models/GLM-5-NVFP4")
    history.store_path(tmp_path, *key).mkdir(parents=True)
    said: list[str] = []
    assert Reader(tmp_path, said.append).of(*key) == []
    assert len(said) == 1 and "Is a directory; nothing carries from it tonight" in said[0], said


@pytest.mark.parametrize("run", ['"x"', "[1]", "5"])
def test_glm5_merge_names_a_report_whose_run_is_not_an_object(tmp_path: Path, run: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(f'{{"verdicts": [], "run": {run}}}')
    assert glm5(["merge", str(bad)]) == 2
    assert f"{bad}: not a --glm5-report file (run is a " in capsys.readouterr().err


def test_glm5_history_of_only_bad_lines_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "hw" / "m.jsonl"
    store.parent.mkdir()
    store.write_text('{"series": 5}\n[]\n')
    assert glm5(["history", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("not a glm5 history line") == 2
    assert err.rstrip().endswith("it holds no readable run (2 lines skipped, named above)"), err


def test_glm5_compare_names_a_value_that_is_not_finite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"verdicts": [{"config": "t", "scenario": "c1", "metric": "output_throughput",
                                             "measured": float("nan"), "verdict": "pass", "model": "m",
                                             "provenance": {"hardware": "x"}}]}))
    assert glm5(["compare", str(bad), str(bad)]) == 2
    assert "verdict 0 (t c1 output_throughput) has a value that is not a finite number > 0" in capsys.readouterr().err
