"""Server fixtures per config marker, through real pytest sessions (pytester) on the emulator."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from plugin_helpers import assert_no_server_left, report, servers_of, write_configs

from simproc import Sim

TWO_CONFIGS = """
[config.a]
flags = { tp-size = 1 }
[config.b]
flags = { tp-size = 2 }
"""

PID_TESTS = """
import pytest

def _seen(server, tag):
    with open("seen.txt", "a") as f:
        f.write(f"{tag} {server.config.name} {server.pid}\\n")

@pytest.mark.server_config("a")
def test_a1(sglang_server): _seen(sglang_server, "a1")
@pytest.mark.server_config("b")
def test_b1(sglang_server): _seen(sglang_server, "b1")
@pytest.mark.server_config("a")
def test_a2(sglang_server): _seen(sglang_server, "a2")
@pytest.mark.server_config("b")
def test_b2(sglang_server): _seen(sglang_server, "b2")
@pytest.mark.server_config("a")
def test_a3(sglang_server):
    _seen(sglang_server, "a3")
    assert sglang_server.alive() and sglang_server.server_info()["tp_size"] == 1
@pytest.mark.server_config("b")
def test_b3(sglang_server, bench):
    _seen(sglang_server, "b3")
    r = bench(concurrency=2, num_prompts=4, input_len=8, output_len=4)
    assert r.metrics["completed"] == 4
    assert sglang_server.log_path.exists()
"""


def seen(pytester: pytest.Pytester) -> list[tuple[str, str, int]]:
    rows = (pytester.path / "seen.txt").read_text().split("\n")
    return [(t, c, int(p)) for t, c, p in (r.split() for r in rows if r)]


@pytest.mark.slow
def test_two_configs_three_interleaved_tests_two_launches(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, TWO_CONFIGS)
    pytester.makepyfile(PID_TESTS)
    result = pytester.runpytest("--glm5-report", "report.json")
    result.assert_outcomes(passed=6)
    rows = seen(pytester)
    # Grouped: all of a, then all of b; one process per config.
    assert [t for t, _, _ in rows] == ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert len({p for _, c, p in rows if c == "a"}) == 1 and len({p for _, c, p in rows if c == "b"}) == 1
    rep = report(pytester)["servers"]
    assert set(rep) == {"a", "b"} and all(r["how"] == "launched" for r in rep.values())
    assert all(r["startup_s"] > 0 and r["port"] > 0 and r["log_path"] for r in rep.values())
    result.stdout.fnmatch_lines(["*glm5 servers*", "a: launched pid *", "b: launched pid *"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_keep_servers_reuse_and_relaunch_on_change(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, TWO_CONFIGS)
    pytester.makepyfile(PID_TESTS)
    pytester.runpytest("--glm5-keep-servers").assert_outcomes(passed=6)
    first = {c: p for _, c, p in seen(pytester)}
    assert [p.pid for p in servers_of(model)] == [first["b"]]  # the last config's server is kept, alone
    (pytester.path / "seen.txt").unlink()
    result = pytester.runpytest("--glm5-keep-servers")
    result.assert_outcomes(passed=6)
    rows = seen(pytester)
    assert [t for t, _, _ in rows] == ["b1", "b2", "b3", "a1", "a2", "a3"]  # the kept config first
    assert {c: p for _, c, p in rows}["b"] == first["b"]  # reused, not launched
    result.stdout.fnmatch_lines(["b: reusing kept server pid * (fingerprint matches)"])
    # Change one flag of b: b relaunches and says which flag changed.
    write_configs(pytester, TWO_CONFIGS.replace("tp-size = 2", "tp-size = 4"))
    pytester.runpytest("--glm5-keep-servers", "-k", "b").assert_outcomes(passed=3, deselected=3)
    (pytester.path / "seen.txt").unlink()
    result = pytester.runpytest("--glm5-keep-servers", "-k", "b")
    result.assert_outcomes(passed=3, deselected=3)
    assert "not reusing" not in result.stdout.str()
    write_configs(pytester, TWO_CONFIGS.replace("tp-size = 2", "tp-size = 8"))
    (pytester.path / "seen.txt").unlink()
    result = pytester.runpytest("--glm5-keep-servers", "-k", "b")
    result.assert_outcomes(passed=3, deselected=3)
    result.stdout.fnmatch_lines(["b: not reusing kept server: config changed*changed --tp-size 4->8*"])
    assert {c: p for _, c, p in seen(pytester)}["b"] != first["b"]
    result = pytester.runpytest("--glm5-stop-servers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*stopped b: pid *"])
    assert_no_server_left(model)


def test_external_url_reuse_and_mismatch(pytester: pytest.Pytester, sim_factory: Callable[..., Sim]) -> None:
    ext = sim_factory("--tp-size", "2", "--enable-metrics")
    write_configs(pytester, """
