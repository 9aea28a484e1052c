"""One server process: launch, wait until ready, watch, stop the whole tree."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import psutil

from .. import proxies
from ..configs import ServerConfig
from . import forensics
from .engines.base import Engine

HOST = "127.0.0.1"
POLL_S = 0.25
# A server ready within a second (the emulator, a small llama-server) waited up to a whole POLL_S for the next look:
# the first seconds are polled at FAST_POLL_S (a refused connection costs microseconds).
FAST_POLL_S, FAST_FOR_S = 0.03, 3.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
REDELIVER_S = 0.01  # a SIGTERM that landed in a finalizer is sent again after this
_START_SLACK_S = 1e-3 if Path("/proc/self/stat").exists() else 1.0  # exact clock ticks where procfs gives them


class ServerError(Exception):
    """A server that did not come up, died, or cannot be reused; the message says why and where the log is.
    `record`: the server's record where one was launched (its pid, log and exit status go to the report)."""

    record: ServerRecord | None = None


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = HOST) -> bool:
    """True while something accepts connections on host:port."""
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def who_listens(port: int) -> str:
    """`pid 123 (python3)` of the process listening on a local port, or `another process`."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    return "another process"


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET url; (status, body), with status 0 when nothing answered."""
    try:
        with proxies.opener(url).open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (OSError, ValueError):
        return 0, b""


