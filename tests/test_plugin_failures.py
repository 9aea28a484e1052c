"""Failure as a first-class path: crashes, hangs, stability, no orphans, bad input, nothing lost."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from plugin_helpers import HARDWARE, assert_no_server_left, said_lines, servers_of, write_configs

from pytest_glm5.servers.process import started
from pytest_glm5.servers.records import LAUNCHED, RecordStore

from simproc import Sim

CRASHY = """
[config.ep8]
flags = { ep-size = 8 }
[config.ok]
flags = {}
"""


@pytest.mark.slow
def test_crash_under_load_is_reported_then_fails_fast(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, CRASHY)
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("ep8")
def test_load(bench):
    bench(concurrency=256, num_prompts=512, input_len=16, output_len=64, warmup=0)
@pytest.mark.server_config("ep8")
def test_after(bench):
    bench(concurrency=1, num_prompts=2)
@pytest.mark.server_config("ok")
def test_next_config(bench):
    assert bench(concurrency=4, num_prompts=8, output_len=8).metrics["completed"] == 8
""")
    t0 = time.monotonic()
    result = pytester.runpytest()
    result.assert_outcomes(failed=1, errors=1, passed=1)
    out = result.stdout.str()
    # Whether the requests error out before the watcher's next look decides between "cut off" and "in flight".
    m = re.search(r"server for ep8 died during the load run: exit code 1, ([\d.]+) s into the run at concurrency "
                  r"256; (\d+) requests completed(?:, (\d+) cut off by the death)?, (\d+) in flight when it was "
                  r"noticed", out)
    assert m, out
    assert float(m.group(1)) < 3 and int(m.group(3) or 0) + int(m.group(4)) >= 200
    said_lines(result, ["log lines that matter:", "*?cuda-oom? torch.OutOfMemoryError: CUDA out of memory*",
                                 "full log: *ep8-*.log"])
    said_lines(result, ["*server for ep8 crashed earlier: exit code 1; *cuda-oom*; full log: *"])
    assert time.monotonic() - t0 < 30  # no request timeouts waited out
    assert_no_server_left(model)


@pytest.mark.slow
def test_relaunch_after_crash_once(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, CRASHY)
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("ep8")
def test_load(bench):
    bench(concurrency=256, num_prompts=256, input_len=16, output_len=64, warmup=0)
@pytest.mark.server_config("ep8")
def test_light(bench):
    assert bench(concurrency=2, num_prompts=4, output_len=8).metrics["completed"] == 4
