"""The house in order: every bad input one clear line, no server or record lost, no file broken (issue 9)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from plugin_helpers import assert_no_server_left, said_lines, servers_of, write_configs

from pytest_glm5.cli import main as glm5
from pytest_glm5.configs import ServerConfig
from pytest_glm5.judge.baselines import BaselineStore, write_updates
from pytest_glm5.judge.verdicts import Verdict
from pytest_glm5.load.types import BenchResult, Workload
from pytest_glm5.measurement import cut_off
from pytest_glm5.metrics import RequestTiming
from pytest_glm5.servers.engines import SimEngine
from pytest_glm5.servers.engines.base import Preflight
from pytest_glm5.servers.forensics import request_stack_dump
from pytest_glm5.servers.pool import PoolSettings, ServerPool
from pytest_glm5.servers.process import ServerError, ServerHandle, ServerRecord
from pytest_glm5.servers.records import KEPT, RecordStore

PKG = Path(__file__).resolve().parents[1] / "pytest_glm5"
ONE = "import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n"


# --- settings: each bad value a usage error that names its source ------------------------------------------------

@pytest.mark.parametrize(("args", "ini", "message"), [
    (["--glm5-stall-timeout", "0"], "", "--glm5-stall-timeout = '0' must be a number > 0"),
    (["--glm5-stall-timeout", "-5"], "", "--glm5-stall-timeout = '-5' must be a number > 0"),
    (["--glm5-repeats", "-1"], "", "--glm5-repeats = '-1' must be a whole number >= 1"),
    (["--glm5-repeats", "0"], "", "--glm5-repeats = '0' must be a whole number >= 1"),
    (["--glm5-repeats", "two"], "", "--glm5-repeats = 'two' must be a whole number >= 1"),
    (["--glm5-startup-timeout", "0"], "", "--glm5-startup-timeout = '0' must be a number > 0"),
    (["--glm5-stop-timeout", "-1"], "", "--glm5-stop-timeout = '-1' must be a number > 0"),
    (["--glm5-sim-time-scale", "0"], "", "--glm5-sim-time-scale = '0' must be a number > 0"),
    (["--glm5-sim-slowdown", "nan"], "", "--glm5-sim-slowdown = 'nan' must be a number > 0"),
    ([], "glm5_sim_time_scale = fast", "ini glm5_sim_time_scale in */tox.ini = 'fast' must be a number > 0"),
    ([], "glm5_stall_timeout = 0", "ini glm5_stall_timeout in */tox.ini = '0' must be a number > 0"),
    (["--sglang-url", "not-a-url"], "", "--sglang-url = 'not-a-url' is not a URL: give the server's base URL*"),
    (["--glm5-effect", "0"], "", "--glm5-effect = '0' must be a fraction in (0, 1), e.g. 0.05: a change of 0 can "
                                 "never be ruled out"),
    (["--glm5-launches", "99999999999"], "", "--glm5-launches = '99999999999' must be a whole number from 1 to 100 "
                                             "(each is a server launch)"),
    (["--glm5-max-repeats", "101"], "", "--glm5-max-repeats = '101' must be a whole number from 1 to 100*"),
    (["--glm5-html="], "", "--glm5-html = '' is empty: give a value or leave the option out"),
    (["--glm5-shard="], "", "--glm5-shard = '' is empty: give a value or leave the option out"),
    (["--glm5-history="], "", "--glm5-history = '' is empty: give a value or leave the option out"),
    (["--glm5-lease-dir="], "", "--glm5-lease-dir = '' is empty: give a value or leave the option out"),
    ([], "glm5_lease_dir = /proc/leases",
     "GPU lease directory (ini glm5_lease_dir in */tox.ini) /proc/leases cannot be created or written to: *; pick "
     "another directory"),
])
def test_bad_setting_is_one_usage_error(pytester: pytest.Pytester, args: list[str], ini: str, message: str) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makeini(f"[pytest]\nglm5_configs = configs.toml\n{ini}\n")
    pytester.makepyfile(ONE)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: glm5: {message}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_an_unknown_event_loop_is_one_usage_error_before_any_launch(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # It used to mean uvloop silently: a typo of "asyncio" measured with the other loop.
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    pytester.makepyfile(ONE)
    monkeypatch.setenv("GLM5_EVENT_LOOP", "asycnio")
    result = pytester.runpytest("--glm5-sim")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: glm5: env GLM5_EVENT_LOOP='asycnio' is not an event loop the load client "
                                 "knows: give uvloop or asyncio *"])
    assert "launched" not in result.stdout.str()
    for value in ("asyncio", "uvloop", ""):
        monkeypatch.setenv("GLM5_EVENT_LOOP", value)
        assert pytester.runpytest("--glm5-sim", "--co", "-q").ret == pytest.ExitCode.OK


def test_bad_suite_default_names_the_conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_glm5_suite(config):\n    return {'defaults': {'glm5-stall-timeout': 'x'}}\n")
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: glm5: suite default glm5-stall-timeout in conftest.py = 'x' must be a "
                                 "number > 0"])


@pytest.mark.parametrize("option", ["--glm5-log-dir", "--glm5-report"])
def test_unwritable_output_is_one_usage_error_before_anything_runs(pytester: pytest.Pytester, option: str) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile(ONE)
    # /proc takes no new files, even for root (chmod would not stop root).
    result = pytester.runpytest(option, "/proc/glm5-nope/x" if option == "--glm5-log-dir" else "/proc/report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert out.count("ERROR: glm5:") == 1 and "Traceback" not in out, out
    assert servers_of(model) == []


@pytest.mark.slow
def test_report_that_fails_at_the_end_keeps_the_summary(pytester: pytest.Pytester) -> None:
    write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import os, pytest
@pytest.mark.server_config('a')
def test_x(bench):
    bench(concurrency=1, num_prompts=2, output_len=4)
    os.rmdir("out")  # the report's directory goes away while the run is on
""")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("--glm5-report", "out/report.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    said_lines(result, ["*glm5 servers*", "a: launched pid *",
                                 "cannot write --glm5-report out/report.json: No such file or directory; the "
                                 "summary above is all there is of this run"])


