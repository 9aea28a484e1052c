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
from typing import Any, TypeVar

import pytest

from .baselines import Change
from .configs import ConfigError, ServerConfig, load_configs
from .engines import Engine, LlamaCppEngine, SGLangEngine, SimEngine, TransformersEngine
from .loadgen import BenchResult, Workload
from .perf import GateError, PerfGate, args_hash, git_commit, hardware_for
from .report import json_report, summary_lines, telemetry_lines, verdict_table
from .server import (
    ConfigMismatch,
    PoolSettings,
    ServerError,
    ServerHandle,
    ServerPool,
    reap_leftovers,
    stop_recorded,
)
from .telemetry import Gpu, describe, hardware_key, inventory
from .watched import check_stability, measure

MARKER = "server_config"
T = TypeVar("T")
SIM_DEFAULT_MODEL = "/models/GLM-5-NVFP4"
GATED_MARKERS = {"sm120": "12.0"}
configs_key = pytest.StashKey[dict[str, ServerConfig]]()
pool_key = pytest.StashKey[ServerPool]()
gate_key = pytest.StashKey[PerfGate]()
changes_key = pytest.StashKey[tuple[list[Change], list[str]]]()
gpus_key = pytest.StashKey[list[Gpu] | None]()
contexts_key = pytest.StashKey[dict[tuple[str, int | None], tuple[str, str, dict[str, Any]]]]()
commit_key = pytest.StashKey[str]()


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
    both("glm5-stall-timeout", "seconds without a token from any request that make a load run a hang "
         "(default 120)", type=float)
    g.addoption("--glm5-relaunch-after-crash", action="store_true",
                help="relaunch a crashed server once instead of failing the config's remaining tests")
    g.addoption("--update-baselines", nargs="?", const="new", default=None, choices=("new", "all"),
                help="record measured medians: new metrics and improvements; =all also lowers regressed bounds")
    both("glm5-baselines", "baselines directory (default baselines/ under the rootdir)")
    g.addoption("--glm5-hardware", default=None,
                help="hardware key of the baselines (needed with a remote --sglang-url), e.g. "
                     "8x-rtx-pro-6000-blackwell-sm120")
    g.addoption("--glm5-strict-baselines", action="store_true",
                help="fail metrics that have no baseline yet (for CI gates)")
    both("glm5-repeats", "repeat each scenario N times (default: the suite's per-scenario value)", type=int)


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
    for marker, cc in GATED_MARKERS.items():
        config.addinivalue_line(
            "markers", f"{marker}: needs compute capability {cc} GPUs (NVML); runs anyway with --glm5-sim or "
                       "--sglang-url")
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
    """Reap servers a killed earlier run left behind; `--glm5-stop-servers`: stop kept ones, then exit."""
    config = session.config
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        reaped = reap_leftovers(cache)
        tr = config.pluginmanager.get_plugin("terminalreporter")
        for line in reaped:
            if tr is not None:
                tr.write_line(f"glm5: {line}", yellow=True)
    if config.getoption("glm5_stop_servers"):
        if cache is None:
            pytest.exit("glm5: --glm5-stop-servers needs pytest's cache (drop -p no:cacheprovider)", returncode=4)
        lines = stop_recorded(cache, float(_opt(config, "glm5-stop-timeout", 60.0)))
        msg = "\n".join(lines) or "no kept servers recorded"
        pytest.exit(f"glm5: {msg}", returncode=0)


def _path_opt(config: pytest.Config, name: str, default: Path) -> Path:
    """A path option: as given (relative to where pytest was invoked), else default under the rootdir."""
    given = _opt(config, name)
    if given is None:
        return Path(config.rootpath) / default
    path = Path(given)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def _configs_path(config: pytest.Config) -> Path:
    return _path_opt(config, "glm5-configs", Path("suites") / "configs.toml")


def server_configs(config: pytest.Config) -> dict[str, ServerConfig]:
    """The run's configs file, loaded once (for suites that parametrise over every config)."""
    if configs_key not in config.stash:
        try:
            config.stash[configs_key] = load_configs(_configs_path(config))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[configs_key]