def _pdeathsig() -> None:
    # Linux: the server gets SIGKILL when the pytest that launched it dies, even by SIGKILL.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def tree_pids(pid: int) -> set[int]:
    """The process and all its descendants now (empty once it is gone)."""
    try:
        proc = psutil.Process(pid)
        return {pid, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return set()


def kill_tree(pid: int, timeout: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL every process left in the tree."""
    try:
        proc = psutil.Process(pid)
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
            # A stopped process (SIGSTOP, a debugger) acts on SIGTERM only once continued; without this the
            # whole timeout is waited out before the SIGKILL.
            p.send_signal(signal.SIGCONT)
    alive = _wait_gone(tree, timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _wait_gone(alive, 10.0)


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process has exited; those still running after `timeout`. A zombie has exited: psutil's
    wait_procs takes one for alive when it is another process's child (a server of another xdist worker, which
    reaps it only later), and waited out the whole stop timeout for it."""
    for p in procs:
        with contextlib.suppress(psutil.Error, ChildProcessError):
            p.wait(0)  # reap our own children at once
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        for p in alive:
            with contextlib.suppress(psutil.Error, ChildProcessError):
                p.wait(0)
        alive = [p for p in alive if not _gone(p)]
    return alive


def process_state(pid: int | None) -> str:
    """`running`, `sleeping`, `stopped (SIGSTOP or a debugger)`, `zombie`, ... or `gone`."""
    if pid is None:
        return "unknown (not launched here)"
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return "gone"
    return {psutil.STATUS_STOPPED: "stopped (SIGSTOP or a debugger)",
            psutil.STATUS_TRACING_STOP: "stopped by a tracer",
            psutil.STATUS_DISK_SLEEP: "in uninterruptible I/O wait (D)"}.get(status, str(status))


def cpu_wait_s(pid: int | None) -> float | None:
    """Seconds the server's process tree (every thread of it and of its children) was ready to run and waited for a
    CPU, from Linux's schedstat (None: no such process here, or Linux does not say): the report's server_cpu_wait_s,
    recorded, not judged (on the emulator a neighbour's load raised it without slowing the figures)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total, seen = 0, False
    for proc in procs:
        try:
            tasks = os.listdir(f"/proc/{proc.pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
                seen = True
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended between the listing and the read
    return total / 1e9 if seen else None


@dataclass
class ServerRecord:
    """What the pool knows of a server, for the report and for reuse across runs."""

    config: str
    url: str
    port: int
    pid: int | None
    fingerprint: str
    log_path: str
    engine: str
    how: str = "launched"
    why: str = ""
    startup_s: float = 0.0
    exit_status: int | None = None
    stopped: bool = False
    crash: str | None = None
    started: float = 0.0  # seconds since boot (started()): with the pid, which process this is
    engine_version: str = ""
    model: str = ""
    launched_at: float = 0.0
    stopped_at: float = 0.0
    gpus: list[int] = field(default_factory=list)  # its lease (NVML indices); empty: no leases in this run
    lease_wait_s: float = 0.0
    outside: list[str] = field(default_factory=list)  # processes already on its GPUs at launch, outside the leases


def started(pid: int | None) -> float | None:
    """When the process started, in seconds since boot (its identity beside the pid), or None when there is no such
    live process (a zombie counts as dead: an xdist worker the OOM killer SIGKILLed stays one until its controller
    reaps it, which may be never). Not psutil's create_time(): it adds /proc/stat's btime, a whole second that moves
    with the wall clock (NTP, a resumed VM), so the same process read twice can differ by a second and pass for a
    recycled pid; psutil's own process identity uses this boot-relative time for that reason."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        text = ""
    if text:  # "pid (comm) state ppid ... starttime(22nd field) ...": comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2:].split()
        return None if fields[0] == "Z" else int(fields[19]) / _CLOCK_TICKS
    try:  # no procfs (macOS): the wall-clock start less the boot time, as stable as the platform allows
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time() - psutil.boot_time()
    except psutil.Error:
        return None


def same_process(pid: int | None, start: float) -> bool:
    """The recorded process still runs: same pid and same start (from started(); 0.0: any live process with that
    pid)."""
    now = started(pid)
    if now is None:
        return False
    return abs(now - start) < _START_SLACK_S if start else True


class ServerHandle:
    """The live server a test gets: url, config, pid, log path, /server_info, alive()."""

    def __init__(self, config: ServerConfig, record: ServerRecord, engine: Engine,
                 proc: subprocess.Popen[bytes] | None) -> None:
        self.config = config
        self.record = record
        self.engine = engine
        self.proc = proc

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:30000."""
        return self.record.url

    @property
    def model(self) -> str | None:
        """The model path the server was launched with (None when unknown, e.g. an external server)."""
        return self.record.model or None

    @property
    def pid(self) -> int | None:
        """Process id (None for an external server)."""
        return self.record.pid

    @property
    def log_path(self) -> Path | None:
        """The server's log file (None for an external server)."""
        return Path(self.record.log_path) if self.record.log_path else None

    def server_info(self) -> dict[str, Any]:
        """The engine's info endpoint (`/server_info` for SGLang, `/get_server_info` for older ones; empty if it has
        none)."""
        if process_state(self.record.pid).startswith("stopped"):
            return {}  # it answers nothing: the load's preflight names the state, after 10 s a path here
        for path in (self.engine.info_path, *self.engine.info_fallbacks):
            status, body = http_get(self.url + path, timeout=10)
            if status == 200:
                with contextlib.suppress(ValueError):
                    return dict(json.loads(body))
            if status == 0:
                break  # nothing answered: a fallback path would wait as long for the same silence
        return {}

    def exit_code(self) -> int | None:
        """The exit status once the process has ended."""
        if self.proc is not None:
            return self.proc.poll()
        if self.record.pid is not None and not same_process(self.record.pid, self.record.started):
            return -1
        return None

    def alive(self) -> bool:
        """Process running (for launched servers) and answering readiness."""
        if self.exit_code() is not None:
            return False
        return any(http_get(self.url + p, timeout=5)[0] == 200 for p in self.engine.ready_paths)


class Progress(Protocol):
    """Receives one-line progress while a server starts (elapsed seconds, newest log line) or waits for its GPUs
    (`doing` is then "waiting")."""

    def __call__(self, config: str, elapsed: float, line: str, doing: str = "starting") -> None: ...


def launch(config: ServerConfig, engine: Engine, model: str, log_dir: Path, *, startup_timeout: float,
           keep: bool = False, progress: Progress | None = None, fingerprint: str = "",
           on_spawn: Callable[[ServerRecord], None] | None = None, env: dict[str, str] | None = None) -> ServerHandle:
    """Start a server of this config and wait until it is ready; ServerError (process stopped) otherwise.

    `on_spawn` gets the record as soon as the process exists, before the (possibly hour-long) model load:
    whoever records servers for reaping must know of it before anything can kill this pytest. `env`: set last
    (a GPU lease's CUDA_VISIBLE_DEVICES)."""
    fixed = config.flags.get("port")
    port = int(fixed) if fixed else free_port()
    if fixed and port_in_use(port):
        raise ServerError(f"{config.name}: port {port} (the config's `port` flag) is already in use by "
                          f"{who_listens(port)}; stop it, or drop `port` from the config to get a free port")
    argv = engine.argv(config, model, HOST, port)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{config.name}-{port}.log"
    env = {**os.environ, **engine.env(config), **(env or {})}
    if keep:
        env.pop("GLM5_PDEATHSIG", None)
    with open(log_path, "wb") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=None if keep else _pdeathsig)
        except OSError as exc:
            raise ServerError(f"{config.name}: cannot start {argv[0]}: {exc.strerror}") from None
    record = ServerRecord(config=config.name, url=f"http://{HOST}:{port}", port=port, pid=proc.pid,
                          fingerprint=fingerprint, log_path=str(log_path), engine=engine.name, model=model,
                          launched_at=time.time())
    record.started = started(proc.pid) or 0.0
    handle = ServerHandle(config, record, engine, proc)
    t0 = time.monotonic()
    try:
        if on_spawn is not None:
            on_spawn(record)
        wait_ready(handle, startup_timeout, progress)
    except ServerError as exc:
        stop(handle, timeout=5)
        record.exit_status = proc.poll()
        record.crash = str(exc).splitlines()[0] if str(exc) else "did not start"
        exc.record = record
        raise
    except BaseException:
        stop(handle, timeout=5)
        raise
    record.startup_s = time.monotonic() - t0
    return handle


def wait_ready(handle: ServerHandle, timeout: float, progress: Progress | None = None) -> None:
    """Poll readiness (every FAST_POLL_S at first, then POLL_S); fail at once if the process exits, or with the log
    tail at the timeout."""
    t0 = time.monotonic()
    paths = list(handle.engine.ready_paths)
    log = handle.log_path
    name = handle.config.name
    while True:
        code = handle.exit_code()
        if code is not None:
            raise ServerError(forensics.startup_exit(name, code, time.monotonic() - t0, log))
        for path in list(paths):
            status, _ = http_get(handle.url + path, timeout=2)
            if status == 200:
                return
            if status == 404 and len(paths) > 1:
                paths.remove(path)  # An engine without /ready: fall back to the next probe.
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            raise ServerError(forensics.startup_timeout(name, timeout, log))
        if progress and log:
            last = forensics.tail(log, 1)
            progress(name, elapsed, last[0] if last else "")
        time.sleep(FAST_POLL_S if elapsed < FAST_FOR_S else POLL_S)


def stop(handle: ServerHandle, timeout: float = 60.0) -> None:
    """SIGTERM the group, wait up to timeout, SIGKILL what is left, wait until the port is free."""
    rec = handle.record
    if rec.pid is None or rec.stopped:
        return
    kill_tree(rec.pid, timeout)
    if handle.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rec.exit_status = handle.proc.wait(10)
    deadline = time.monotonic() + 30
    while port_in_use(rec.port) and time.monotonic() < deadline:
        time.sleep(0.1)
    rec.stopped = True
    rec.stopped_at = time.time()


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether frame runs inside a __del__, where an exception cannot leave (Python drops it as unraisable)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


RESEND_S = 2.0  # a SIGTERM turned into an interrupt is sent again this often until pytest says it took it


class Interrupts:
    """SIGTERM as Ctrl-C for one run: `taken()` when pytest began handling the interrupt, `restore()` the handler
    before. A KeyboardInterrupt can be swallowed where it lands (a finalizer, an event loop's callback; CI saw a run
    go on past a SIGTERM about once in five), so one raised is sent again every RESEND_S until pytest takes it; after
    that none is resent, so the stopping of the servers is never cut short by one of ours."""

    def __init__(self) -> None:
        self.previous = signal.getsignal(signal.SIGTERM)
        self.taken_at: float | None = None
        self._resending = False

    def taken(self) -> None:
        """pytest is handling the interrupt (pytest_keyboard_interrupt): no more resends."""
        self.taken_at = time.monotonic()

    def restore(self) -> None:
        """The handler as it was before the run."""
        self.taken()
        signal.signal(signal.SIGTERM, self.previous)

    def _resend(self) -> None:
        while self.taken_at is None:
            time.sleep(RESEND_S)
            if self.taken_at is None:
                os.kill(os.getpid(), signal.SIGTERM)

    def raised(self) -> None:
        """An interrupt was raised: see that it arrives (once per run, a daemon thread)."""
        if not self._resending and self.taken_at is None:
            self._resending = True
            threading.Thread(target=self._resend, name="glm5-sigterm-resend", daemon=True).start()


_INSTALLED: list[Interrupts] = []  # the process's SIGTERM handler is one: so is what it resends


def interrupt_taken() -> None:
    """pytest took the interrupt (its pytest_keyboard_interrupt hook): nothing is resent."""
    for run in _INSTALLED:
        run.taken()


def sigterm_as_interrupt() -> Interrupts | None:
    """Make SIGTERM end the run like Ctrl-C (so servers are stopped); None where not possible."""
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return None
    run = Interrupts()
    _INSTALLED[:] = [run]

    def on_term(signum: int, frame: FrameType | None) -> None:
        if run.taken_at is not None and time.monotonic() - run.taken_at < RESEND_S:
            return  # a resend already on its way when pytest took the first: never cut the servers' stop short
        if in_finalizer(frame):
            # An exception raised in a finalizer is printed and dropped ("Exception ignored in ..."): a SIGTERM that
            # lands in a __del__ (a collection runs closed event loops' transports' ones) would be lost and
            # the run would go on. Send it again shortly, from a thread: by then the finalizer has returned (tripping
            # it here would rerun this handler inside the same finalizer, recursing until the stack overflows).
            threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum)).start()
            return
        run.raised()
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    return run
