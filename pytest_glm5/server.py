"""Server processes: launch, wait until ready, watch, stop the whole tree; and the pool with its reuse rules."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from .configs import ServerConfig
from .engines.base import Engine, EngineError

if TYPE_CHECKING:
    from .loadgen import BenchResult

HOST = "127.0.0.1"
POLL_S = 0.25
LOG_TAIL_LINES = 40
CACHE_KEY = "glm5/servers"
LAUNCHED_KEY = "glm5/launched"


class ServerError(Exception):
    """A server that did not come up, died, or cannot be reused; the message says why and where the log is."""


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
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (OSError, ValueError):
        return 0, b""


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a log file (empty if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            return f.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _pdeathsig() -> None:
    # Linux: the server gets SIGKILL when the pytest that launched it dies, even by SIGKILL.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def kill_tree(pid: int, timeout: float) -> int | None:
    """SIGTERM the process group, wait, then SIGKILL every process left in the tree; the exit status if ours."""
    try:
        proc = psutil.Process(pid)
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.Error):
        proc.terminate()
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=10)
    return None


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
    create_time: float = 0.0
    engine_version: str = ""
    model: str = ""


def same_process(pid: int | None, create_time: float) -> bool:
    """The recorded process still runs (a recycled pid with another start time does not count)."""
    if pid is None:
        return False
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 1.0 if create_time else True
    except psutil.Error:
        return False


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
        """The server's /server_info (empty if it has none)."""
        status, body = http_get(self.url + self.engine.info_path, timeout=10)
        return dict(json.loads(body)) if status == 200 else {}

    def exit_code(self) -> int | None:
        """The exit status once the process has ended."""
        if self.proc is not None:
            return self.proc.poll()
        if self.record.pid is not None and not same_process(self.record.pid, self.record.create_time):
            return -1
        return None

    def alive(self) -> bool:
        """Process running (for launched servers) and answering readiness."""
        if self.exit_code() is not None:
            return False
        return any(http_get(self.url + p, timeout=5)[0] == 200 for p in self.engine.ready_paths)


class Progress(Protocol):
    """Receives one-line progress while a server starts (elapsed seconds, newest log line)."""

    def __call__(self, config: str, elapsed: float, line: str) -> None: ...


def launch(config: ServerConfig, engine: Engine, model: str, log_dir: Path, *, startup_timeout: float,
           keep: bool = False, progress: Progress | None = None, fingerprint: str = "") -> ServerHandle:
    """Start a server of this config and wait until it is ready; ServerError (process stopped) otherwise."""
    fixed = config.flags.get("port")
    port = int(fixed) if fixed else free_port()
    if fixed and port_in_use(port):
        raise ServerError(f"{config.name}: port {port} (the config's `port` flag) is already in use by "
                          f"{who_listens(port)}; stop it, or drop `port` from the config to get a free port")
    argv = engine.argv(config, model, HOST, port)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{config.name}-{port}.log"
    env = {**os.environ, **engine.env(config)}
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
                          fingerprint=fingerprint, log_path=str(log_path), engine=engine.name, model=model)
    with contextlib.suppress(psutil.Error):
        record.create_time = psutil.Process(proc.pid).create_time()
    handle = ServerHandle(config, record, engine, proc)
    t0 = time.monotonic()
    try:
        wait_ready(handle, startup_timeout, progress)
    except BaseException:
        stop(handle, timeout=5)
        raise
    record.startup_s = time.monotonic() - t0
    return handle


def wait_ready(handle: ServerHandle, timeout: float, progress: Progress | None = None) -> None:
    """Poll readiness every POLL_S; fail at once if the process exits, or with the log tail at the timeout."""
    t0 = time.monotonic()
    paths = list(handle.engine.ready_paths)
    log = handle.log_path
    name = handle.config.name
    while True:
        code = handle.exit_code()
        if code is not None:
            lines = tail(log) if log else []
            raise ServerError(
                f"server for {name} exited during startup with {describe_exit(code)} after "
                f"{time.monotonic() - t0:.1f} s; last {len(lines)} log lines:\n" + "\n".join(lines)
                + f"\nfull log: {log}")
        for path in list(paths):
            status, _ = http_get(handle.url + path, timeout=2)
            if status == 200:
                return
            if status == 404 and len(paths) > 1:
                paths.remove(path)  # An engine without /ready: fall back to the next probe.
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            lines = tail(log) if log else []
            raise ServerError(
                f"server for {name} not ready after {timeout:g} s (--glm5-startup-timeout); last {len(lines)} "
                "log lines:\n" + "\n".join(lines) + f"\nfull log: {log}")
        if progress and log:
            last = tail(log, 1)
            progress(name, elapsed, last[0] if last else "")
        time.sleep(POLL_S)


