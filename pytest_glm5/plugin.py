"""pytest hooks only: options, markers, fixtures, grouping, summary. It wires; the modules compute."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from .configs import ConfigError, ServerConfig, load_configs
from .engines import Engine, SGLangEngine, SimEngine
from .loadgen import BenchError, BenchResult, Workload, run_workload
from .server import ConfigMismatch, PoolSettings, ServerError, ServerHandle, ServerPool, stop_recorded

MARKER = "server_config"
SIM_DEFAULT_MODEL = "/models/GLM-5-NVFP4"
configs_key = pytest.StashKey[dict[str, ServerConfig]]()
pool_key = pytest.StashKey[ServerPool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options, each with an ini twin where a project would set it once."""
    g = parser.getgroup("glm5", "pytest-glm5: LLM serving performance gate")

    def both(name: str, help: str, **kw: Any) -> None:
        g.addoption(f"--{name}", help=help, **kw)
        parser.addini(name.replace("-", "_"), help=help)

    both("glm5-configs", "server configs file (default suites/configs.toml under the rootdir)")
    both("glm5-model-path", "model path for configs without their own (also env GLM5_MODEL_PATH)")
    g.addoption("--glm5-sim", action="store_true", help="run every config on the SGLang emulator")
    both("glm5-sim-profile", "emulator profile name or TOML file (default: the config's, else glm5-sm120)")
    both("glm5-sim-time-scale", "emulator time scale (0.1 runs ten times faster)", type=float)
    g.addoption("--glm5-sim-slowdown", type=float, default=1.0,
                help="emulated decode speed times F (0.8 injects a 20%% regression)")
    both("glm5-sim-startup-s", "emulated model-load seconds (default: the profile's)", type=float)
    both("glm5-log-dir", "where server logs go (default: glm5-logs under pytest's basetemp)")
    both("glm5-startup-timeout", "seconds a server may take to become ready (default 3600)", type=float)
    both("glm5-stop-timeout", "seconds between SIGTERM and SIGKILL when stopping a server (default 60)",
         type=float)
    g.addoption("--glm5-keep-servers", action="store_true",
                help="leave servers running at the end and reuse them next run if their config matches")
    g.addoption("--glm5-stop-servers", action="store_true", help="stop servers kept by earlier runs, then exit")
    g.addoption("--sglang-url", default=None, help="use this running server for every config; never stop it")
    g.addoption("--glm5-strict", action="store_true",
                help="fail (not skip) when an external server's args differ from the config")
    g.addoption("--glm5-report", default=None, help="write a JSON report of servers and results here")


def _opt(config: pytest.Config, name: str, default: Any = None) -> Any:
    value = config.getoption(name.replace("-", "_"))
    if value is None:
        ini = config.getini(name.replace("-", "_"))
        value = ini if ini not in (None, "", []) else None
    return default if value is None else value


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and make SIGTERM end the session like Ctrl-C (so servers are stopped)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name): run this test against a live server of the named config from the configs file "
        "(launched once per session, or reused when its fingerprint matches).")
    if hasattr(signal, "SIGTERM") and _main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt("SIGTERM")

        def restore() -> None:
            signal.signal(signal.SIGTERM, previous)

        signal.signal(signal.SIGTERM, on_term)
        config.add_cleanup(restore)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def pytest_sessionstart(session: pytest.Session) -> None:
    """`--glm5-stop-servers`: stop what earlier runs kept, then exit."""
    config = session.config
    if config.getoption("glm5_stop_servers"):
        assert config.cache is not None
        lines = stop_recorded(config.cache, float(_opt(config, "glm5-stop-timeout", 60.0)))
        msg = "\n".join(lines) or "no kept servers recorded"
        pytest.exit(f"glm5: {msg}", returncode=0)


