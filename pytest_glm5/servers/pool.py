"""The run's servers: one live server per worker, GPU leases, reuse by fingerprint, records across runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..configs import ServerConfig
from ..settings import Settings
from ..telemetry.nvml import wait_released
from . import forensics
from .builds import Build
from .engines.base import Engine, EngineError, gpus_for
from .leases import Lease, LeaseBook, LeaseError, span
from .process import (
    HOST,
    Progress,
    ServerError,
    ServerHandle,
    ServerRecord,
    http_get,
    kill_tree,
    launch,
    same_process,
    stop,
    tree_pids,
)
from .records import KEPT, LAUNCHED, RecordStore, Tables, owner

GPU_RELEASE_TIMEOUT_S = 120.0  # a stopped server's GPU memory is back within seconds; past this it is said
# A hung server's stack is dumped already and its loop answers nothing, a SIGTERM included (the emulator's hang held
# on to it for the whole 5 s the pool used to wait): a moment for a process that does go, then SIGKILL.
HUNG_STOP_S = 1.0


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

    @classmethod
    def from_settings(cls, s: Settings, log_dir: Path) -> PoolSettings:
        """The run's pool settings; `log_dir` where --glm5-log-dir is not set."""
        return cls(model=s.model, log_dir=Path(s.log_dir) if s.log_dir else log_dir,
                   startup_timeout=s.startup_timeout, stop_timeout=s.stop_timeout, keep=s.keep_servers,
                   external_url=s.sglang_url, strict=s.strict, relaunch_after_crash=s.relaunch_after_crash,
                   stall_timeout=s.stall_timeout)


@dataclass
class PoolEvent:
    """One line of what the pool did, for the terminal and the report."""

    config: str
    message: str


class ConfigMismatch(ServerError):
    """An external server whose resolved args differ from the config."""

    def __init__(self, config: str, url: str, diffs: list[str]) -> None:
        self.config, self.url, self.diffs = config, url, diffs
        super().__init__(f"server at {url} does not match config {config}: " + "; ".join(diffs))