# --- files: UTF-8 with the offset named, modes, locks, tmp files --------------------------------------------------

def test_non_utf8_configs_names_file_and_offset(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    (pytester.path / "configs.toml").write_bytes(b'[config.a]\ndescription = "caf\xe9"\n')
    pytester.makepyfile(ONE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: */configs.toml: not UTF-8 text: byte 0xe9 at offset 29 (line 2); save the "
                                 "file as UTF-8"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_broken_baselines_file_found_before_any_launch(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(perf): pass\n")
    target = pytester.path / "baselines" / "sim-tiny-x1" / f"{Path(model).name}.toml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"[a.s.output_throughput]\nfloor = 1.0\nnote = \"\xff\"\n")
    t0 = time.monotonic()
    result = pytester.runpytest("--glm5-baselines", "baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: glm5: {target}: not UTF-8 text: byte 0xff at offset * (line 3)*"])
    assert "launched" not in result.stdout.str() and time.monotonic() - t0 < 20
    assert servers_of(model) == []


def test_new_baselines_file_is_readable_by_all(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "hw" / "m.toml"
        write_updates(path, [Verdict("c", "s", "output_throughput", 5.0, None, "new")])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_lock_and_tmp_files_are_ignored_and_none_committed() -> None:
    root = PKG.parent
    tracked = subprocess.run(["git", "ls-files", "baselines"], cwd=root, capture_output=True, text=True).stdout
    assert ".lock" not in tracked and ".tmp" not in tracked
    for name in ("baselines/hw/.m.toml.lock", "baselines/hw/.m.toml.abc123.tmp"):
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=root).returncode == 0, name


# --- baseline updates: comments stay put, passing entries untouched, no floor lowered by a stale writer -------------

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


# --- records: kept servers, launched servers, two writers ----------------------------------------------------------

def test_records_of_two_writers_merge(tmp_path: Path) -> None:
    stores = [RecordStore(tmp_path), RecordStore(tmp_path)]

    def write(k: int) -> None:
        for i in range(40):
            stores[k].put(KEPT, {"pid": 10_000 + 100 * k + i, "config": f"c{k}"})

    threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(RecordStore(tmp_path).read()[KEPT]) == 80


@pytest.mark.slow
def test_keep_servers_keeps_only_the_last_configs_server(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = { tp-size = 2 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_a(sglang_server): pass
@pytest.mark.server_config("b")
def test_b(sglang_server): pass
""")
    result = pytester.runpytest("--glm5-keep-servers")
    result.assert_outcomes(passed=2)
    said_lines(result, ["a: stopped pid * to free the GPUs for b (one live server at a time; the run's last "
                                 "server is the one kept)", "b: kept running: pid *"])
    live = servers_of(model)
    assert len(live) == 1 and "2" in live[0].cmdline()[live[0].cmdline().index("--tp-size") + 1]
    # The next run starts with a: b's kept server is stopped first, so two never run at once.
    result = pytester.runpytest("--glm5-keep-servers", "-k", "test_a")
    said_lines(result, ["b: stopped kept server pid * to free the GPUs for a (one live server at a time)"])
    assert len(servers_of(model)) == 1
    pytester.runpytest("--glm5-stop-servers")
    assert_no_server_left(model)


@pytest.mark.slow
def test_keep_mode_sigkill_during_model_load_leaves_no_unrecorded_server(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.slow]\nflags = { sim-startup-s = 600 }\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('slow')\ndef test_x(sglang_server): pass\n")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--glm5-keep-servers", "--glm5-sim-time-scale", "1"],
                            cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not servers_of(model) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert servers_of(model), "the server never started"
    time.sleep(0.5)
    proc.kill()
    proc.wait(30)
    assert servers_of(model)  # keep mode: the server outlives its pytest, loading still
    result = pytester.runpytest("--glm5-stop-servers")
    said_lines(result, ["glm5: reaped a server left by an earlier run: slow pid * port *"])
    assert_no_server_left(model)


# --- a stopped (SIGSTOP) server, hangs, crashes ---------------------------------------------------------------------

@pytest.mark.slow
def test_stopped_server_is_named_alive_but_not_answering(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("""
import os, signal, pytest
@pytest.mark.server_config("a")
def test_1(sglang_server): os.kill(sglang_server.pid, signal.SIGSTOP)
@pytest.mark.server_config("a")
def test_2(bench): bench(concurrency=1, num_prompts=2, output_len=4)
@pytest.mark.server_config("a")
def test_3(bench): bench(concurrency=1, num_prompts=2, output_len=4)
""")
    t0 = time.monotonic()
    result = pytester.runpytest("--glm5-stop-timeout", "60")
    elapsed = time.monotonic() - t0
    result.assert_outcomes(passed=1, failed=1, errors=1)
    said_lines(result, ["*server for a (pid *) is alive but not answering at http://127.0.0.1:*: process "
                                 "state stopped (SIGSTOP or a debugger); nothing answered within 5 s (*)*",
                                 "*server for a hung earlier*"])
    assert "URL right" not in result.stdout.str()  # our own process is alive: the URL is not in doubt
    assert elapsed < 40, elapsed  # not 5 s a test plus the 60 s SIGTERM wait
    assert_no_server_left(model)


@pytest.mark.slow
def test_a_server_that_answers_with_errors_is_not_taken_for_hung(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, '[config.a]\nflags = { sim-fault = "http500=1" }\n')
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_1(bench): bench(concurrency=1, num_prompts=2, output_len=4)
@pytest.mark.server_config("a")
def test_2(bench): bench(concurrency=1, num_prompts=2, output_len=4)
""")
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert out.count("HTTP 500") >= 2, out  # each test got the server's own answer
    assert "alive but not answering" not in out and "hung earlier" not in out
    assert out.count("a: launched pid") == 1  # the same server served both tests
    assert_no_server_left(model)


def test_hang_report_says_no_dump_when_none_was_written(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("")
    quiet = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGUSR1, "
                              "signal.SIG_IGN); print('ready', flush=True); time.sleep(30)"],
                             stdout=open(log, "ab"))  # noqa: SIM115 - the child owns it
    try:
        while "ready" not in log.read_text():
            time.sleep(0.05)
        rec = ServerRecord("a", "", 0, quiet.pid, "", str(log), "sim")
        handle = ServerHandle(ServerConfig("a"), rec, SimEngine(), quiet)
        assert request_stack_dump(handle, wait_s=0.5) == ("asked for a stack dump (SIGUSR1) but none reached the log "
                                                          "within 0.5 s")
    finally:
        quiet.kill()
        quiet.wait()


def test_cut_off_counts_only_requests_on_the_server_when_it_died() -> None:
    wl = Workload(concurrency=4, num_prompts=60)
    done = [RequestTiming(start=0.0, prompt_len=1, success=True, latency=1.0) for _ in range(4)]
    died = [RequestTiming(start=0.5 + i * 0.01, prompt_len=1, latency=0.6 - i * 0.01) for i in range(4)]  # end 1.1
    refused = [RequestTiming(start=1.1 + i * 0.001, prompt_len=1, latency=0.0005) for i in range(52)]
    result = BenchResult(url="", workload=wl, metrics={"completed": 4.0}, records=done + died + refused, errors=[],
                         server_info={}, max_in_flight=4, started_at=0.0)
    assert cut_off(result) == 4


def test_emulator_stops_at_once_on_sigterm_while_loading(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_glm5.sim", "--model-path", "/m", "--port", "0",
                             "--sim-profile", "tiny", "--sim-startup-s", "600"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        while "Load weight begin" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - t0 < 2.0
    finally:
        proc.kill()


# --- preflight, the CLI --------------------------------------------------------------------------------------------

class _Unchecked(SimEngine):
    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        return Preflight(skipped="cannot import sglang.srt.server_args in /opt/py: ImportError: torch")


def test_skipped_preflight_is_said_in_the_servers_events(tmp_path: Path) -> None:
    pool = ServerPool(PoolSettings(model="/m", log_dir=tmp_path), lambda cfg: _Unchecked(profile="tiny"))
    try:
        pool.get(ServerConfig("a", engine="sim"))
    finally:
        pool.close()
    assert pool.events[0].message == ("preflight skipped: cannot import sglang.srt.server_args in "
                                                   "/opt/py: ImportError: torch")


@pytest.mark.parametrize(("argv", "message"), [
    (["--num-prompts", "0"], "argument --num-prompts: expected a whole number >= 1, got '0'"),
    (["--warmup", "-1"], "argument --warmup: expected a whole number >= 0, got '-1'"),
    (["--url", "not-a-url"], "argument --url: 'not-a-url' is not a URL*"),
])
def test_glm5_bench_rejects_bad_values(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "--url", "http://127.0.0.1:9", *argv]
    with pytest.raises(SystemExit) as exc:
        glm5(args)
    assert exc.value.code == 2
    import fnmatch

    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert fnmatch.fnmatch(err, f"glm5 bench: error: {message}"), err


def test_glm5_bench_names_the_open_files_limit(capsys: pytest.CaptureFixture[str]) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
              "from pytest_glm5.cli import main; sys.exit(main(['bench', '--url', 'http://127.0.0.1:9', "
              "'--concurrency', '1000']))")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "concurrency 1000 needs about 1064 open files, but the limit is 256 (hard); raise it (ulimit -n 1064" \
           in p.stderr, p.stderr
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)


