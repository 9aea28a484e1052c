"""pytest-xdist: each config's tests on one worker (one launch per config however many workers), the workers'
runs joined on the controller into one summary, one report, one family decision and one baselines update."""

from __future__ import annotations

import json
import re

import pytest
from plugin_helpers import assert_no_server_left, said_lines, write_configs

pytest.importorskip("xdist")

TWO = """
[config.a]
flags = {}

[config.b]
flags = {}
"""
POINTS = """
import pytest

@pytest.mark.parametrize("c", [1, 2])  # 8 * c requests: a p99 ITL needs 100 gaps a launch
def test_point(perf, glm5_config, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=8 * c, input_len=8, output_len=16, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput", "p99_itl_ms"])
"""


@pytest.mark.slow
def test_two_workers_launch_each_config_once_and_report_once(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, TWO)
    pytester.makepyfile(POINTS)
    first = pytester.runpytest("-n", "2", "--update-baselines", "--glm5-report", "r1.json", "--glm5-launches", "2")
    assert first.ret == 0, first.stdout.str()
    first.assert_outcomes(passed=4)
    out = first.stdout.str()
    assert out.count("= glm5 performance =") == 1 and out.count("= glm5 servers =") == 1
    # Every launch of a config (three: --glm5-launches 2 over two scenarios) on one worker, never on both.
    for name in "ab":
        # The log path may wrap onto the next line (the summary wraps at 120 columns; paths vary in length).
        workers = set(re.findall(rf"^{name}: launched pid [^\n]*?(?:\n\s+)?\S*/(popen-gw\d)/", out, re.M))
        assert len(workers) == 1, (name, workers, out)
    doc = json.loads((pytester.path / "r1.json").read_text())
    assert {(v["config"], v["scenario"]) for v in doc["verdicts"]} == {(c, s) for c in "ab" for s in ("c1", "c2")}
    assert set(doc["servers"]) == {"a", "b"}
    assert len(doc["baseline_changes"]) == 8  # written once, by the controller
    [path] = list((pytester.path / "baselines").rglob("*.toml"))
    text = path.read_text()
    assert all(f"[{c}.{s}.output_throughput]" in text for c in "ab" for s in ("c1", "c2"))
    # What each worker's launches answered, and what it recorded of them, reach the controller's summary.
    for name in "ab":
        said_lines(first, [f"  {name}: canary: no reference replies yet * launches)"])
        said_lines(first, [f"  {name}: answers recorded in *.answers.json (canary: * reference launches*)"])
    assert set(json.loads(path.with_suffix("").with_suffix(".answers.json").read_text())["configs"]) == {"a", "b"}
    again = pytester.runpytest("-n", "2", "--glm5-report", "r2.json")
    assert again.ret == 0, again.stdout.str()
    said_lines(again, ["8 series: *; any false alarm among them held to *"])  # one family over both workers
    for name in "ab":
        said_lines(again, [f"  {name}: canary * 16 prompts *"])  # held on every launch, each worker's config
    assert_no_server_left(model)


def test_another_dist_mode_is_refused_with_the_fix(pytester: pytest.Pytester) -> None:
    write_configs(pytester, TWO)
    pytester.makepyfile(POINTS)
    result = pytester.runpytest("-n", "2", "--dist", "load")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*glm5: --dist load would spread a server config's tests over workers, *; use "
                                 "--dist loadgroup (what -n gets by default here)*"])


def test_a_tests_config_is_read_from_its_id() -> None:
    from pytest_glm5.scaleout import config_of, scope_of

    names = ["tp8", "tp8-decode4", "ep8"]
    assert config_of("suites/test_sm120.py::test_sweep[tp8-decode4-c256]", names) == "tp8-decode4"
    assert config_of("suites/test_sm120.py::test_sweep[tp8-c256]", names) == "tp8"
    assert config_of("suites/test_sm120.py::test_stability[256-ep8]", names) == "ep8"
    assert config_of("suites/test_sm120.py::test_single_stream[tp8]", names) == "tp8"
    assert config_of("t.py::test_x[tp80]", names) is None and config_of("t.py::test_x", names) is None
    assert scope_of("t.py::test_x", names) == "t.py::test_x"