def _configs_path(config: pytest.Config) -> Path:
    given = _opt(config, "glm5-configs")
    if given is None:
        return Path(config.rootpath) / "suites" / "configs.toml"
    path = Path(given)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def _marker_name(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    if len(mark.args) != 1 or not isinstance(mark.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: use @pytest.mark.{MARKER}(\"NAME\") with one config name")
    return str(mark.args[0])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check config names, mark known issues strict-xfail, and group each config's tests together."""
    named = [(item, _marker_name(item)) for item in items]
    if not any(name for _, name in named):
        return
    path = _configs_path(config)
    try:
        configs = load_configs(path)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[configs_key] = configs
    for item, name in named:
        if name is not None and name not in configs:
            raise pytest.UsageError(f"{item.nodeid}: unknown server config {name!r}; known configs in {path}: "
                                    f"{', '.join(configs)}")
        if name is not None and configs[name].known_issue:
            item.add_marker(pytest.mark.xfail(reason=f"known issue of {name}: {configs[name].known_issue}",
                                              strict=True, raises=None))
    plain = [item for item, name in named if name is None]
    groups: dict[str, list[pytest.Item]] = {}
    for item, name in named:
        if name is not None:
            groups.setdefault(name, []).append(item)
    items[:] = plain + [item for group in groups.values() for item in group]


class _Progress:
    """One updating terminal line while a server starts: elapsed time and the newest log line."""

    def __init__(self, config: pytest.Config) -> None:
        self.tr = config.pluginmanager.get_plugin("terminalreporter")
        self.quiet = config.get_verbosity() < 0
        self.tty = bool(self.tr and self.tr.isatty())
        self.last = 0.0
        self.shown = False

    def __call__(self, config: str, elapsed: float, line: str) -> None:
        if self.quiet or self.tr is None:
            return
        now = time.monotonic()
        if not self.last and not self.tty:
            self.last = now  # In logs, a line every 30 s; the first after 30 s.
        if now - self.last < (0.5 if self.tty else 30.0):
            return
        self.last = now
        text = f"glm5: starting {config} [{elapsed:5.0f} s] {line.strip()[:110]}"
        if self.tty:
            self.tr.rewrite(text, erase=True)
            self.shown = True
        else:
            self.tr.write_line(text)

    def done(self) -> None:
        if self.shown and self.tr is not None:
            self.tr.rewrite("", erase=True)
            self.shown = False


def _engine_factory(config: pytest.Config) -> Callable[[ServerConfig], Engine]:
    sim = bool(config.getoption("glm5_sim"))
    scale = float(_opt(config, "glm5-sim-time-scale", 1.0))
    startup = _opt(config, "glm5-sim-startup-s")

    def engine_for(cfg: ServerConfig) -> Engine:
        if sim or cfg.engine == "sim":
            return SimEngine(profile=_opt(config, "glm5-sim-profile"), time_scale=scale,
                             slowdown=float(config.getoption("glm5_sim_slowdown")),
                             startup_s=float(startup) if startup is not None else None)
        if cfg.engine == "sglang":
            return SGLangEngine()
        raise ServerError(f"config {cfg.name}: engine {cfg.engine!r} is not available in this version")

    return engine_for


@pytest.fixture(scope="session")
def glm5_pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """The session's server pool (one live server at a time)."""
    config = request.config
    log_dir = _opt(config, "glm5-log-dir")
    model = _opt(config, "glm5-model-path") or os.environ.get("GLM5_MODEL_PATH")
    if model is None and config.getoption("glm5_sim"):
        model = SIM_DEFAULT_MODEL
    progress = _Progress(config)
    keep = bool(config.getoption("glm5_keep_servers"))
    if log_dir is None and keep and config.cache is not None:
        # Kept servers outlive this run's basetemp, which the next run deletes: log where the cache lives.
        log_dir = config.cache.mkdir("glm5-logs")
    settings = PoolSettings(
        model=model,
        log_dir=Path(log_dir) if log_dir else tmp_path_factory.getbasetemp() / "glm5-logs",
        startup_timeout=float(_opt(config, "glm5-startup-timeout", 3600.0)),
        stop_timeout=float(_opt(config, "glm5-stop-timeout", 60.0)),
        keep=keep,
        external_url=config.getoption("sglang_url"),
        strict=bool(config.getoption("glm5_strict")),
    )
    pool = ServerPool(settings, _engine_factory(config), cache=config.cache, progress=progress)
    config.stash[pool_key] = pool
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def sglang_server(request: pytest.FixtureRequest, glm5_pool: ServerPool) -> ServerHandle:
    """The live server of this test's `server_config` marker."""
    name = _marker_name(request.node)
    if name is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses sglang_server without @pytest.mark.{MARKER}(NAME)")
    cfg = request.config.stash[configs_key][name]
    problem: ServerError | None = None
    try:
        handle = glm5_pool.get(cfg)
    except ServerError as exc:
        problem = exc
    finally:
        if isinstance(glm5_pool.progress, _Progress):
            glm5_pool.progress.done()
    # Outside the except block, so the report shows the cause alone, not a chain of exceptions.
    if isinstance(problem, ConfigMismatch):
        detail = f"external server differs from config {problem.config}: " + "; ".join(problem.diffs)
        if glm5_pool.settings.strict:
            pytest.fail(detail, pytrace=False)
        pytest.skip(detail)
    if problem is not None:
        pytest.fail(str(problem), pytrace=False)
    return handle


@pytest.fixture
def bench(sglang_server: ServerHandle) -> Callable[..., BenchResult]:
    """`bench(concurrency=1, num_prompts=None, input_len=128, output_len=128, ...)` against this test's server."""

    def run(concurrency: int = 1, num_prompts: int | None = None, **kw: Any) -> BenchResult:
        kw.setdefault("protocol", sglang_server.config.protocol)
        kw.setdefault("warmup", concurrency)
        wl = Workload(concurrency=concurrency, num_prompts=num_prompts or max(8, 4 * concurrency), **kw)
        try:
            return run_workload(sglang_server.url, wl)
        except BenchError as exc:
            pytest.fail(f"{sglang_server.config.name}: {exc}", pytrace=False)

    return run


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop servers (also after Ctrl-C) and write the JSON report."""
    pool = session.config.stash.get(pool_key, None)
    if pool is None:
        return
    pool.close()
    path = session.config.getoption("glm5_report")
    if path:
        Path(path).write_text(json.dumps({"servers": pool.report()}, indent=2))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What the pool did: launches, reuses and why, failures."""
    pool = config.stash.get(pool_key, None)
    if pool is None or not pool.events:
        return
    terminalreporter.section("glm5 servers")
    for ev in pool.events:
        terminalreporter.write_line(f"{ev.config}: {ev.message}")
    sys.stdout.flush()