def test_process_tree_is_left_clean() -> None:
    # The tests above start emulators and plain children: none may outlive them.
    leftovers = [p for p in psutil.Process().children(recursive=True) if "pytest_glm5.sim" in " ".join(p.cmdline())]
    assert leftovers == []


def test_same_process_needs_the_pid_to_exist() -> None:
    from pytest_glm5.servers.process import same_process, started

    me = psutil.Process()
    mine = started(me.pid)
    assert mine is not None and same_process(me.pid, 0.0) and same_process(me.pid, mine)
    assert not same_process(me.pid, mine - 100)  # a recycled pid
    assert not same_process(2 ** 22 + 1, 0.0)  # above Linux's pid_max: no such process
    # A SIGKILLed child its parent has not reaped (an xdist worker the OOM killer took) is dead: its leases and queue
    # place must be freed, or the other workers wait forever (at c979bd9 it counted as alive).
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = started(child.pid)
        assert start is not None
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # not reaped yet: no wait() so far
        assert started(child.pid) is None and not same_process(child.pid, start) and not same_process(child.pid, 0.0)
    finally:
        child.wait()


def test_a_process_keeps_its_identity_when_the_clock_moves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """/proc/stat's btime is the wall clock less the time since boot, in whole seconds: NTP or a resumed VM moves it.
    psutil's create_time() adds it, so a live lease owner read that way passed for a recycled pid and its GPUs were
    granted twice (two fresh-clone CI runs of test_processes_never_share_a_gpu). The identity is boot-relative."""
    from pytest_glm5.servers.leases import LeaseBook, emulated
    from pytest_glm5.servers.process import same_process, started

    me = psutil.Process().pid
    start = started(me)
    assert start is not None
    boot = psutil.boot_time()
    monkeypatch.setattr(psutil, "boot_time", lambda: boot + 1.0)
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + 1.0)  # what Process.create_time() adds
    assert abs(psutil.Process(me).create_time() - (start + boot)) >= 1.0  # the old identity no longer matched
    assert started(me) == start and same_process(me, start)
    book = LeaseBook(tmp_path / "l.json", emulated("t", 8), "8 emulated GPUs")
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot)
    held = book.acquire("a", 4)
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + 1.0)
    other = book.acquire("b", 4)  # the first holder still runs: the other four GPUs, not the same ones
    assert not set(held.indices) & set(other.indices)


