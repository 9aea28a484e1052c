"""Baseline updates: comments stay with their table, passing entries untouched, no floor lowered by a stale writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_glm5.judge.baselines import BaselineStore, write_updates
from pytest_glm5.judge.verdicts import Verdict

FILE = """[defaults]
tolerance = 0.05

[tp8.single.output_throughput]
floor = 10.0

# ep8 crashes under load: its floors are from the memory-safe runs
[ep8.single.output_throughput]
floor = 5.0
"""


def test_update_keeps_comments_with_their_table_and_a_blank_line_before_headers(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(FILE)
    write_updates(path, [Verdict("tp8", "dual", "output_throughput", 20.0, None, "new"),
                         Verdict("new", "s", "output_throughput", 1.0, None, "new")], today="2026-12-02")
    text = path.read_text()
    comment = text.index("# ep8 crashes")
    assert text.index("[tp8.dual.output_throughput]") < comment < text.index("[ep8.single.output_throughput]")
    assert "\n\n# ep8 crashes under load: its floors are from the memory-safe runs\n[ep8.single" in text
    for header in ("[tp8.dual.output_throughput]", "[new.s.output_throughput]"):
        assert f"\n\n{header}\n" in text, text
    assert BaselineStore(path).bound("tp8", "dual", "output_throughput") is not None


def test_update_all_leaves_passing_entries_alone(pytester: pytest.Pytester) -> None:
    from pytest_glm5.judge.baselines import select_updates
    from pytest_glm5.judge.verdicts import Bound

    b = Bound("output_throughput", "floor", 10.0, 0.05)
    verdicts = [Verdict("c", "s", "output_throughput", 10.1, b, "pass"),
                Verdict("c", "t", "output_throughput", 8.0, b, "regression")]
    assert [v.scenario for v in select_updates(verdicts, "all")] == ["t"]
    assert select_updates(verdicts, "new") == []


def test_stale_writer_never_lowers_a_floor_another_raised(tmp_path: Path) -> None:
    from pytest_glm5.judge.verdicts import Bound

    path = tmp_path / "m.toml"
    path.write_text(FILE)
    stale = Bound("output_throughput", "floor", 10.0, 0.05)
    # Writer A raised the floor to 12; writer B read the file before that and measured 11 (an improvement to it).
    write_updates(path, [Verdict("tp8", "single", "output_throughput", 12.0, stale, "improvement")])
    changes = write_updates(path, [Verdict("tp8", "single", "output_throughput", 11.0, stale, "improvement")])
    assert changes == []
    assert BaselineStore(path).bound("tp8", "single", "output_throughput").value == 12.0  # type: ignore[union-attr]
    # An explicit regression update (=all) does lower it.
    write_updates(path, [Verdict("tp8", "single", "output_throughput", 9.0, stale, "regression")])
    assert BaselineStore(path).bound("tp8", "single", "output_throughput").value == 9.0  # type: ignore[union-attr]
