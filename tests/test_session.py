"""The run's session built directly, as pytest-xdist's test_dsession.py builds DSession: Settings from plain sources,
plain TestItems, a terminal that records its lines. No pytester, no pytest session: the session is a library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_glm5.session import Glm5Session, RunError
from pytest_glm5.session import TestItem as Item
from pytest_glm5.settings import Settings, Sources


class Lines:
    """A terminal that keeps what it is told."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def isatty(self) -> bool:
        return False

    def rewrite(self, line: str, erase: bool = False) -> None:
        pass


def settings(root: Path, **options: Any) -> Settings:
    """Settings as pytest would resolve them from these command-line options (dest names), nothing else set."""
    sources = Sources(option=lambda dest: options.get(dest), ini=lambda dest: None, env={})
    return Settings.resolve(sources, root, root)


CONFIGS = """
[defaults]
engine = "sim"
sim_profile = "tiny"
model = "/models/session-test"

[config.a]
flags = {}

[config.b]
flags = {}
known_issue = "dies under load"
known_issue_phase = "load"
known_issue_concurrency = 64
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "configs.toml").write_text(CONFIGS)
    return tmp_path


def session(root: Path, lines: Lines | None = None, environ: dict[str, str] | None = None,
            **options: Any) -> Glm5Session:
    return Glm5Session(settings(root, **options), {"gated_markers": {"sm120": "12.0"}}, None,
                       terminal=lambda: lines, environ=environ or {"GLM5_NVML_MODULE": "no_such_nvml"})


ITEMS = [Item("t.py::test_a[c1]", "a", frozenset({"sm120"}), 1),
         Item("t.py::test_b[c1]", "b", frozenset({"sm120"}), 1),
         Item("t.py::test_b[c64]", "b", frozenset({"sm120"}), 64),
         Item("t.py::test_plain", None)]


def test_collection_groups_configs_marks_known_issues_and_plans(root: Path) -> None:
    lines = Lines()
    run = session(root, lines, glm5_sim=True)
    got = run.collect(ITEMS)
    assert got.order == ["t.py::test_plain", "t.py::test_a[c1]", "t.py::test_b[c1]", "t.py::test_b[c64]"]
    assert got.xfails == {"t.py::test_b[c64]": "known issue of b: dies under load"}  # only at its concurrency
    assert got.skips == {} and got.exit is None  # the emulator runs every gated test
    assert any(line.startswith("glm5: plan: 2 configs: first launches") for line in lines.lines), lines.lines
    assert run.tally.config_tests == 3


def test_without_gpus_the_gated_tests_skip_and_the_outcome_says_so(root: Path) -> None:
    run = session(root)
    got = run.collect(ITEMS)
    assert set(got.skips) == {"t.py::test_a[c1]", "t.py::test_b[c1]", "t.py::test_b[c64]"}
    assert all("needs compute capability 12.0 GPUs; found no NVML" in why for why in got.skips.values())
    confirmed, failed = run.finish(False, None, False)
    assert confirmed == [] and not failed and run.outcome is not None
    assert run.outcome.line.startswith("SKIPPED: nothing measured: all 3 sm120 tests skipped (sm120: needs")
    required = session(root, glm5_require_baselines=True)
    required.collect(ITEMS)
    assert required.finish(False, None, False)[1]  # fails: a required night that measured nothing
    tr = Lines()
    required.summary(tr)
    last = next(i for i, line in enumerate(tr.lines) if line.startswith(("PASSED", "FAILED", "SKIPPED")))
    assert tr.lines[last].startswith("FAILED: nothing measured: all 3 sm120 tests skipped")
    assert all(line.startswith("    ") for line in tr.lines[last + 1:])  # the outcome is the last thing said


def test_the_plan_only_run_ends_at_collection(root: Path) -> None:
    assert session(root, glm5_sim=True, glm5_plan=True).collect(ITEMS).exit == (
        "glm5: --glm5-plan: the plan above; nothing was launched", 0)
    empty = session(root, glm5_sim=True, glm5_plan=True).collect([Item("t.py::test_plain", None)])
    assert empty.exit is not None and empty.exit[1] == 5


def test_usage_errors_are_one_line(root: Path) -> None:
    with pytest.raises(RunError, match=r"t.py::x: unknown server config 'zz'; known configs in .*: a, b"):
        session(root, glm5_sim=True).collect([Item("t.py::x", "zz")])
    with pytest.raises(RunError, match="--glm5-build: build 'nope' is not defined"):
        session(root, glm5_sim=True, glm5_build="nope").collect(ITEMS)


def test_the_budget_leaves_a_config_out_and_every_output_names_it(root: Path) -> None:
    run = session(root, glm5_sim=True, glm5_budget="3m")
    run.collect(ITEMS)
    assert run.night.begin("a", 0.0) is None
    why = run.night.begin("b", 0.0)
    assert why is not None and why.startswith("budget 3 min") and why.endswith("(--glm5-budget)")
    run.finish(False, None, False)
    assert run.outcome is not None and "1 config not run (b: budget 3 min" in run.outcome.line
    assert run.document(run.live())["run"]["not_run"] == {"b": why}