[config.match]
model = "/models/test-model"
flags = { tp-size = 2, enable-metrics = true }
[config.differ]
model = "/models/test-model"
flags = { tp-size = 4 }
""")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("match")
def test_match(sglang_server):
    assert sglang_server.pid is None and sglang_server.alive()
@pytest.mark.server_config("differ")
def test_differ(sglang_server):
    pass
""")
    result = pytester.runpytest("--sglang-url", ext.url, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*external server differs from config differ: --tp-size: server 2, config 4*"])
    assert ext.proc.poll() is None  # never stopped by the plugin
    result = pytester.runpytest("--sglang-url", ext.url, "--glm5-strict")
    result.assert_outcomes(passed=1, errors=1)
    assert ext.proc.poll() is None


def test_external_url_unreachable(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_a(sglang_server): pass
""")
    result = pytester.runpytest("--sglang-url", "http://127.0.0.1:9")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--sglang-url http://127.0.0.1:9 is unreachable*"])


def test_server_exiting_in_startup_fails_fast_with_log_tail(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.dies]\nflags = { ep-size = 8, mem-fraction-static = 0.75 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("dies")
def test_one(sglang_server): pass
@pytest.mark.server_config("dies")
def test_two(sglang_server): pass
""")
    result = pytester.runpytest()
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert "server for dies exited during startup with exit code 1 after" in out
    assert "CUTLASS tile 128x256x128" in out and "full log:" in out
    secs = float(out.split("exit code 1 after ")[1].split(" s")[0])
    assert secs < 2.0
    # The second test fails at once with the cause in one line: no second launch.
    result.stdout.fnmatch_lines(["*server for dies failed earlier: server for dies exited during startup with "
                                 "exit code 1 after * s; *?cutlass-tile? RuntimeError: ?CUTLASS? Failed to initialize*"
                                 "; full log: *dies-*.log"])
    assert len(list((pytester.path.parent / "basetemp" / "glm5-logs").glob("dies-*.log"))) == 1
    assert_no_server_left(model)


@pytest.mark.slow
def test_startup_hang_hits_the_timeout_with_log_tail(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.slow]\nflags = {}\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("slow")
def test_slow(sglang_server): pass
""")
    result = pytester.runpytest("--glm5-sim", "--glm5-sim-profile", "tiny", "--glm5-sim-startup-s", "300",
                                "--glm5-startup-timeout", "1.5")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*server for slow not ready after 1.5 s (--glm5-startup-timeout)*",
                                 "*Load weight begin*"])
    assert_no_server_left(model)


def test_unknown_config_lists_known(pytester: pytest.Pytester) -> None:
    write_configs(pytester, TWO_CONFIGS)
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("tp9")
def test_x(sglang_server): pass
""")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown server config 'tp9'; known configs in *configs.toml: a, b*"])


def test_misspelled_flag_caught_by_preflight(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.typo]\nflags = { tp-szie = 2 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("typo")
def test_x(sglang_server): pass
""")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*typo: sim rejects the flags: sglang serve: error: unrecognized arguments: "
                                 "--tp-szie 2*"])
    assert "Load weight" not in result.stdout.str()
    assert_no_server_left(model)


@pytest.mark.slow
def test_markers_on_class_module_and_param_and_known_issue(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, TWO_CONFIGS + """
[config.broken]
flags = { moe-runner-backend = "flashinfer_trtllm" }
known_issue = "trtllm-gen MoE is SM100-only"
""")
    pytester.makepyfile("""
import pytest
pytestmark = pytest.mark.server_config("a")

def test_module_level(sglang_server):
    assert sglang_server.config.name == "a"

@pytest.mark.server_config("b")
class TestB:
    def test_in_class(self, sglang_server):
        assert sglang_server.config.name == "b"

@pytest.mark.parametrize("cfg", [pytest.param("b", marks=pytest.mark.server_config("b"))])
def test_param(sglang_server, cfg):
    assert sglang_server.config.name == cfg

@pytest.mark.server_config("broken")
def test_known_issue(sglang_server):
    pass
""")
    result = pytester.runpytest("-rx")
    result.assert_outcomes(passed=3, xfailed=1)
    result.stdout.fnmatch_lines(["*known issue of broken: trtllm-gen MoE is SM100-only*"])
    assert_no_server_left(model)


def test_marker_is_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.server_config(name): run this test against a live server*"])