""")
    result = pytester.runpytest("--glm5-relaunch-after-crash")
    result.assert_outcomes(failed=1, passed=1)
    said_lines(result, ["ep8: crashed (exit code 1; *); relaunching once (--glm5-relaunch-after-crash)"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_hang_is_reported_with_a_stack_dump(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.stuck]\nflags = { sim-hang-after-tokens = 100 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("stuck")
def test_load(bench):
    bench(concurrency=8, num_prompts=64, output_len=64, warmup=0)
""")
    t0 = time.monotonic()
    # No canary: its 512 tokens would meet the hang before the load does (the case below).
    result = pytester.runpytest("--glm5-stall-timeout", "1", "--glm5-no-canary")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - t0 < 20
    said_lines(result, ["*server for stuck hung during the load run: stalled: no token from any of 8 "
                                 "requests for * s*the process is alive*",
                                 "stack dump (SIGUSR1) written to the log"])
    log = next((pytester.path.parent / "basetemp" / "glm5-logs").glob("stuck-*.log")).read_text()
    assert "most recent call first" in log  # faulthandler's dump of the hung server
    assert_no_server_left(model)
    # Hung before the load (during the canary): the canary gives up after twice the stall timeout and the load's
    # first request meets the hang under the same watch, with the same report (it waited 10 minutes, then forever).
    t0 = time.monotonic()
    early = pytester.runpytest("--glm5-stall-timeout", "1")
    early.assert_outcomes(failed=1)
    assert time.monotonic() - t0 < 20
    said_lines(early, ["*server for stuck hung during the load run: stalled: no token from any of 1 requests for * s, "
                       "* 0 requests completed, 1 in flight; the process is alive*",
                       "stack dump (SIGUSR1) written to the log"])
    said_lines(early, ["  stuck: canary not run: 16 of 16 prompts failed (TimeoutError*"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_stability_check(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, CRASHY + "[config.flaky]\nflags = { sim-fault = 'http500=0.05' }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.parametrize("cfg", [pytest.param(n, marks=pytest.mark.server_config(n)) for n in ("ok", "flaky", "ep8")])
def test_stable(perf, cfg):
    perf.stability(concurrency=256, num_prompts=512, input_len=16, output_len=32)
""")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=2)
    said_lines(result, ["*flaky is not stable under load at concurrency 256:",
                                 "* of 512 requests failed (error budget 0): HTTP 500*"])
    said_lines(result, ["*ep8 is not stable under load at concurrency 256:",
                                 "server for ep8 died during the load run: exit code 1*"])
    assert_no_server_left(model)


SLOW_START = "[config.slow]\nflags = { sim-startup-s = 120 }\n[config.long]\nsim_profile = 'glm5-sm120'\nflags = {}\n"
LONG_LOAD = """
import pytest
@pytest.mark.server_config("slow")
def test_launch(sglang_server): pass
@pytest.mark.server_config("long")
def test_load(bench):
    open("loading", "w").close()
    bench(concurrency=4, num_prompts=400, warmup=0)
"""


def _run_and_signal(pytester: pytest.Pytester, model: str, sig: int, wait_for: str, *args: str) -> int:
    """Start pytest in a subprocess, wait for `wait_for` (a server, or the load), send `sig`, wait for its end."""
    # SIGINT as a terminal sends it: a shell that started this run in the background (nohup cmd &) leaves SIGINT
    # ignored, the child inherits that, Python then installs no KeyboardInterrupt handler, and the signal is lost.
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if wait_for == "server" and servers_of(model):
            break
        if wait_for == "load" and (pytester.path / "loading").exists():
            time.sleep(1.0)
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError(f"never saw {wait_for}: {proc.communicate()[0].decode()[-2000:]}")
    os.kill(proc.pid, sig)
    # communicate, not wait: its output goes to a pipe, and a child that fills the pipe (an interrupt's traceback on a
    # loaded CI machine) blocks writing while wait() waits for it: a deadlock that read as "pytest did not exit"
    proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize(("sig", "when"), [
    (signal.SIGINT, "server"), (signal.SIGINT, "load"), (signal.SIGTERM, "load"), (signal.SIGKILL, "load"),
])
@pytest.mark.slow
def test_no_orphan_after_interrupts(pytester: pytest.Pytester, sig: int, when: str) -> None:
    model = write_configs(pytester, SLOW_START)
    pytester.makepyfile(LONG_LOAD)
    # A stop that must escalate to SIGKILL takes --glm5-stop-timeout (60 s by default, the test's own wait): 10 s
    # bounds the run, so what is asserted is the orphan, not a race between two 60 s clocks.
    args = ["-k", "launch", "--glm5-stop-timeout", "10"] if when == "server" else [
        "-k", "load", "--glm5-sim-time-scale", "0.1", "--glm5-sim-startup-s", "1", "--glm5-stop-timeout", "10"]
    rc = _run_and_signal(pytester, model, sig, when, *args)
    assert rc != 0
    assert_no_server_left(model, wait=5.0)


def test_next_run_reaps_recorded_leftovers(pytester: pytest.Pytester, sim_factory: Callable[..., Sim]) -> None:
    left = sim_factory()  # stands for a server whose pytest was killed before it could stop it
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("def test_nothing(): pass\n")
    start = started(left.proc.pid)
    store = RecordStore(pytester.path / ".pytest_cache" / "d" / "glm5")
    # Its pytest is gone: an owner pid that no longer runs.
    store.put(LAUNCHED, {"config": "a", "pid": left.proc.pid, "port": 1, "started": start,
                         "owner_pid": 2 ** 22 + 1, "owner_started": 0.0})
    result = pytester.runpytest("-k", "nothing")
    result.assert_outcomes(passed=1)
    said_lines(result, [f"glm5: reaped a server left by an earlier run: a pid {left.proc.pid} port 1"])
    assert left.proc.wait(10) is not None


def test_exception_in_a_fixture_leaves_no_server(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import pytest
@pytest.fixture
def broken(sglang_server):
    raise RuntimeError("fixture blew up")
@pytest.mark.server_config("a")
def test_x(broken): pass
""")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    assert_no_server_left(model)


def test_configs_syntax_error_names_file_and_line(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = { tp-size = }\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*configs.toml: invalid TOML: Invalid value (at line *, column *)"])
    assert "Traceback" not in result.stderr.str()


def test_unknown_key_in_config(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflgas = { tp-size = 2 }\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*configs.toml: ?config.a?: unknown key 'flgas'; allowed: *"])


@pytest.mark.parametrize(("table", "says"), [
    ("[config.a]\nproduction = \"yes\"\n", "?config.a?: key 'production' must be a bool, got str 'yes'"),
    ("[defaults]\nproduction = true\n[config.a]\n", "?defaults?: unknown key 'production'; allowed: *"),
])
def test_a_production_flag_is_a_config_s_own_bool(pytester: pytest.Pytester, table: str, says: str) -> None:
    """Which configs serve production is said config by config, true or false: never a default for every one."""
    if table.startswith("[config"):
        write_configs(pytester, table)
    else:
        pytester.makefile(".toml", configs=table)
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*configs.toml: {says}"])


def test_fixed_port_in_use(pytester: pytest.Pytester, sim: Sim) -> None:
    model = write_configs(pytester, f"[config.a]\nflags = {{ port = {sim.port} }}\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    said_lines(result, [f"*a: port {sim.port} (the config's `port` flag) is already in use by pid "
                                 f"{sim.proc.pid} (python*); stop it, or drop `port` from the config*"])
    assert_no_server_left(model)


def test_missing_model_path_surfaces_the_engines_message(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = { sim-require-model-path = true }\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest("--glm5-report", "r.json")
    result.assert_outcomes(errors=1)
    said_lines(result, ["*server for a exited during startup with exit code 1*",
                                 f"OSError: Can't load the configuration of '{model}'*"])
    # The report (and the page drawn from it) keeps the crash's pid, exit status and log tail: at c979bd9 a startup
    # crash's record was a blank one.
    server = json.loads((pytester.path / "r.json").read_text())["servers"]["a"]
    assert server["how"] == "failed" and server["exit_status"] == 1 and server["pid"] is not None
    assert any("Can't load the configuration" in line for line in server["log_tail"]), server


@pytest.mark.parametrize(("fault", "message"), [
    ("http500=0.3", "HTTP 500: "), ("malformed-sse=0.3", "malformed SSE data"),
    ("cut-stream=0.3", "stream ended after"),
])
def test_bad_server_answers_fail_the_check(pytester: pytest.Pytester, fault: str, message: str) -> None:
    write_configs(pytester, f"[config.a]\nflags = {{ sim-fault = '{fault}' }}\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_x(perf):
    perf.check(perf.run("s", concurrency=4, num_prompts=20, output_len=8, warmup=0), "s")
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    said_lines(result, [f"*a s: * of 20 requests failed at concurrency 4: *{message}*"])


def test_update_into_unwritable_dir_keeps_the_file(pytester: pytest.Pytester, tmp_path: Path) -> None:
    model = write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("t")
def test_point(perf):
    perf.check(perf.run("c2", concurrency=2, num_prompts=4, output_len=8, warmup=0), "c2")
""")
    # A directory that cannot take a new file even as root: /proc is not writable. Found before the first launch:
    # on the box, a whole night of recording was measured and then lost.
    result = pytester.runpytest("--update-baselines", "--glm5-baselines", "/proc/glm5-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--update-baselines: the baselines directory of *.toml "
                                 f"/proc/glm5-baselines/{HARDWARE} cannot be created or written to: *; pick another "
                                 "directory, or make it writable; nothing was launched"])
    assert servers_of(model) == [] and "passed" not in result.stdout.str()


KILLED_WRITER = """
import sys, itertools
from pathlib import Path
from pytest_glm5.judge.baselines import write_updates
from pytest_glm5.judge.verdicts import Verdict
path = Path(sys.argv[1])
for i in itertools.count():
    write_updates(path, [Verdict("w", f"s{i % 50}", "output_throughput", float(i + 1), None, "new", {})], {"i": i})
"""


@pytest.mark.slow
def test_sigkill_mid_update_never_leaves_a_broken_file(tmp_path: Path) -> None:
    import random
    import tomllib

    path = tmp_path / "b.toml"
    path.write_text("# precious\n[defaults]\ntolerance = 0.05\n")
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    rng = random.Random(7)
    for _ in range(25):
        proc = subprocess.Popen([sys.executable, str(script), str(path)])
        time.sleep(0.3 + rng.random() * 0.4)
        proc.kill()
        proc.wait()
        doc = tomllib.loads(path.read_text())  # parses every time: never truncated or half-written
        assert path.read_text().startswith("# precious") and doc["defaults"]["tolerance"] == 0.05
    assert len(tomllib.loads(path.read_text())["w"]) > 1