@dataclass
class ServerPool:
    """One live server at a time in this process: launch, reuse or attach, and always stop. With GPU leases
    (`leases`), servers of other processes run beside it on other GPUs, and a kept server stays until its GPUs
    are needed; without, each config may hold every GPU, so another config's kept server is stopped first."""

    settings: PoolSettings
    engine_for: Callable[[ServerConfig], Engine]
    store: RecordStore | None = None
    progress: Progress | None = None
    current: ServerHandle | None = None
    records: dict[str, ServerRecord] = field(default_factory=dict)
    events: list[PoolEvent] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    relaunch_why: dict[str, str] = field(default_factory=dict)
    relaunched: set[str] = field(default_factory=set)
    identify: Callable[[Build], dict[str, Any]] | None = None  # a build's identity (builds.identity)
    current_build: str | None = None
    launches: int = 0  # servers launched by this run (each is a sample of the launch-to-launch variance)
    load_s: dict[str, list[float]] = field(default_factory=dict)  # config -> seconds each launch took to be ready
    leases: LeaseBook | None = None  # the book of the current config's machine
    leases_for: Callable[[ServerConfig], LeaseBook | None] | None = None  # each config's book (emulated profiles)
    lease: Lease | None = None  # the current server's
    outside: list[str] = field(default_factory=list)  # processes on its GPUs that no lease holds (NVML)
    closed: bool = False  # the run is ending (close() ran, or Ctrl-C): nothing more is launched

    def _say(self, config: str, message: str) -> None:
        self.events.append(PoolEvent(config, message))

    def model_for(self, config: ServerConfig) -> str:
        """The model path: the config's own, else the run's; a clear error when neither is set."""
        model = config.model or self.settings.model
        if not model:
            raise ServerError(f"no model path for config {config.name}: pass --glm5-model-path, set ini "
                              "glm5_model_path or env GLM5_MODEL_PATH, or give the config a model")
        return model

    def load_estimate(self, name: str) -> float:
        """Seconds a launch of this config took to be ready in this run (0.0: none yet)."""
        rec = self.records.get(name)
        return rec.startup_s if rec is not None else 0.0

    def get(self, config: ServerConfig, build: Build | None = None, fresh: bool = False) -> ServerHandle:
        """The live server for this config (on this build): the current one, a reused one, or a new launch;
        `fresh`: always a new launch (another sample of the launch-to-launch variance)."""
        if config.name in self.failures:
            raise ServerError(self.failures[config.name])
        if self.closed:
            raise ServerError(f"the run is ending (interrupted or finished): no server for {config.name} is launched "
                              "now")
        wanted = build.name if build is not None else None
        if self.current is not None and self.current.config.name == config.name and not fresh \
                and self.current_build == wanted:
            if self.current.exit_code() is None:
                return self.current
            self.notice_death()
            if config.name in self.failures:
                raise ServerError(self.failures[config.name])
        self.release_current(next_config=config.name)
        if self.leases_for is not None:
            self.leases = self.leases_for(config)
        engine = self.engine_for(config)
        if self.settings.external_url:
            return self._attach(config, engine)
        model = self.model_for(config)
        try:
            if build is not None:
                base = getattr(engine, "python", None)
                if build.python and base is None:
                    raise EngineError(f"build {build.name} names the Python {build.python}, but engine {engine.name} "
                                      "does not run in a Python of its own, so the build cannot change what runs; "
                                      f"drop `python` from [build.{build.name}] (its env still applies)")
                if build.patches and (not build.python or os.path.realpath(build.python) == os.path.realpath(base
                                                                                                          or "")):
                    self._say(config.name, f"build {build.name} lists patches but runs the engine's own Python "
                                           f"({base}): unless that Python was built with them (scripts/make_build.sh)"
                                           ", this measures unpatched code under the patched build's name")
                own = build.python if build.python and base is not None else None
                if not build.python:
                    # The engine's own Python (SGLang: the first that imports it); one without any: ours.
                    build = replace(build, python=getattr(engine, "python", sys.executable))
                engine = engine.with_build(build.env, own, self.identify(build) if self.identify is not None else {})
            version = engine.version()
            fp = config.fingerprint(version, model, {**engine.fingerprint_extra(), "build": engine.build_identity})
        except EngineError as exc:
            raise self._fail(config, str(exc)) from None
        reused = None if fresh else self._reuse(config, engine, fp)
        if reused is not None:
            reused.record.engine_version = version
            self.current = reused
            self.current_build = wanted
            return reused
        check = engine.preflight(config, model, HOST, 0)
        if check.problem:
            raise self._fail(config, forensics.preflight_rejected(config.name, engine.name, check.problem))
        if check.skipped:
            self._say(config.name, f"preflight skipped: {check.skipped}")
        lease = self._lease(config, engine)

        def spawned(rec: ServerRecord) -> None:
            self._note_launched(rec)
            if lease is not None and self.leases is not None and rec.pid is not None:
                self.leases.bind(lease, rec.pid, rec.started)

        try:
            handle = launch(config, engine, model, self.settings.log_dir, startup_timeout=self.settings.startup_timeout,
                            keep=self.settings.keep, progress=self.progress, fingerprint=fp, on_spawn=spawned,
                            env=lease.env() if lease is not None else None)
        except ServerError as exc:
            self._release_lease(lease)
            raise self._fail(config, str(exc), engine, exc.record) from None
        except BaseException:
            self._release_lease(lease)
            raise
        handle.record.why = self.relaunch_why.pop(config.name, "")
        handle.record.engine_version = version
        on = ""
        if lease is not None:
            handle.record.gpus, handle.record.lease_wait_s = lease.indices, round(lease.waited_s, 3)
            handle.record.outside = list(self.outside)
            on = f" on {span(lease.indices)}" + (f" (waited {lease.waited_s:.1f} s for them)"
                                                      if lease.waited_s >= 1.0 else "")
        self._say(config.name, f"launched pid {handle.pid} on port {handle.record.port}{on} in "
                               f"{handle.record.startup_s:.1f} s, log {handle.record.log_path}")
        self.records[config.name] = handle.record
        self.current = handle
        self.lease = lease
        self.current_build = wanted
        self.launches += 1
        self.load_s.setdefault(config.name, []).append(round(handle.record.startup_s, 3))
        return handle

    def _need(self, config: ServerConfig, engine: Engine) -> int:
        """GPUs to lease for this config; a config that needs more than exist fails now, with the numbers."""
        assert self.leases is not None
        count, why = gpus_for(engine, config, len(self.leases.devices))
        try:
            return self.leases.check(config.name, count, why)
        except LeaseError as exc:
            raise self._fail(config, str(exc)) from None

    def _lease(self, config: ServerConfig, engine: Engine) -> Lease | None:
        if self.leases is None:
            return None
        need = self._need(config, engine)

        def waiting(name: str, waited: float, line: str) -> None:
            if self.progress is not None:
                self.progress(name, waited, line, "waiting")

        lease = self.leases.acquire(config.name, need, waiting, self._evict)
        self.outside = self.leases.outsiders(lease)
        for line in self.outside:
            self._say(config.name, f"its GPUs are not free: {line}; its numbers may be skewed, and it may run out "
                                   "of memory (every verdict names it)")
        return lease

    def _evict(self, holder: dict[str, Any]) -> None:
        """Stop an idle kept server (or one a killed run left) whose GPUs the next launch needs."""
        pid = int(holder["server_pid"])
        if same_process(pid, float(holder.get("server_started", 0.0))):
            kill_tree(pid, self.settings.stop_timeout)
        self._forget_kept(pid)
        idle = "kept server" if holder.get("kept") else "server of a killed run"
        freed = span(sorted(int(i) for i in holder.get("indices", [])))
        self._say(str(holder["config"]), f"stopped {idle} pid {pid} to free {freed} for the next launch")

    def _release_lease(self, lease: Lease | None) -> None:
        if lease is not None and self.leases is not None:
            self.leases.release(lease)

    def cotenants(self) -> list[str]:
        """Other servers holding GPUs of this machine now (empty without leases)."""
        if self.leases is None:
            return []
        mine = self.current.pid if self.current is not None else None
        return self.leases.others(mine) + (self.outside if self.current is not None else [])

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
        reason = forensics.crash_reason(handle, code)
        handle.record.crash = reason
        self.release_current()
        if self.settings.relaunch_after_crash and name not in self.relaunched:
            self.relaunched.add(name)
            self._say(name, f"crashed ({reason}); relaunching once (--glm5-relaunch-after-crash)")
            return
        self.failures[name] = f"server for {name} crashed earlier: {reason}"
        self._say(name, f"crashed: {reason}")

    def notice_hang(self, reason: str) -> None:
        """The current server is alive but stuck: stop it without a graceful wait; its config fails fast after."""
        handle = self.current
        if handle is None:
            return
        self.current = None
        name = handle.config.name
        handle.record.crash = f"hung: {reason}"
        if handle.record.how != "external":
            stop(handle, timeout=HUNG_STOP_S)
            self._forget_launched(handle.record)
        self._release_lease(self.lease)
        self.lease = None
        self.failures[name] = f"server for {name} hung earlier: {reason}"
        self._say(name, f"hung: {reason}; stopped")

    def _fail(self, config: ServerConfig, message: str, engine: Engine | None = None,
              launched: ServerRecord | None = None) -> ServerError:
        lines = message.splitlines()
        # Later tests of this config get the cause in one line: what, the log lines that say why, where.
        picked = engine.fatal_lines(lines[1:])[-3:] if engine else []
        self.failures[config.name] = forensics.failed_earlier(config.name, message, picked)
        if launched is not None:  # a startup crash: its pid, log and exit status go to the report and the page
            self.records[config.name] = launched
        rec = self.records.setdefault(config.name, ServerRecord(config.name, "", 0, None, "", "", ""))
        rec.how = "failed"
        rec.why = lines[0]
        return ServerError(message)

    def _attach(self, config: ServerConfig, engine: Engine) -> ServerHandle:
        url = str(self.settings.external_url).rstrip("/")
        rec = ServerRecord(config.name, url, 0, None, "", "", engine.name, how="external")
        handle = ServerHandle(config, rec, engine, None)
        if http_get(url + engine.info_path, timeout=5)[0] == 0:
            raise self._fail(config, f"--sglang-url {url} is unreachable (nothing answered {engine.info_path} "
                                     "within 5 s)")
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

    def kept(self) -> dict[str, dict[str, Any]]:
        """Kept servers recorded by earlier runs, by pid."""
        return self.store.read()[KEPT] if self.store is not None else {}

    def _reuse(self, config: ServerConfig, engine: Engine, fp: str) -> ServerHandle | None:
        found: ServerHandle | None = None
        for pid, old in self.kept().items():
            rec = ServerRecord(**{k: v for k, v in old.items() if k in ServerRecord.__dataclass_fields__})
            handle = ServerHandle(config, rec, engine, None)
            if old.get("config") != config.name:
                if self.leases is not None:
                    continue  # It holds GPUs of its own; a launch that needs them stops it (LeaseBook.acquire).
                # One live server at a time: another config's kept server holds the GPUs this launch needs.
                if same_process(rec.pid, rec.started):
                    stop(handle, self.settings.stop_timeout)
                    self._say(str(old.get("config")), f"stopped kept server pid {pid} to free the GPUs for "
                                                      f"{config.name} (one live server at a time)")
                self._forget_kept(rec.pid)
                continue
            rec.stopped = False
            why = None
            if not same_process(rec.pid, rec.started):
                why = f"recorded pid {rec.pid} is gone"
            elif rec.fingerprint != fp:
                why = f"config changed (fingerprint {rec.fingerprint} -> {fp}): {self._changed(config, old)}"
            elif not handle.alive():
                why = "it does not answer readiness"
            elif found is None and self.leases is not None:
                need = self._need(config, engine)
                self.lease = self.leases.take_over(config.name, int(rec.pid or 0), need)
                if self.lease is None:
                    why = f"it does not hold the {need} GPUs the config needs now"
                else:
                    rec.gpus = self.lease.indices
            self._forget_kept(rec.pid)
            if why is None and found is None:
                rec.how, rec.why = "reused", f"kept server pid {rec.pid}, fingerprint {fp} matches"
                self.records[config.name] = rec
                self._note_launched(rec)
                self._say(config.name, f"reusing kept server pid {rec.pid} on port {rec.port} (fingerprint matches)")
                found = handle
                continue
            if same_process(rec.pid, rec.started):
                stop(handle, self.settings.stop_timeout)
            if why is not None:
                self._say(config.name, f"not reusing kept server: {why}; launching anew")
                self.relaunch_why[config.name] = why
        return found

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

    def release_current(self, next_config: str | None = None) -> None:
        """Stop the current server: before another config's launch (in every mode: one live server at a time),
        and at the end of the run unless servers are kept."""
        handle, lease = self.current, self.lease
        self.current, self.lease, self.outside = None, None, []
        if handle is None or handle.record.how == "external":
            return
        if self.settings.keep and next_config is not None and handle.exit_code() is None:
            if lease is not None and next_config != handle.config.name:
                self._keep(handle, lease, f"kept idle on {span(lease.indices)}: pid {handle.pid} on port "
                                          f"{handle.record.port} (stopped when a launch needs its GPUs)")
                return
            self._say(handle.config.name, f"stopped pid {handle.pid} to free the GPUs for {next_config} (one live "
                                          "server at a time; the run's last server is the one kept)")
        tree = tree_pids(handle.pid) if handle.pid is not None else set()
        stop(handle, self.settings.stop_timeout)
        self._forget_launched(handle.record)
        if lease is not None:
            # The port is free once the server exits; its GPU memory a moment later. The next launch waits for it.
            held = wait_released([d.uuid for d in lease.devices], tree, GPU_RELEASE_TIMEOUT_S)
            if held:
                self._say(handle.config.name, held)
        self._release_lease(lease)

    def close(self) -> None:
        """End of session: stop the current server, or keep it running and recorded (--glm5-keep-servers). No
        server is launched after it (a fixture torn down after Ctrl-C, a late test of another worker)."""
        self.closed = True
        handle = self.current
        if handle is None or not self.settings.keep or handle.record.how == "external" \
                or handle.exit_code() is not None:
            self.release_current()
            return
        lease = self.lease
        self.current, self.lease = None, None
        on = f" on {span(lease.indices)}" if lease is not None else ""
        self._keep(handle, lease, f"kept running: pid {handle.pid} on port {handle.record.port}{on}")

    def _keep(self, handle: ServerHandle, lease: Lease | None, message: str) -> None:
        data = asdict(handle.record)
        data["argv_flags"] = handle.config.flag_argv()
        if self.store is not None:
            pid = str(handle.pid)

            def move_to_kept(d: Tables) -> None:
                d[KEPT][pid] = data
                d[LAUNCHED].pop(pid, None)

            self.store.update(move_to_kept)
        if lease is not None and self.leases is not None:
            self.leases.keep(lease)
        self._say(handle.config.name, message)

    def _note_launched(self, rec: ServerRecord) -> None:
        # Recorded from spawn until stopped: if this pytest is killed outright, the next run reaps what is left.
        if self.store is not None:
            self.store.put(LAUNCHED, {"config": rec.config, "pid": rec.pid, "port": rec.port,
                                      "started": rec.started, **owner()})

    def _forget_launched(self, rec: ServerRecord) -> None:
        if self.store is not None:
            self.store.drop(LAUNCHED, rec.pid)

    def _forget_kept(self, pid: int | None) -> None:
        if self.store is not None:
            self.store.drop(KEPT, pid)

    def log_section(self, name: str, lines: int) -> tuple[str, str] | None:
        """A config's server log tail for a failing test's report: (title, text); None without a log."""
        rec = self.records.get(name)
        if rec is None or not rec.log_path:
            return None
        got = forensics.tail(Path(rec.log_path), lines)
        return f"glm5 server log: {name} (last {len(got)} lines of {rec.log_path})", "\n".join(got)

    def server_table(self, tail_lines: int = 0) -> dict[str, Any]:
        """Per config: launched / reused / external / failed and why, pid, port, startup s, log, exit status; a
        server that crashed or exited non-zero with its log's last `tail_lines` lines."""
        out = {name: {k: v for k, v in asdict(rec).items() if k != "stopped"} for name, rec in self.records.items()}
        for rec in out.values():
            if tail_lines and (rec.get("crash") or rec.get("exit_status") not in (None, 0)):
                rec["log_tail"] = forensics.tail(Path(rec["log_path"]), tail_lines) if rec.get("log_path") else []
        return out


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