# --- provenance and workload per entry, the log in a failing test's report -----------------------------------------

PROV_TESTS = """
import pytest
@pytest.mark.server_config("a")
def test_a(perf):
    perf.check(perf.run("s", concurrency=1, num_prompts=2, output_len=4, warmup=0), "s", ["output_throughput"])
@pytest.mark.server_config("b")
def test_b(perf):
    perf.check(perf.run("s", concurrency=2, num_prompts=4, output_len=4, warmup=0), "s", ["output_throughput"])
"""


@pytest.mark.slow
def test_each_entry_gets_its_own_provenance_and_workload(pytester: pytest.Pytester) -> None:
    import tomllib

    model = write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = { tp-size = 2 }\n")
    pytester.makepyfile(PROV_TESTS)
    pytester.runpytest("--update-baselines").assert_outcomes(passed=2)
    data = tomllib.loads((pytester.path / "baselines" / "sim-tiny-x1" / f"{Path(model).name}.toml").read_text())
    a, b = data["a"]["s"]["output_throughput"], data["b"]["s"]["output_throughput"]
    assert a["provenance"]["server_args"] != b["provenance"]["server_args"]  # each its own server's args
    assert a["workload"] == {"concurrency": 1, "input_len": 128, "output_len": 4, "protocol": "sglang",
                             "range_ratio": 1.0, "sampling": "random-ids"}
    assert b["workload"]["concurrency"] == 2
    # The same scenario name under another workload is not compared: it says so.
    pytester.makepyfile(PROV_TESTS.replace("concurrency=1, num_prompts=2", "concurrency=3, num_prompts=6"))
    result = pytester.runpytest("-rA", "-k", "test_a")  # b's throughput against a floor of one run is not the point
    result.assert_outcomes(passed=1, deselected=1)
    said_lines(result, ["*a s output_throughput * (workload changed: baseline recorded with c1 128/4 sglang, "
                                 "random-ids ids, measured with c3 128/4 sglang, random-ids ids; not compared, record "
                                 "it with --update-baselines)"])
    assert_no_server_left(model)


