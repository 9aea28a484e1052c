"""Shared set-up for pytester sessions: a configs file on the fast emulator, and orphan checks."""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

import psutil
import pytest

TINY_DEFAULTS = """
[defaults]
engine = "sim"
sim_profile = "tiny"
model = "{model}"
"""


def model_of(test_dir: Path) -> str:
    """The emulator model path of one pytester test: unique across concurrent sessions too. The test's directory
    and its xdist worker's (popen-gw1) are the same in two runs of the suite at once, whose clean-ups then took each
    other's servers (a CI run beside a developer's run of tests/test_gate.py had its emulator SIGKILLed 0.1 s into
    startup); the whole path's checksum tells them apart, in place of the worker's name (a longer name wraps the
    lines that quote a file named after it)."""
    return f"/models/{test_dir.name}-{zlib.crc32(str(test_dir).encode()):08x}"


# The pytester sessions run the tiny emulator at half its time scale: their launches wait on its model time (a gate
# test's launch spent about 80% of its measuring there), and the host's noise at x0.5 reads as at x1 (output
# throughput at c1 and c2, noise 0, 15 launches each: CV 0.2-0.7% beside two busy loops at both; at x0.25 2.5-3.9%,
# so no faster). A test that holds a figure of the tiny model at x1 (an SLO in milliseconds) passes scale=1.0.
SCALE = 0.5
HARDWARE = f"sim-tiny-x{SCALE:g}"  # the hardware key of those sessions' baselines and histories


def write_configs(pytester: pytest.Pytester, body: str, scale: float = SCALE) -> str:
    """configs.toml in the pytester dir with sim/tiny defaults, the ini naming it (and the emulator's time scale);
    returns the unique model path used."""
    model = model_of(pytester.path)
    pytester.makefile(".toml", configs=TINY_DEFAULTS.format(model=model) + body)
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n" + (f"glm5_sim_time_scale = {scale:g}\n"
                                                                     if scale != 1.0 else ""))
    return model


def servers_of(model: str) -> list[psutil.Process]:
    """Live emulator processes launched with this model path (the test's own)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "pytest_glm5.sim" in cmd and model in cmd:
            out.append(p)
    return out


def assert_no_server_left(model: str, wait: float = 5.0) -> None:
    """Every server this test launched is gone (within `wait` seconds)."""
    deadline = time.monotonic() + wait
    while servers_of(model) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers_of(model) == [], [p.info["cmdline"] for p in servers_of(model)]


def report(pytester: pytest.Pytester, name: str = "report.json") -> dict[str, Any]:
    """The --glm5-report JSON written by the last run."""
    data: dict[str, Any] = json.loads(Path(pytester.path / name).read_text())
    return data


# pynvml's API as far as the plugin uses it, over GPUS = [(name, (major, minor))]: the tests' NVML
# (GLM5_NVML_MODULE). BUSY maps a GPU index to (pid, bytes) of a compute process on it; append `BUSY = {...}`.
FAKE_NVML = """
GPUS = {gpus}
BUSY = {{}}
def nvmlInit(): pass
def nvmlSystemGetDriverVersion(): return "580.82"
def nvmlDeviceGetCount(): return len(GPUS)
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetHandleByUUID(u): return int(u.rsplit("-", 1)[1])
def nvmlDeviceGetUUID(h): return "GPU-fake-" + str(h)
def nvmlDeviceGetName(h): return GPUS[h][0]
def nvmlDeviceGetCudaComputeCapability(h): return GPUS[h][1]
class _Mem:
    total = 96 * 2**30
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlDeviceGetCurrPcieLinkGeneration(h): return 5
def nvmlDeviceGetCurrPcieLinkWidth(h): return 16
class _Proc:
    def __init__(self, pid, used): self.pid, self.usedGpuMemory = pid, used
def nvmlDeviceGetComputeRunningProcesses(h): return [_Proc(*BUSY[h])] if h in BUSY else []
"""


def unwrapped(text: str) -> list[str]:
    """The glm5 summary's logical lines: it wraps lines past 120 characters with a hanging indent of four more spaces
    (report.wrapped); each continuation is joined back to its line."""
    out: list[str] = []
    lead = 0
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if out and line.strip() and indent == lead + 4 and len(out[-1].split("\n")[-1]) >= 80:
            out[-1] += " " + line.strip()
            continue
        out.append(line)
        lead = indent
    return out


def said_lines(result: pytest.RunResult, patterns: list[str]) -> None:
    """fnmatch_lines over the output's logical lines (see unwrapped)."""
    pytest.LineMatcher(unwrapped(result.stdout.str())).fnmatch_lines(patterns)


# Two scenarios of one config: a launch measures both, a round measures both again.
TWO_SCENARIOS = """
import pytest

@pytest.mark.server_config("t")
def test_c1(perf):
    perf.check(perf.run("c1", concurrency=1, num_prompts=3, input_len=8, output_len=24, warmup=1), "c1",
               ["output_throughput"])

@pytest.mark.server_config("t")
def test_c2(perf):
    perf.check(perf.run("c2", concurrency=2, num_prompts=4, input_len=8, output_len=24, warmup=1), "c2",
               ["output_throughput"])
"""


OUTPUTS = ("--glm5-report", "report.json", "--glm5-markdown", "summary.md")


def outcome_agrees(result: pytest.RunResult, where: Path) -> str:
    """The outcome line, after checking that the exit status, the JSON report and the markdown summary say it too."""
    text = result.stdout.str().splitlines()
    starts = [i for i, line in enumerate(text) if line.startswith(("PASSED:", "FAILED:", "SKIPPED:"))]
    assert len(starts) == 1, result.stdout.str()
    line = text[starts[0]]
    for more in text[starts[0] + 1:]:  # the summary wraps long lines with a hanging indent of four
        if not more.startswith("    "):
            break
        line += " " + more.strip()
    assert (result.ret != 0) == line.startswith("FAILED:"), (result.ret, line)
    doc = json.loads((where / "report.json").read_text())
    assert doc["outcome"]["line"] == line and doc["outcome"]["exit_status"] == (1 if result.ret else 0)
    # markdown escapes what it would render (`[`, `*`): the text a reader sees is the line
    assert (where / "summary.md").read_text().splitlines()[0].replace("\\", "") == f"## glm5: {line}"
    return line
