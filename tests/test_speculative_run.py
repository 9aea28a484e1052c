"""A speculative config judged as the suite judges it (pytester sessions on the emulator): its acceptance is a gated
series of its own, a build that accepts fewer drafts fails on it, a slower draft fails on speed alone, and its canary
is held to the same model's replies without drafts, so a verify that keeps wrong drafts is "faster, but wrong" even
on the night that reference is first recorded; unchanged launches raise no alarm."""

from __future__ import annotations

import re

import pytest
from plugin_helpers import OUTPUTS, outcome_agrees, report, said_lines, write_configs

CONFIGS = """
[config.plain]
flags = {}

[config.mtp]
compare_to = "plain"
expected_slower = true
flags = { speculative-algorithm = "EAGLE", speculative-num-steps = 3, speculative-eagle-topk = 1 }

[build.fewer]
env = { GLM5_SIM_ACCEPT_DROP = "0.15" }

[build.lossy]
env = { GLM5_SIM_LOSSY_VERIFY = "0.2" }

[build.slowdraft]
env = { GLM5_SIM_DRAFT_SLOWDOWN = "0.2" }
"""
POINT = """
def test_natural(glm5_config, perf):
    r = perf.run("natural", concurrency=2, num_prompts=8, dataset="natural", output_len=32)
    accept = ["spec_accept_length"] if all("spec_accept_length" in x.metrics for x in r) else []
    perf.check(r, "natural", ["output_throughput", *accept])
"""
QUIET = ("--glm5-sim-noise", "0.01")


def _setup(pytester: pytest.Pytester) -> None:
    write_configs(pytester, CONFIGS)
    pytester.makepyfile(POINT)


def _record(pytester: pytest.Pytester) -> None:
    rec = pytester.runpytest("--update-baselines", "--glm5-launches", "5", "--glm5-max-repeats", "5", *QUIET)
    assert rec.ret == 0, rec.stdout.str()[-3000:]
    said_lines(rec, ["  plain: answers recorded in *.answers.json (canary: 5 reference launches)",
                     "  mtp: answers recorded in *.answers.json (canary: held to plain's replies, the same model "
                     "without drafts)"])


@pytest.mark.slow
def test_fewer_drafts(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    _record(pytester)
    toml = next((pytester.path / "baselines").rglob("*.toml")).read_text()
    assert "[mtp.natural.spec_accept_length]" in toml and "[plain.natural.spec_accept_length]" not in toml
    assert re.search(r'dataset = "natural\.jsonl@[0-9a-f]{12}"', toml), toml[:3000]
    for _ in range(2):  # unchanged: no alarm, the canary held to plain's replies
        same = pytester.runpytest(*QUIET, *OUTPUTS)
        assert outcome_agrees(same, pytester.path).startswith("PASSED: no regression"), same.stdout.str()[-3000:]
        said_lines(same, ["  mtp: canary held on * launches: canary: 16 of 16 prompts agree *"])
    fewer = pytester.runpytest("--glm5-build", "fewer", "-k", "mtp", *QUIET, *OUTPUTS)
    line = outcome_agrees(fewer, pytester.path)
    assert line.startswith("FAILED: "), line
    accept = [v for v in report(pytester)["verdicts"] if v["metric"] == "spec_accept_length"]
    assert [v["verdict"] for v in accept] == ["regression"], accept
    said_lines(fewer, ["*mtp*natural*spec_accept_length*tok/verify*"])
    # A slower draft: the same drafts accepted, later; the speed fails it, acceptance holds.
    slow = pytester.runpytest("--glm5-build", "slowdraft", "-k", "mtp", *QUIET, *OUTPUTS)
    assert outcome_agrees(slow, pytester.path).startswith("FAILED: 1 regression (mtp natural output_throughput")
    verdicts = {v["metric"]: v["verdict"] for v in report(pytester)["verdicts"]}
    assert verdicts == {"output_throughput": "regression", "spec_accept_length": "pass"}, verdicts


@pytest.mark.slow
def test_lossy_verify(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    # The night the lossless reference is first recorded: tonight's five plain launches (before mtp's) are the
    # target's replies, and mtp's are held to them.
    first = pytester.runpytest("--update-baselines", "--glm5-build", "lossy", "--glm5-launches", "5",
                               "--glm5-max-repeats", "5", *QUIET, *OUTPUTS)
    line = outcome_agrees(first, pytester.path)
    assert line.startswith("FAILED: faster, but wrong: 1 config answered wrong (mtp: canary failed: "), line
    said_lines(first, ["  plain: answers recorded in *.answers.json (canary: 5 reference launches)",
                       "  mtp: answers not recorded, nor its figures: faster, but wrong: canary failed: *"])
    # With plain's reference on file, the same build fails on a night of mtp alone; a faithful one holds.
    again = pytester.runpytest("--glm5-build", "lossy", "-k", "mtp", *QUIET, *OUTPUTS)
    assert outcome_agrees(again, pytester.path).startswith("FAILED: faster, but wrong: 1 config answered wrong "
                                                           "(mtp: canary failed: ")
    faithful = pytester.runpytest("-k", "mtp", *QUIET, *OUTPUTS)
    said_lines(faithful, ["  mtp: canary held on * launches: canary: 16 of 16 prompts agree *"])