def test_failing_test_report_carries_the_server_log_tail(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): assert 0\n")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    said_lines(result, ["*glm5 server log: a (last * lines of */a-*.log)*",
                                 "*The server is fired up and ready to roll!*"])
    assert_no_server_left(model)


def test_stopping_another_processs_server_does_not_wait_out_its_zombie(tmp_path: Path) -> None:
    # Keep mode under xdist: a worker stops another worker's kept server, which stays a zombie until its own parent
    # reaps it. At c979bd9 psutil.wait_procs took that zombie for alive and waited the whole stop timeout plus 10 s.
    from pytest_glm5.servers.process import kill_tree

    out = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; p = subprocess.Popen(['sleep', "
                               f"'60']); open({str(out)!r}, 'w').write(str(p.pid)); time.sleep(60)"])
    try:
        while not out.exists() or not out.read_text():
            time.sleep(0.02)
        child = int(out.read_text())
        t0 = time.monotonic()
        kill_tree(child, 30.0)
        assert time.monotonic() - t0 < 5.0
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE  # its parent has not reaped it: still stopped
    finally:
        parent.kill()
        parent.wait()


def test_a_config_name_that_is_not_a_file_name_is_one_line(pytester: pytest.Pytester) -> None:
    # At c979bd9 `[config."tp8/fast"]` ended in a traceback when its log file was opened.
    write_configs(pytester, '[config."tp8/fast"]\nflags = {}\n')
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('tp8/fast')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: */configs.toml: config name 'tp8/fast' may hold only letters, digits, '_', "
                                 "'.' and '-' (it names log files and baselines tables); rename the [[]config.NAME] "
                                 "table"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_glm5_history_names_only_the_filters_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_glm5.report.history import append

    doc = {"run": {"time": "2026-12-01T00:00:00+00:00", "commit": "abc"}, "verdicts": [
        {"config": "tp8", "scenario": "s", "metric": "output_throughput", "measured": 10.0, "model": "/m/M",
         "provenance": {"hardware": "hw"}, "launches": [], "verdict": "pass"}]}
    append(tmp_path, doc)
    assert glm5(["history", str(tmp_path), "--metric", "p99_ttft_ms"]) == 2
    err = capsys.readouterr().err
    assert "no series matches --metric p99_ttft_ms in" in err and "None" not in err, err


@pytest.mark.slow
def test_stop_servers_says_its_message_once(pytester: pytest.Pytester) -> None:
    # At c979bd9 pytest.exit printed it twice ("Exit: ..." and the "!!! _pytest.outcomes.Exit: ... !!!" banner).
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_subprocess("--glm5-stop-servers")
    assert result.ret == 0
    out = result.stdout.str() + result.stderr.str()
    assert out.count("no kept servers recorded") == 1 and "Exit" not in out, out


def test_no_server_is_launched_once_the_pool_is_closed(tmp_path: Path) -> None:
    # After Ctrl-C the session closes the pool; a fixture or late test asking for a server then must not launch
    # one that nothing would stop (at c979bd9 it did).
    pool = ServerPool(PoolSettings(model="/m", log_dir=tmp_path), lambda cfg: SimEngine(profile="tiny"))
    pool.close()
    with pytest.raises(ServerError, match=r"the run is ending .*: no server for a is launched now"):
        pool.get(ServerConfig("a", engine="sim"))
    assert pool.records == {} and not list(tmp_path.glob("*.log"))
