"""The workload is held before any verdict (pytester sessions on the emulator): a chat scenario with thinking records
what its reference served (templated input length, reasoning tokens a request); a build that thinks 20% less reads
"workload drift" on every metric, however fast, and fails the run without being recorded."""

from __future__ import annotations

import tomllib

import pytest
from plugin_helpers import OUTPUTS, outcome_agrees, report, said_lines, write_configs

CHAT = """
import pytest
@pytest.mark.server_config("t")
def test_chat_thinking(perf):
    r = perf.run("chat-think", concurrency=8, num_prompts=24, input_len=64, output_len=200, protocol="chat",
                 thinking=True)
    perf.check(r, "chat-think", ["output_throughput", "mean_ttft_ms"])
"""
# A build whose model thinks 20% less: same kernels, same speed a token, fewer tokens of thinking a reply.
BUILDS = '[build.short]\nenv = { GLM5_SIM_REASONING_SCALE = "0.8" }\n'
ASK = ("--glm5-no-canary", "--glm5-sim-noise", "0.01", "--glm5-max-repeats", "1")


@pytest.mark.slow
def test_thinking_that_drifts_is_neither_faster_nor_slower(pytester: pytest.Pytester) -> None:
    write_configs(pytester, '[config.t]\nflags = { reasoning-parser = "glm45" }\n' + BUILDS)
    pytester.makepyfile(CHAT)
    rec = pytester.runpytest("--update-baselines", "--glm5-launches", "2", *ASK[:3], "--glm5-max-repeats", "2")
    assert rec.ret == 0, rec.stdout.str()[-3000:]
    entry = tomllib.loads(next((pytester.path / "baselines").rglob("*.toml")).read_text())["t"]["chat-think"]
    workload = entry["output_throughput"]["workload"]
    assert workload["protocol"] == "chat" and workload["thinking"] is True
    # What the reference served: 64 prompt tokens as the server counted them, ~48 thinking tokens a reply (tiny).
    assert workload["observed"]["input_tokens"] == 64 and 30 < workload["observed"]["reasoning_tokens"] < 70
    same = pytester.runpytest(*ASK, *OUTPUTS)
    assert outcome_agrees(same, pytester.path).startswith("PASSED"), same.stdout.str()[-3000:]
    short = pytester.runpytest("--glm5-build", "short", *ASK, *OUTPUTS)
    line = outcome_agrees(short, pytester.path)
    assert line.startswith("FAILED: workload drift: t chat-think (") and "regression" not in line, line
    short.assert_outcomes(failed=1)  # the test fails with the reason, as a build that answers wrong does
    said_lines(short, ["*t chat-think: workload drift: * reasoning tokens a request where the reference thought * "
                       "(-*%, held to 10%): shorter or longer thinking is another workload, neither faster nor slower",
                       "t *chat-think *output_throughput * tok/s * workload drift"])
    kinds = {v["metric"]: v["verdict"] for v in report(pytester)["verdicts"]}
    assert kinds == {"output_throughput": "workload drift", "mean_ttft_ms": "workload drift"}
    path = next((pytester.path / "baselines").rglob("*.toml"))
    before = tomllib.loads(path.read_text())["t"]
    assert pytester.runpytest("--update-baselines", "--glm5-build", "short", *ASK).ret == 1
    assert tomllib.loads(path.read_text())["t"] == before  # its figures never recorded (a launch's cost may be)