def _marker_name(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    if len(mark.args) != 1 or not isinstance(mark.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: use @pytest.mark.{MARKER}(\"NAME\") with one config name")
    return str(mark.args[0])


def _hits_known_issue(item: pytest.Item, cfg: ServerConfig) -> bool:
    if not cfg.known_issue:
        return False
    if cfg.known_issue_phase == "startup" or not cfg.known_issue_concurrency:
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    conc = params.get("concurrency")
    return isinstance(conc, int) and conc >= cfg.known_issue_concurrency


def _gate_hardware(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("glm5_sim") or config.getoption("sglang_url"):
        return
    for marker, cc in GATED_MARKERS.items():
        gated = [item for item in items if item.get_closest_marker(marker)]
        if not gated:
            continue
        gpus = _gpus(config)
        if gpus and any(g.compute_capability == cc for g in gpus):
            continue
        reason = (f"{marker}: needs compute capability {cc} GPUs; found {describe(gpus)}. Rehearse on the "
                  f"emulator with --glm5-sim, or use a running server with --sglang-url URL")
        for item in gated:
            item.add_marker(pytest.mark.skip(reason=reason))


def _gpus(config: pytest.Config) -> list[Gpu] | None:
    if gpus_key not in config.stash:
        config.stash[gpus_key] = inventory()
    return config.stash[gpus_key]


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: configs of deselected tests need not exist
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Gate on hardware, check config names, mark known issues strict-xfail, group each config's tests."""
    _gate_hardware(config, items)
    named = [(item, _marker_name(item)) for item in items]
    if not any(name for _, name in named):
        return
    path = _configs_path(config)
    configs = server_configs(config)
    for item, name in named:
        if name is not None and name not in configs:
            raise pytest.UsageError(f"{item.nodeid}: unknown server config {name!r}; known configs in {path}: "
                                    f"{', '.join(configs)}")
        if name is not None and _hits_known_issue(item, configs[name]):
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
        if cfg.engine == "llamacpp":
            return LlamaCppEngine()
        if cfg.engine == "transformers":
            return TransformersEngine()
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
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    if keep and cache is None:
        raise pytest.UsageError("--glm5-keep-servers records servers in pytest's cache: drop -p no:cacheprovider")
    if log_dir is None and keep and cache is not None:
        # Kept servers outlive this run's basetemp, which the next run deletes: log where the cache lives.
        log_dir = cache.mkdir("glm5-logs")
    settings = PoolSettings(
        model=model,
        log_dir=Path(log_dir) if log_dir else tmp_path_factory.getbasetemp() / "glm5-logs",
        startup_timeout=float(_opt(config, "glm5-startup-timeout", 3600.0)),
        stop_timeout=float(_opt(config, "glm5-stop-timeout", 60.0)),
        keep=keep,
        external_url=config.getoption("sglang_url"),
        strict=bool(config.getoption("glm5_strict")),
        relaunch_after_crash=bool(config.getoption("glm5_relaunch_after_crash")),
        stall_timeout=float(_opt(config, "glm5-stall-timeout", 120.0)),
    )
    pool = ServerPool(settings, _engine_factory(config), cache=cache, progress=progress)
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
def bench(sglang_server: ServerHandle, glm5_pool: ServerPool) -> Callable[..., BenchResult]:
    """`bench(concurrency=1, num_prompts=None, input_len=128, output_len=128, ...)` against this test's server."""

    def run(concurrency: int = 1, num_prompts: int | None = None, **kw: Any) -> BenchResult:
        return _bench(sglang_server, glm5_pool, concurrency, num_prompts, **kw)

    return run


def _workload(server: ServerHandle, pool: ServerPool, concurrency: int, num_prompts: int, **kw: Any) -> Workload:
    """A Workload with the run's defaults: the config's (else the engine's) protocol, the stall timeout."""
    kw.setdefault("protocol", server.config.protocol or server.engine.protocol)
    kw.setdefault("stall_timeout_s", pool.settings.stall_timeout)
    return Workload(concurrency=concurrency, num_prompts=num_prompts, **kw)


def _bench(server: ServerHandle, pool: ServerPool, concurrency: int, num_prompts: int | None,
           **kw: Any) -> BenchResult:
    kw.setdefault("warmup", concurrency)
    m = measure(server, _workload(server, pool, concurrency, num_prompts or max(8, 4 * concurrency), **kw))
    if m.problem is not None:
        pool.after_failed_run(m.result)
        pytest.fail(m.problem, pytrace=False)
    assert m.result is not None
    return m.result


class Perf:
    """The `perf` fixture: run scenarios against this test's server and hold them against baselines."""

    def __init__(self, request: pytest.FixtureRequest, server: ServerHandle, pool: ServerPool, gate: PerfGate) -> None:
        self.request = request
        self.server = server
        self.pool = pool
        self.gate = gate
        self.config = server.config.name

    def run(self, scenario: str, concurrency: int, num_prompts: int | None = None, repeats: int | None = None,
            **kw: Any) -> list[BenchResult]:
        """Measure a scenario `repeats` times (--glm5-repeats overrides the suite's value)."""
        n = _opt(self.request.config, "glm5-repeats") or repeats or 1
        return [_bench(self.server, self.pool, concurrency, num_prompts, **kw) for _ in range(int(n))]

    def stability(self, concurrency: int, num_prompts: int, error_budget: int = 0, **kw: Any) -> None:
        """Sustained load; fail with every problem found (death, errors, not ready after, fatal log lines,
        wrong output lengths)."""
        kw.setdefault("warmup", 0)
        report = check_stability(self.server, _workload(self.server, self.pool, concurrency, num_prompts, **kw),
                                 error_budget)
        if not report.ok:
            self.pool.after_failed_run(report.result)
            pytest.fail(f"{self.config} is not stable under load at concurrency {concurrency}:\n"
                        + "\n".join(report.problems), pytrace=False)

    def results_of(self, scenario: str) -> list[BenchResult]:
        """Results of a scenario checked earlier in this run for this config (empty if none)."""
        return list(self.gate.results.get((self.config, scenario), []))

    def _context(self) -> tuple[str, str, dict[str, Any]]:
        # Once per server (and the commit once per run): a check needs no HTTP call or git subprocess.
        config = self.request.config
        contexts = config.stash.setdefault(contexts_key, {})
        key = (self.server.url, self.server.pid)
        if key not in contexts:
            info = self.server.server_info()
            hw = _or_fail(lambda: hardware_for(info, config.getoption("glm5_hardware"), _nvml_key(config)))
            if commit_key not in config.stash:
                config.stash[commit_key] = git_commit(Path(config.rootpath))
            gpus = _gpus(config) if not info.get("sim") else None
            version = self.server.record.engine_version or info.get("version", "?")
            contexts[key] = (hw, self.pool.model_for(self.server.config), {
                "commit": config.stash[commit_key],
                "engine": f"{self.server.engine.name} {version}",
                "server_args": args_hash(info),
                "driver": gpus[0].driver if gpus else "",
                "hardware": hw,
            })
        return contexts[key]

    def check(self, results: BenchResult | list[BenchResult], scenario: str,
              metrics: list[str] | None = None) -> None:
        """Hold each metric's median against its floor or ceiling; fail with one line per regression."""
        rs = results if isinstance(results, list) else [results]
        hw, model, prov = self._context()
        checked = _or_fail(lambda: self.gate.check(self.config, scenario, rs, metrics, hw, model, prov))
        if checked.failures:
            pytest.fail("\n".join(checked.failures), pytrace=False)

    def check_value(self, scenario: str, metric: str, samples: list[float]) -> None:
        """Hold a derived metric (e.g. scaling_2x) against its bound."""
        hw, model, prov = self._context()
        checked = _or_fail(lambda: self.gate.check_values(self.config, scenario, metric, samples, hw, model, prov))
        if checked.failures:
            pytest.fail("\n".join(checked.failures), pytrace=False)


def _or_fail(call: Callable[[], T]) -> T:
    """call(), or fail the test with the GateError's message alone (no traceback, no exception chain)."""
    problem = None
    try:
        return call()
    except GateError as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)


def _nvml_key(config: pytest.Config) -> str | None:
    gpus = _gpus(config)
    return hardware_key(gpus) if gpus else None


@pytest.fixture(scope="session")
def glm5_gate(request: pytest.FixtureRequest) -> PerfGate:
    """The run's perf gate: verdicts and baselines stores."""
    gate = PerfGate(_path_opt(request.config, "glm5-baselines", Path("baselines")),
                    strict=bool(request.config.getoption("glm5_strict_baselines")))
    request.config.stash[gate_key] = gate
    return gate


@pytest.fixture
def perf(request: pytest.FixtureRequest, sglang_server: ServerHandle, glm5_pool: ServerPool,
         glm5_gate: PerfGate) -> Perf:
    """`perf.run(scenario, concurrency, ...)` then `perf.check(results, scenario, metrics)`."""
    return Perf(request, sglang_server, glm5_pool, glm5_gate)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop servers (also after Ctrl-C) and write the JSON report."""
    config = session.config
    pool = config.stash.get(pool_key, None)
    if pool is not None:
        pool.close()
    gate = config.stash.get(gate_key, None)
    mode = config.getoption("update_baselines")
    changes: tuple[list[Change], list[str]] = ([], [])
    if gate is not None and mode:
        changes = gate.update(mode)
        if changes[1] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked to record, could not: not a green run
    config.stash[changes_key] = changes
    path = config.getoption("glm5_report")
    if path:
        doc = json_report(pool.report() if pool else {}, gate.verdicts if gate else [], changes[0],
                          gate.results if gate else None)
        Path(path).write_text(json.dumps(doc, indent=2, default=str))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What the pool did: launches, reuses and why, failures."""
    pool = config.stash.get(pool_key, None)
    if pool is not None and pool.events:
        terminalreporter.section("glm5 servers")
        for ev in pool.events:
            terminalreporter.write_line(f"{ev.config}: {ev.message}")
    gate = config.stash.get(gate_key, None)
    changes, errors = config.stash.get(changes_key, ([], []))
    problems = dict(pool.failures) if pool is not None else {}
    if gate is None or not (gate.verdicts or problems or errors):
        return
    terminalreporter.section("glm5 performance")
    for line in verdict_table(gate.verdicts):
        terminalreporter.write_line(line)
    for line in summary_lines(gate.verdicts, changes, config.getoption("update_baselines"), problems, errors):
        terminalreporter.write_line(line, red=line.startswith(("regressions", "cannot")))
    for (cfg_name, scenario), rs in gate.results.items():
        if rs and not rs[0].shape.exact_lengths:
            terminalreporter.write_line(f"{cfg_name} {scenario}: lengths approximate: {rs[0].shape.describe()}")
    tel = telemetry_lines(gate.results)
    if tel:
        terminalreporter.write_line("GPU telemetry during the runs (NVML):")
        for line in tel:
            terminalreporter.write_line(f"  {line}")
    elif gate.results:
        terminalreporter.write_line(f"GPU telemetry: none ({describe(_gpus(config))})")
    sys.stdout.flush()