def describe_exit(code: int) -> str:
    """`exit code 1` or `signal SIGKILL`."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


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


class Cache(Protocol):
    """Where kept servers are recorded across runs (pytest's cache has this shape)."""

    def get(self, key: str, default: Any) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


@dataclass
class PoolSettings:
    """How the pool launches and reuses servers."""

    model: str | None
    log_dir: Path
    startup_timeout: float = 3600.0
    stop_timeout: float = 60.0
    keep: bool = False
    external_url: str | None = None
    strict: bool = False
    relaunch_after_crash: bool = False
    stall_timeout: float = 120.0


@dataclass
class PoolEvent:
    """One line of what the pool did, for the terminal and the report."""

    config: str
    message: str


@dataclass
class ServerPool:
    """One live server at a time (GPUs are exclusive): launch, reuse or attach, and always stop."""

    settings: PoolSettings
    engine_for: Callable[[ServerConfig], Engine]
    cache: Cache | None = None
    progress: Progress | None = None
    current: ServerHandle | None = None
    records: dict[str, ServerRecord] = field(default_factory=dict)
    events: list[PoolEvent] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    relaunch_why: dict[str, str] = field(default_factory=dict)
    relaunched: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.cache is not None:
            self.kept = dict(self.cache.get(CACHE_KEY, {}))

    def _say(self, config: str, message: str) -> None:
        self.events.append(PoolEvent(config, message))

    def model_for(self, config: ServerConfig) -> str:
        """The model path: the config's own, else the run's; a clear error when neither is set."""
        model = config.model or self.settings.model
        if not model:
            raise ServerError(f"no model path for config {config.name}: pass --glm5-model-path, set ini "
                              "glm5_model_path or env GLM5_MODEL_PATH, or give the config a model")
        return model

    def get(self, config: ServerConfig) -> ServerHandle:
        """The live server for this config: the current one, a reused one, or a new launch."""
        if config.name in self.failures:
            raise ServerError(self.failures[config.name])
        if self.current is not None and self.current.config.name == config.name:
            if self.current.exit_code() is None:
                return self.current
            self.notice_death()
            if config.name in self.failures:
                raise ServerError(self.failures[config.name])
        self.release_current()
        engine = self.engine_for(config)
        if self.settings.external_url:
            return self._attach(config, engine)
        model = self.model_for(config)
        try:
            version = engine.version()
            fp = config.fingerprint(version, model, engine.fingerprint_extra())
        except EngineError as exc:
            raise self._fail(config, str(exc)) from None
        reused = self._reuse(config, engine, fp)
        if reused is not None:
            reused.record.engine_version = version
            self.current = reused
            return reused
        problem = engine.preflight(config, model, HOST, 0)
        if problem:
            raise self._fail(config, f"{config.name}: {engine.name} rejects the flags: {problem} "
                                     f"(argv checked by preflight in seconds, before any model load)")
        try:
            handle = launch(config, engine, model, self.settings.log_dir, startup_timeout=self.settings.startup_timeout,
                            keep=self.settings.keep, progress=self.progress, fingerprint=fp)
        except ServerError as exc:
            raise self._fail(config, str(exc), engine) from None
        handle.record.why = self.relaunch_why.pop(config.name, "")
        handle.record.engine_version = version
        self._note_launched(handle.record)
        self._say(config.name, f"launched pid {handle.pid} on port {handle.record.port} in "
                               f"{handle.record.startup_s:.1f} s, log {handle.record.log_path}")
        self.records[config.name] = handle.record
        self.current = handle
        return handle

    def notice_death(self) -> None:
        """If the current server died, record why; later tests of its config fail fast with that reason
        (or, under --glm5-relaunch-after-crash, the next one relaunches it once)."""
        handle = self.current
        if handle is None or handle.record.crash is not None:
            return
        code = handle.exit_code()
        if code is None:
            return
        name = handle.config.name
        reason = crash_reason(handle, code)
        handle.record.crash = reason
        self.release_current()
        if self.settings.relaunch_after_crash and name not in self.relaunched:
            self.relaunched.add(name)
            self._say(name, f"crashed ({reason}); relaunching once (--glm5-relaunch-after-crash)")
            return
        self.failures[name] = f"server for {name} crashed earlier: {reason}"
        self._say(name, f"crashed: {reason}")

    def after_failed_run(self, result: BenchResult | None) -> None:
        """After a load run that failed: a stalled one hung the server, otherwise it may have died."""
        if result is not None and result.stalled:
            self.notice_hang(str(result.aborted))
        else:
            self.notice_death()

    def notice_hang(self, reason: str) -> None:
        """The current server is alive but stuck: stop it without a graceful wait; its config fails fast after."""
        handle = self.current
        if handle is None:
            return
        self.current = None
        name = handle.config.name
        handle.record.crash = f"hung: {reason}"
        if handle.record.how != "external":
            stop(handle, timeout=5.0)
            self._forget_launched(handle.record)
        self.failures[name] = f"server for {name} hung earlier: {reason}"
        self._say(name, f"hung: {reason}; stopped")

    def _fail(self, config: ServerConfig, message: str, engine: Engine | None = None) -> ServerError:
        lines = message.splitlines()
        # Later tests of this config get the cause in one line: what, the log lines that say why, where.
        head = lines[0].split("; last ")[0]
        picked = engine.fatal_lines(lines[1:])[-3:] if engine else []
        where = f"; {lines[-1]}" if len(lines) > 1 and lines[-1].startswith("full log:") else ""
        self.failures[config.name] = (f"server for {config.name} failed earlier: {head}"
                                      + "".join(f"; {p}" for p in picked) + where)
        rec = self.records.setdefault(config.name, ServerRecord(config.name, "", 0, None, "", "", ""))
        rec.how = "failed"
        rec.why = lines[0]
        return ServerError(message)

    def _attach(self, config: ServerConfig, engine: Engine) -> ServerHandle:
        url = str(self.settings.external_url).rstrip("/")
        rec = ServerRecord(config.name, url, 0, None, "", "", engine.name, how="external")
        handle = ServerHandle(config, rec, engine, None)
        if http_get(url + "/v1/models", timeout=5)[0] == 0:
            raise self._fail(config, f"--sglang-url {url} is unreachable (nothing answered within 5 s)")
        info = handle.server_info()
        diffs = engine.compare(config, config.model or self.settings.model or info.get("model_path", ""), info)
        if diffs:
            rec.why = "; ".join(diffs)
            self.records[config.name] = rec
            raise ConfigMismatch(config.name, url, diffs)
        self.records[config.name] = rec
        self._say(config.name, f"using external server {url}")
        self.current = handle
        return handle

    def _reuse(self, config: ServerConfig, engine: Engine, fp: str) -> ServerHandle | None:
        old = self.kept.get(config.name)
        if not old:
            return None
        rec = ServerRecord(**{k: v for k, v in old.items() if k in ServerRecord.__dataclass_fields__})
        rec.stopped = False
        handle = ServerHandle(config, rec, engine, None)
        why = None
        if not same_process(rec.pid, rec.create_time):
            why = f"recorded pid {rec.pid} is gone"
        elif rec.fingerprint != fp:
            why = f"config changed (fingerprint {rec.fingerprint} -> {fp}): {self._changed(config, old)}"
        elif not handle.alive():
            why = "it does not answer readiness"
        del self.kept[config.name]
        self._save_kept()
        if why is None:
            rec.how, rec.why = "reused", f"kept server pid {rec.pid}, fingerprint {fp} matches"
            self.records[config.name] = rec
            self._say(config.name, f"reusing kept server pid {rec.pid} on port {rec.port} (fingerprint matches)")
            return handle
        if same_process(rec.pid, rec.create_time):
            stop(handle, self.settings.stop_timeout)
        self._say(config.name, f"not reusing kept server: {why}; launching anew")
        self.relaunch_why[config.name] = why
        return None

    def _changed(self, config: ServerConfig, old: dict[str, Any]) -> str:
        before = old.get("argv_flags")
        now = config.flag_argv()
        if before is None:
            return "flags, env, model or engine"
        removed = [f for f in before if f.startswith("--") and f not in now]
        added = [f for f in now if f.startswith("--") and f not in before]
        changed = [f"{a} {b}->{c}" for a, b, c in _flag_values(before, now)]
        parts = ([f"added {' '.join(added)}"] if added else []) + ([f"removed {' '.join(removed)}"] if removed else [])
        parts += [f"changed {c}" for c in changed]
        return ", ".join(parts) or "engine, model or env"

    def release_current(self) -> None:
        """Stop the current server before another config's starts (kept servers stay up, recorded)."""
        handle = self.current
        self.current = None
        if handle is None or handle.record.how == "external":
            return
        if self.settings.keep and handle.exit_code() is None:
            data = asdict(handle.record)
            data["argv_flags"] = handle.config.flag_argv()
            self.kept[handle.config.name] = data
            self._save_kept()
            self._forget_launched(handle.record)
            self._say(handle.config.name, f"kept running: pid {handle.pid} on port {handle.record.port}")
            return
        stop(handle, self.settings.stop_timeout)
        self._forget_launched(handle.record)

    def _note_launched(self, rec: ServerRecord) -> None:
        # Recorded until stopped: if this pytest is killed outright, the next run reaps what is left.
        if self.cache is not None:
            launched = dict(self.cache.get(LAUNCHED_KEY, {}))
            launched[str(rec.pid)] = {"config": rec.config, "pid": rec.pid, "port": rec.port,
                                      "create_time": rec.create_time}
            self.cache.set(LAUNCHED_KEY, launched)

    def _forget_launched(self, rec: ServerRecord) -> None:
        if self.cache is not None:
            launched = dict(self.cache.get(LAUNCHED_KEY, {}))
            if launched.pop(str(rec.pid), None) is not None:
                self.cache.set(LAUNCHED_KEY, launched)

    def _save_kept(self) -> None:
        if self.cache is not None:
            self.cache.set(CACHE_KEY, self.kept)

    def close(self) -> None:
        """End of session: stop (or keep) the current server."""
        self.release_current()

    def report(self) -> dict[str, Any]:
        """Per config: launched / reused / external / failed and why, pid, port, startup s, log, exit status."""
        return {name: {k: v for k, v in asdict(rec).items() if k != "stopped"} for name, rec in self.records.items()}


def _flag_values(before: list[str], now: list[str]) -> list[tuple[str, str, str]]:
    def pairs(argv: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for i, word in enumerate(argv):
            if word.startswith("--"):
                nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
                out[word] = nxt
        return out

    a, b = pairs(before), pairs(now)
    return [(k, a[k], b[k]) for k in a if k in b and a[k] != b[k]]


def _log_story(handle: ServerHandle, max_lines: int) -> tuple[list[str], list[str]]:
    """The log's last 400 lines and, of those, the last max_lines its engine's fatal patterns pick."""
    lines = tail(handle.log_path, 400) if handle.log_path else []
    return lines, handle.engine.fatal_lines(lines)[-max_lines:]


def crash_reason(handle: ServerHandle, code: int, max_lines: int = 8) -> str:
    """How a server died: exit status, the log lines its engine's patterns pick, and the full log's path."""
    _, picked = _log_story(handle, max_lines)
    log = handle.log_path
    text = describe_exit(code)
    if picked:
        text += "; " + " | ".join(picked)
    return text + (f"; full log: {log}" if log else "")


def crash_report(handle: ServerHandle, code: int, elapsed_s: float, completed: int, in_flight: int,
                 concurrency: int, failed: int = 0) -> str:
    """The failure of a load run whose server died: when, what was in flight, why (log lines), where the log is."""
    lines, picked = _log_story(handle, 12)
    log = handle.log_path
    cut = f", {failed} cut off by the death" if failed else ""
    out = [f"server for {handle.config.name} died during the load run: {describe_exit(code)}, {elapsed_s:.1f} s "
           f"into the run at concurrency {concurrency}; {completed} requests completed{cut}, {in_flight} in flight "
           "when it was noticed"]
    if picked:
        out.append("log lines that matter:")
        out += [f"  {line}" for line in picked]
    else:
        out.append("last log lines:")
        out += [f"  {line}" for line in lines[-10:]]
    if log:
        out.append(f"full log: {log}")
    return "\n".join(out)


class ConfigMismatch(ServerError):
    """An external server whose resolved args differ from the config."""

    def __init__(self, config: str, url: str, diffs: list[str]) -> None:
        self.config, self.url, self.diffs = config, url, diffs
        super().__init__(f"server at {url} does not match config {config}: " + "; ".join(diffs))


def reap_leftovers(cache: Cache, timeout: float = 10.0) -> list[str]:
    """Stop servers an earlier run launched and never stopped (it was killed outright); one line each."""
    launched = dict(cache.get(LAUNCHED_KEY, {}))
    lines = []
    for data in launched.values():
        pid = data.get("pid")
        if pid and same_process(pid, data.get("create_time", 0.0)):
            kill_tree(pid, timeout)
            lines.append(f"reaped a server left by an earlier run: {data.get('config')} pid {pid} "
                         f"port {data.get('port')}")
    if launched:
        cache.set(LAUNCHED_KEY, {})
    return lines


def stop_recorded(cache: Cache, timeout: float = 60.0) -> list[str]:
    """Stop every server recorded by --glm5-keep-servers; return one line per server."""
    kept = dict(cache.get(CACHE_KEY, {}))
    lines = []
    for name, data in kept.items():
        pid = data.get("pid")
        if pid and same_process(pid, data.get("create_time", 0.0)):
            kill_tree(pid, timeout)
            lines.append(f"stopped {name}: pid {pid}, port {data.get('port')}")
        else:
            lines.append(f"{name}: pid {pid} was already gone")
    cache.set(CACHE_KEY, {})
    return lines

