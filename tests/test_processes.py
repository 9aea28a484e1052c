"""Preflight, the CLI's bad values, and process identity: what runs is what was launched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_glm5.cli import main as glm5
from pytest_glm5.configs import ServerConfig
from pytest_glm5.servers.engines import SimEngine
from pytest_glm5.servers.engines.base import Preflight
from pytest_glm5.servers.pool import PoolSettings, ServerPool


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


_FINALIZER_SIGTERM = """
import gc, os, signal
from pytest_glm5.servers.process import sigterm_as_interrupt
sigterm_as_interrupt()
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs in here, where an exception is dropped as unraisable
            pass
try:
    cycle = Finalized()
    cycle.self = cycle
    del cycle
    gc.collect()
    for _ in range(200):
        sum(range(100_000))
    print("went on")
except KeyboardInterrupt as exc:
    print("interrupted:", exc)
"""


def test_a_sigterm_that_lands_in_a_finalizer_still_ends_the_run() -> None:
    """A collection runs closed event loops' transports' __del__: a SIGTERM there used to be dropped."""
    out = subprocess.run([sys.executable, "-c", _FINALIZER_SIGTERM], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "interrupted: SIGTERM", out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr


_SWALLOWED_SIGTERM = """
import os, signal, sys, time
from pytest_glm5.servers.process import interrupt_taken, sigterm_as_interrupt
sigterm_as_interrupt()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
except KeyboardInterrupt:
    print("swallowed", flush=True)  # as a callback or a library may: the run would go on
t0 = time.monotonic()
try:
    time.sleep(10)
    print("went on")
except KeyboardInterrupt:
    print(f"interrupted again after {time.monotonic() - t0:.0f} s", flush=True)
if sys.argv[1:] == ["take"]:
    interrupt_taken()  # pytest took it: nothing more is sent
    try:
        time.sleep(5)
        print("no resend", flush=True)
    except KeyboardInterrupt:
        print("resent after it was taken")
"""


def test_a_swallowed_sigterm_is_sent_again_until_pytest_takes_it() -> None:
    # CI: about once in five runs a SIGTERM during a load left the run going past the test's 60 s (its interrupt
    # raised where it was swallowed). It is sent again every 2 s until pytest takes it, then never again.
    # Both at once: the test waits on their sleeps (11 s one after the other), not on the CPU.
    procs = [(subprocess.Popen([sys.executable, "-c", _SWALLOWED_SIGTERM, *([arg] if arg else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), tail)
             for arg, tail in (("", []), ("take", ["no resend"]))]
    try:
        for proc, tail in procs:
            stdout, stderr = proc.communicate(timeout=60)
            lines = stdout.split("\n")[:-1]
            assert lines[:2] == ["swallowed", "interrupted again after 2 s"] and lines[2:] == tail, stdout + stderr
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
