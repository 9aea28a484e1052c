"""pytest hooks and fixture declarations only: it wires pytest to the modules that compute."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import pytest

from . import hookspecs, proxies
from .configs import ConfigError, ServerConfig, load_configs
from .grouping import scope_of
from .judge.baselines import Change, Verdict
from .judge.gate import GateError, PerfGate, Statistics, check_stores, versus_all
from .judge.merge import Merged, decide_family, join, merged_doc
from .judge.merge import update as update_baselines
from .judge.provenance import expected_hardware, git_commit
from .loadgen import BenchResult
from .perf import Perf, PerfRun
from .perf import bench as run_bench
from .report import exports, gateitems
from .report.junit import properties, suite_level
from .report.outputs import Outputs, write_all
from .report.terminal import (
    TerminalProgress,
    WorkerLines,
    campaign_lines,
    json_report,
    outcome_line,
    summary_lines,
    target_lines,
    telemetry_lines,
    verdict_table,
    wrapped,
)
from .servers.builds import Build, identity, load_builds, pick
from .servers.engines import Engine, LlamaCppEngine, SGLangEngine, SimEngine, TransformersEngine
from .servers.engines.base import gpus_for
from .servers.forensics import known_issue_mismatch, tail
from .servers.leases import Device, LeaseBook, LeaseError, book_for, default_lease_dir, emulated, visible
from .servers.pool import ConfigMismatch, PoolSettings, ServerPool
from .servers.process import ServerError, ServerHandle
from .servers.records import KEPT, RecordStore, reap_leftovers, stop_recorded
from .settings import (
    DEFAULT_BASELINES,
    DEFAULT_CONFIGS,
    SETTINGS,
    SIM_DEFAULT_MODEL,
    Settings,
    SettingsError,
    Sources,
    check_creatable_dir,
    check_writable_dir,
    check_writable_file,
    resolve_path,
)
from .sharding import assign
from .telemetry import Gpu, describe, gpu_processes, hardware_key, inventory

MARKER = "server_config"
LOG_SECTION_LINES = 30
settings_key = pytest.StashKey[Settings]()
suite_key = pytest.StashKey[dict[str, Any]]()
configs_key = pytest.StashKey[dict[str, ServerConfig]]()
builds_key = pytest.StashKey[dict[str, Build]]()
pool_key = pytest.StashKey[ServerPool]()
gate_key = pytest.StashKey[PerfGate]()
run_key = pytest.StashKey[PerfRun]()
changes_key = pytest.StashKey[tuple[list[Change], list[str]]]()
regressed_key = pytest.StashKey[list[Verdict]]()
gpus_key = pytest.StashKey[list[Gpu] | None]()
leases_key = pytest.StashKey[LeaseBook | None]()
output_errors_key = pytest.StashKey[list[str]]()
outputs_key = pytest.StashKey[Outputs]()
written_key = pytest.StashKey[Any]()
started_key = pytest.StashKey[dt.datetime]()
benchmark_json_key = pytest.StashKey[bool]()
worker_docs_key = pytest.StashKey[list[str]]()
durations_key = pytest.StashKey[dict[str, float]]()
view_key = pytest.StashKey[Merged]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The suite's hook: `pytest_glm5_suite` in the root conftest.py."""
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every setting of settings.py, each with an ini twin where a project would set it once."""
    g = parser.getgroup("glm5", "pytest-glm5: LLM serving performance gate")
    for s in SETTINGS:
        if s.flag:
            g.addoption(f"--{s.name}", action="store_true", help=s.help)
        else:
            g.addoption(f"--{s.name}", default=None, help=s.help, **s.argparse)
        if s.ini:
            parser.addini(s.dest, help=s.help)


def _settings(config: pytest.Config) -> Settings:
    return config.stash[settings_key]


def pytest_configure(config: pytest.Config) -> None:
    """Resolve and check every setting (a bad one is a usage error naming its source), register the markers,
    and make SIGTERM end the session like Ctrl-C (so servers are stopped)."""
    suite = config.hook.pytest_glm5_suite(config=config) or {}
    config.stash[suite_key] = suite
    ini_file = str(config.inipath) if config.inipath else "the ini file"
    try:
        settings = Settings(Sources(option=lambda dest: config.getoption(dest),
                                    ini=lambda dest: config.getini(dest), ini_file=ini_file,
                                    suite=dict(suite.get("defaults", {}))))
        log_dir = settings["glm5-log-dir"]
        if log_dir is not None:
            check_writable_dir(Path(log_dir), f"server log directory ({settings.source('glm5-log-dir')})")
        if settings["glm5-lease-dir"] is not None:
            check_creatable_dir(Path(settings["glm5-lease-dir"]),
                                f"GPU lease directory ({settings.source('glm5-lease-dir')})")
        config.stash[outputs_key] = _outputs(settings)
    except SettingsError as exc:
        raise pytest.UsageError(f"glm5: {exc}") from None
    config.stash[settings_key] = settings
    config.stash[started_key] = dt.datetime.now(dt.UTC)
    _check_rootdir(config)
    _xdist_grouping(config)
    config.stash[output_errors_key] = []
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name): run this test against a live server of the named config from the configs file "
        "(launched once per session, or reused when its fingerprint matches).")
    for marker, cc in _gated(config).items():
        config.addinivalue_line(
            "markers", f"{marker}: needs compute capability {cc} GPUs (NVML); runs anyway with --glm5-sim or "
                       "--sglang-url")
    if hasattr(signal, "SIGTERM") and threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt("SIGTERM")

        def restore() -> None:
            signal.signal(signal.SIGTERM, previous)

        signal.signal(signal.SIGTERM, on_term)
        config.add_cleanup(restore)


PATH_OPTIONS = ("--glm5-history", "--glm5-html", "--glm5-markdown", "--glm5-report", "--glm5-export",
                "--glm5-configs", "--glm5-baselines", "--glm5-log-dir")


def _check_rootdir(config: pytest.Config) -> None:
    """pytest picks its rootdir before it knows a plugin's options, so the value of `--glm5-history /tmp/h` (an
    existing path, written as a separate word) counts as a test path: the rootdir, and with it the configs and
    baselines, move to /tmp. Say so, with the fix, rather than run against the wrong files."""
    args = list(config.invocation_params.args)
    here = Path(config.invocation_params.dir).resolve()
    root = Path(config.rootpath).resolve()
    if config.getoption("inifilename", None):
        return  # -c names the ini file, which fixes the rootdir
    for opt, value in itertools.pairwise(args):
        path = (here / value).resolve()
        # An existing path outside the invocation directory: pytest looked for the ini file from there, not here.
        if opt in PATH_OPTIONS and path.exists() and here != path and here not in path.parents:
            raise pytest.UsageError(
                f"glm5: pytest took the value of {opt} {value} for a test path and chose rootdir {root} (it picks "
                f"the rootdir before plugins' options are known), so its ini file and configs were not found; write "
                f"{opt}={value} (with '=')")


GROUPED = ("loadgroup", "no")


def _xdist_grouping(config: pytest.Config) -> None:
    """With `-n N`, a config's tests must run on one worker, or each worker launches its own server of it (all
    wanting the same GPUs). `-n` alone gets `--dist loadgroup`, which the plugin's scheduler (see
    pytest_xdist_make_scheduler) reads as one work unit per config; another --dist given for a suite with glm5
    configs is a usage error."""
    dist = getattr(config.option, "dist", "no")
    if _xdist_worker(config) or not getattr(config.option, "numprocesses", None) or dist in GROUPED:
        return
    words = [*config.invocation_params.args, *config.getini("addopts")]
    explicit = any(w in ("--dist", "-d", "--distload") or w.startswith("--dist=") for w in words)
    if not explicit:
        config.option.dist = "loadgroup"
    elif _configs_path(config).exists():
        raise pytest.UsageError(
            f"glm5: --dist {dist} would spread a server config's tests over workers, and each worker would launch "
            "its own server of it; use --dist loadgroup (what -n gets by default here): each config runs on one "
            "worker, launched once")


def _outputs(settings: Settings) -> Outputs:
    """The run's output paths, each checked now (not after an hour of load)."""
    out = Outputs()
    for name, attr in (("glm5-report", "report"), ("glm5-html", "html"), ("glm5-markdown", "markdown")):
        if settings[name] is not None:
            path = Path(settings[name])
            check_writable_file(path, f"--{name}")
            setattr(out, attr, path)
    for fmt, given in settings["glm5-export"] or ():
        check_writable_file(Path(given), f"--glm5-export {fmt}:")
        out.exports.append((fmt, Path(given)))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        check_writable_file(Path(summary), "$GITHUB_STEP_SUMMARY")
        out.step_summary = Path(summary)
    if settings["glm5-history"] is not None:
        out.history = Path(settings["glm5-history"])
        check_creatable_dir(out.history, f"history directory ({settings.source('glm5-history')})")
    return out


def _gated(config: pytest.Config) -> dict[str, str]:
    return dict(config.stash.get(suite_key, {}).get("gated_markers", {}))


def _configs_path(config: pytest.Config) -> Path:
    return resolve_path(_settings(config)["glm5-configs"], DEFAULT_CONFIGS, config.rootpath,
                        config.invocation_params.dir)


def _baselines_root(config: pytest.Config) -> Path:
    return resolve_path(_settings(config)["glm5-baselines"], DEFAULT_BASELINES, config.rootpath,
                        config.invocation_params.dir)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where this run's configs, baselines and hardware key come from, and the emulator's scale."""
    s = _settings(config)
    lines = [f"glm5: configs {_configs_path(config)}; baselines {_baselines_root(config)}"]
    if s["glm5-sim"]:
        lines.append(f"glm5: emulator (--glm5-sim), time scale {s['glm5-sim-time-scale']:g} "
                     f"({s.source('glm5-sim-time-scale')}); hardware key sim-<profile>-x"
                     f"{s['glm5-sim-time-scale']:g}")
    elif s["glm5-hardware"]:
        lines.append(f"glm5: hardware key {s['glm5-hardware']} (--glm5-hardware)")
    elif s["sglang-url"]:
        lines.append(f"glm5: external server {s['sglang-url']} (--sglang-url); hardware key from --glm5-hardware or "
                     "NVML")
    if s["sglang-url"]:
        via = proxies.proxy_for(s["sglang-url"])
        lines.append(f"glm5: requests to {s['sglang-url']} go through the proxy {via} (the environment's proxy "
                     "settings; add the host to no_proxy to go direct)" if via else
                     f"glm5: requests to {s['sglang-url']} go direct (no proxy applies)")
    else:
        lines.append("glm5: hardware key from NVML when a server is measured")
    return lines


def _store(config: pytest.Config) -> RecordStore | None:
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    return RecordStore(cache.mkdir("glm5")) if cache is not None else None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Reap servers a killed earlier run left behind; `--glm5-stop-servers`: stop kept ones, then exit."""
    config = session.config
    store = _store(config)
    if store is not None:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        for line in reap_leftovers(store):
            if tr is not None:
                tr.write_line(f"glm5: {line}", yellow=True)
    if _settings(config)["glm5-stop-servers"]:
        if store is None:
            pytest.exit("glm5: --glm5-stop-servers needs pytest's cache (drop -p no:cacheprovider)", returncode=4)
        lines = stop_recorded(store, float(_settings(config)["glm5-stop-timeout"]))
        pytest.exit("glm5: " + ("\n".join(lines) or "no kept servers recorded"), returncode=0)


def server_configs(config: pytest.Config) -> dict[str, ServerConfig]:
    """The run's configs file, loaded once."""
    if configs_key not in config.stash:
        try:
            config.stash[configs_key] = load_configs(_configs_path(config))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[configs_key]


def server_builds(config: pytest.Config) -> dict[str, Build]:
    """The configs file's builds (plus `default`, this Python); --glm5-build and --glm5-ab must name them."""
    if builds_key not in config.stash:
        path = _configs_path(config)
        s = _settings(config)
        try:
            builds = load_builds(path)
            if s["glm5-build"]:
                pick(builds, s["glm5-build"], "--glm5-build", path)
            for name in s["glm5-ab"] or ():
                pick(builds, name, "--glm5-ab", path)
        except ConfigError as exc:
            raise pytest.UsageError(f"glm5: {exc}") from None
        config.stash[builds_key] = builds
    return config.stash[builds_key]


def _build_name(config: pytest.Config) -> str:
    s = _settings(config)
    return str(s["glm5-ab"][0] if s["glm5-ab"] else s["glm5-build"] or "default")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that asks for `glm5_config` runs once per config of the configs file, each carrying its
    server_config marker; one that also takes `concurrency` gets each config's own sweep points (config key
    `sweep`, else the module's SWEEP)."""
    if "glm5_config" not in metafunc.fixturenames:
        return
    configs = server_configs(metafunc.config)
    own = {n for m in metafunc.definition.iter_markers("parametrize") for n in _argnames(m.args[0])}
    if "concurrency" in metafunc.fixturenames and "concurrency" not in own:
        default = list(getattr(metafunc.module, "SWEEP", []))
        metafunc.parametrize(("glm5_config", "concurrency"), [
            pytest.param(n, c, id=f"{n}-c{c}", marks=pytest.mark.server_config(n))
            for n, cfg in configs.items() for c in (cfg.sweep or default)])
    else:
        metafunc.parametrize(
            "glm5_config", [pytest.param(n, id=n, marks=pytest.mark.server_config(n)) for n in configs])


def _argnames(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)


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


def _gpus(config: pytest.Config) -> list[Gpu] | None:
    if gpus_key not in config.stash:
        config.stash[gpus_key] = inventory()
    return config.stash[gpus_key]


def _visible_gpus(config: pytest.Config) -> list[Gpu] | None:
    """NVML's GPUs as this run may use them: an outer CUDA_VISIBLE_DEVICES narrows them (a box whose run sees 1 of
    its 8 GPUs is a 1-GPU machine for the baselines and the gate)."""
    gpus = _gpus(config)
    if not gpus:
        return gpus
    try:
        keep = visible([Device(g.index, g.uuid) for g in gpus], os.environ.get("CUDA_VISIBLE_DEVICES"), "NVML GPUs")
    except LeaseError as exc:
        raise pytest.UsageError(f"glm5: {exc}") from None
    by_index = {g.index: g for g in gpus}
    return [by_index[d.index] for d in keep]


def _nvml_key(config: pytest.Config) -> str | None:
    gpus = _visible_gpus(config)
    return hardware_key(gpus) if gpus else None


def _gate_hardware(config: pytest.Config, items: list[pytest.Item]) -> None:
    s = _settings(config)
    if s["glm5-sim"] or s["sglang-url"]:
        return
    configs = server_configs(config) if _configs_path(config).exists() else {}
    engine_for = _engine_factory(config)
    for marker, cc in _gated(config).items():
        gated = [item for item in items if item.get_closest_marker(marker)]
        if not gated:
            continue
        gpus = _visible_gpus(config)
        have = [g for g in gpus or [] if g.compute_capability == cc]
        where = f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})" \
            if "CUDA_VISIBLE_DEVICES" in os.environ else ""
        for item in gated:
            cfg = configs.get(_marker_name(item) or "")
            need, why = gpus_for(engine_for(cfg), cfg, len(gpus or [])) if cfg is not None else (1, "")
            if have and len(have) >= need:
                continue
            if not have:
                reason = (f"{marker}: needs compute capability {cc} GPUs; found {describe(gpus)}{where}. Rehearse "
                          "on the emulator with --glm5-sim, or use a running server with --sglang-url URL")
            else:
                reason = (f"{marker}: config {cfg.name if cfg else '?'} needs {need} GPUs of compute capability {cc} "
                          f"({why}); this run sees {len(have)}{where}")
            item.add_marker(pytest.mark.skip(reason=reason))


def _hardware_known(config: pytest.Config, cfg: ServerConfig) -> str | None:
    s = _settings(config)
    sim = bool(s["glm5-sim"] or cfg.engine == "sim")
    try:
        return expected_hardware(sim, s["glm5-sim-profile"] or cfg.sim_profile, float(s["glm5-sim-time-scale"]),
                                 s["glm5-hardware"], bool(s["sglang-url"]), lambda: _nvml_key(config))
    except ValueError as exc:
        raise pytest.UsageError(f"glm5: config {cfg.name}: {exc}") from None


def _lease_book(config: pytest.Config, used: list[ServerConfig]) -> LeaseBook | None:
    """The GPUs this run's servers are leased from: the emulator profile's under --glm5-sim, else NVML's."""
    s = _settings(config)
    if s["sglang-url"] or not used:
        return None
    if s["glm5-sim"]:
        from .sim.profile import ProfileError, load_profile  # the emulated machine is the profile's

        name = s["glm5-sim-profile"] or next((c.sim_profile for c in used if c.sim_profile), None) or "glm5-sm120"
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            raise pytest.UsageError(f"glm5: {exc}") from None
        count = int(profile.get("gpu", {}).get("count", 1))
        devices = emulated(str(profile["name"]), count)
        what = f"{count} emulated GPUs (profile {profile['name']})"
        cache = getattr(config, "cache", None)
        directory = cache.mkdir("glm5") if cache is not None else default_lease_dir() / "sim"
    else:
        gpus = _gpus(config) or []
        devices = [Device(g.index, g.uuid) for g in gpus]
        what = f"{len(gpus)} GPUs (NVML)"
        directory = Path(s["glm5-lease-dir"]) if s["glm5-lease-dir"] else default_lease_dir()
    try:
        return book_for(devices, what, os.environ.get("CUDA_VISIBLE_DEVICES"), directory,
                        exclusive=bool(s["glm5-exclusive"] or s["update-baselines"]),
                        probe=None if s["glm5-sim"] else gpu_processes)
    except LeaseError as exc:
        raise pytest.UsageError(f"glm5: {exc}") from None
    except OSError as exc:
        raise pytest.UsageError(f"glm5: cannot keep GPU leases in {directory}: {exc.strerror or exc}; set "
                                "--glm5-lease-dir or env GLM5_LEASE_DIR to a writable directory") from None


def _check_baselines(config: pytest.Config, used: dict[str, ServerConfig]) -> None:
    """Read every baselines file the run will use now, not after a model load and a load run."""
    s = _settings(config)
    model_default = s["glm5-model-path"] or (SIM_DEFAULT_MODEL if s["glm5-sim"] else None)
    wanted = {name: (hw, model) for name, cfg in used.items()
              if (model := cfg.model or model_default) is not None and (hw := _hardware_known(config, cfg)) is not None}
    try:
        files = check_stores(_baselines_root(config), wanted)
    except GateError as exc:
        raise pytest.UsageError(f"glm5: {exc}") from None
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        for line in files:
            reporter.write_line(f"glm5: {line}")


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: configs of deselected tests need not exist
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Gate on hardware, check config names and baselines, mark known issues strict-xfail, group each config's
    tests."""
    _gate_hardware(config, items)
    named = [(item, _marker_name(item)) for item in items]
    if not any(name for _, name in named):
        return
    path = _configs_path(config)
    configs = server_configs(config)
    server_builds(config)
    for item, name in named:
        if name is not None and name not in configs:
            raise pytest.UsageError(f"{item.nodeid}: unknown server config {name!r}; known configs in {path}: "
                                    f"{', '.join(configs)}")
        if name is not None and _hits_known_issue(item, configs[name]):
            item.add_marker(pytest.mark.xfail(reason=f"known issue of {name}: {configs[name].known_issue}",
                                              strict=True, raises=None))
    runnable = {name for item, name in named
                if name is not None and not any(m.name == "skip" for m in item.iter_markers())}
    _check_baselines(config, {n: configs[n] for n in runnable})
    config.stash[leases_key] = _lease_book(config, [configs[n] for n in sorted(runnable)])
    _as_benchmarks(config, [item for item, name in named if name is not None])
    shard = _settings(config)["glm5-shard"]
    if shard is not None:
        named = _take_shard(config, named, shard)
    plain = [item for item, name in named if name is None]
    groups: dict[str, list[pytest.Item]] = {}
    for item, name in named:
        if name is not None:
            groups.setdefault(name, []).append(item)
    store = _store(config) if _settings(config)["glm5-keep-servers"] else None
    if store is not None:
        # The server kept by the last run is the only one alive: its config goes first, so it is reused before
        # another launch would have to stop it.
        kept = {str(d.get("config")) for d in store.read()[KEPT].values()}
        groups = dict(sorted(groups.items(), key=lambda kv: kv[0] not in kept))
    items[:] = plain + [item for group in groups.values() for item in group]


DURATIONS_KEY = "glm5/config-durations"


def _take_shard(config: pytest.Config, named: list[tuple[pytest.Item, str | None]], shard: tuple[int, int]
                ) -> list[tuple[pytest.Item, str | None]]:
    """Keep this shard's configs (tests without a config run in shard 1); deselect the rest, saying which."""
    index, count = shard
    cache = getattr(config, "cache", None)
    durations = (cache.get(DURATIONS_KEY, {}) if cache is not None else {}) or {}
    names = sorted({name for _, name in named if name is not None})
    where = assign(names, durations, count)
    mine_or_plain = [(where[name] if name is not None else 1) == index for _, name in named]
    keep = [pair for pair, ok in zip(named, mine_or_plain, strict=True) if ok]
    dropped = [item for (item, _), ok in zip(named, mine_or_plain, strict=True) if not ok]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        mine = [n for n in names if where[n] == index]
        how = "balanced by the last run's durations" if any(n in durations for n in names) else \
            "no durations cached yet: balanced by count"
        tr.write_line(f"glm5: shard {index}/{count}: {len(mine)} of {len(names)} configs ({', '.join(mine) or 'none'}; "
                      f"{how})")
    return keep


BENCHMARK_ONLY_SKIP = "Skipping non-benchmark (--benchmark-only active)."


def _as_benchmarks(config: pytest.Config, perf_items: list[pytest.Item]) -> None:
    """With pytest-benchmark, a serving perf test is a benchmark: `--benchmark-only` runs it (pytest-benchmark
    would skip it silently, as it uses no `benchmark` fixture) and `--benchmark-skip` skips it, saying why."""
    if not config.pluginmanager.hasplugin("benchmark") or not perf_items:
        return
    if config.getoption("benchmark_only", False):
        for item in perf_items:
            item.own_markers[:] = [m for m in item.own_markers
                                   if not (m.name == "skip" and m.kwargs.get("reason") == BENCHMARK_ONLY_SKIP)]
    elif config.getoption("benchmark_skip", False):
        for item in perf_items:
            item.add_marker(pytest.mark.skip(reason="glm5 perf test: a benchmark (--benchmark-skip active)"))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """pytest-benchmark's --benchmark-json / --benchmark-save of a run with benchmarks of its own: ours join them."""
    gate = config.stash.get(gate_key, None)
    if gate is not None and gate.verdicts:
        doc = _run_doc(config, config.stash.get(pool_key, None), gate, [])
        output_json.setdefault("benchmarks", []).extend(exports.pytest_benchmark(doc)["benchmarks"])
        config.stash[benchmark_json_key] = True


def _benchmark_json(config: pytest.Config, doc: dict[str, Any]) -> str | None:
    """Where pytest-benchmark had nothing of its own to save, --benchmark-json still gets our results."""
    path = config.getoption("benchmark_json", None) if config.pluginmanager.hasplugin("benchmark") else None
    if path is None or config.stash.get(benchmark_json_key, False) or not doc["verdicts"]:
        return None
    name = getattr(path, "name", str(path))
    exports.write_json(Path(name), exports.pytest_benchmark(doc))
    return f"--benchmark-json: {name} (pytest-benchmark's format; the glm5 results, as pytest-benchmark had none)"


def _statistics(s: Settings) -> Statistics:
    return Statistics(alpha=float(s["glm5-alpha"]), effect=float(s["glm5-effect"]), max_repeats=s["glm5-max-repeats"],
                      ab=s["glm5-ab"])


def _engine_factory(config: pytest.Config) -> Callable[[ServerConfig], Engine]:
    s = _settings(config)

    def engine_for(cfg: ServerConfig) -> Engine:
        if s["glm5-sim"] or cfg.engine == "sim":
            return SimEngine(profile=s["glm5-sim-profile"], time_scale=float(s["glm5-sim-time-scale"]),
                             slowdown=float(s["glm5-sim-slowdown"]), startup_s=s["glm5-sim-startup-s"],
                             noise=s["glm5-sim-noise"])
        if cfg.engine == "sglang":
            return SGLangEngine()
        if cfg.engine == "llamacpp":
            return LlamaCppEngine()
        if cfg.engine == "transformers":
            return TransformersEngine()
        raise ServerError(f"config {cfg.name}: engine {cfg.engine!r} is not available in this version")

    return engine_for


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def glm5_pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """The session's server pool (one live server at a time)."""
    config = request.config
    s = _settings(config)
    model = s["glm5-model-path"] or (SIM_DEFAULT_MODEL if s["glm5-sim"] else None)
    keep = bool(s["glm5-keep-servers"])
    store = _store(config)
    if keep and store is None:
        raise pytest.UsageError("--glm5-keep-servers records servers in pytest's cache: drop -p no:cacheprovider")
    log_dir = s["glm5-log-dir"]
    if log_dir is None and keep:
        # Kept servers outlive this run's basetemp, which the next run deletes: log where the cache lives.
        log_dir = config.cache.mkdir("glm5-logs")
    settings = PoolSettings(
        model=model,
        log_dir=Path(log_dir) if log_dir else tmp_path_factory.getbasetemp() / "glm5-logs",
        startup_timeout=float(s["glm5-startup-timeout"]),
        stop_timeout=float(s["glm5-stop-timeout"]),
        keep=keep,
        external_url=s["sglang-url"],
        strict=bool(s["glm5-strict"]),
        relaunch_after_crash=bool(s["glm5-relaunch-after-crash"]),
        stall_timeout=float(s["glm5-stall-timeout"]),
    )
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if _xdist_worker(config):
        tr = WorkerLines(str(getattr(config, "workerinput", {}).get("workerid", "worker")),
                         config.pluginmanager.get_plugin("capturemanager"))
    progress = TerminalProgress(tr, quiet=config.get_verbosity() < 0)
    pool = ServerPool(settings, _engine_factory(config), store=store, progress=progress,
                      identify=lambda build: identity(build, Path(config.rootpath)),
                      leases=config.stash.get(leases_key, None))
    config.stash[pool_key] = pool
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def glm5_gate(request: pytest.FixtureRequest) -> PerfGate:
    """The run's perf gate: verdicts and baselines stores."""
    config = request.config
    s = _settings(config)
    gate = PerfGate(_baselines_root(config), strict=bool(s["glm5-strict-baselines"]), statistics=_statistics(s),
                    configs=server_configs(config),
                    require=bool(s["glm5-require-baselines"]) and not s["update-baselines"])
    config.stash[gate_key] = gate
    return gate


@pytest.fixture(scope="session")
def glm5_run(request: pytest.FixtureRequest, glm5_pool: ServerPool, glm5_gate: PerfGate) -> PerfRun:
    """What every perf test of the run shares: pool, gate, hardware key, repeats."""
    config = request.config
    s = _settings(config)
    run = PerfRun(glm5_pool, glm5_gate, Path(config.rootpath), hardware=s["glm5-hardware"], repeats=s["glm5-repeats"],
                  gpus=lambda: _gpus(config), nvml_key=lambda: _nvml_key(config), builds=server_builds(config),
                  build=_build_name(config), launches=int(s["glm5-launches"]))
    config.stash[run_key] = run
    return run


@pytest.fixture
def sglang_server(request: pytest.FixtureRequest, glm5_pool: ServerPool) -> ServerHandle:
    """The live server of this test's `server_config` marker."""
    name = _marker_name(request.node)
    if name is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses sglang_server without @pytest.mark.{MARKER}(NAME)")
    cfg = server_configs(request.config)[name]
    problem: ServerError | None = None
    try:
        handle = glm5_pool.get(cfg, server_builds(request.config)[_build_name(request.config)])
    except ServerError as exc:
        problem = exc
    finally:
        if isinstance(glm5_pool.progress, TerminalProgress):
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
def bench(sglang_server: ServerHandle, glm5_run: PerfRun) -> Callable[..., BenchResult]:
    """`bench(concurrency=1, num_prompts=None, input_len=128, output_len=128, ...)` against this test's server."""

    def run(concurrency: int = 1, num_prompts: int | None = None, **kw: Any) -> BenchResult:
        return run_bench(sglang_server, glm5_run, _fail, concurrency, num_prompts, **kw)

    return run


@pytest.fixture
def perf(sglang_server: ServerHandle, glm5_run: PerfRun) -> Perf:
    """`perf.run(scenario, concurrency, ...)` then `perf.check(results, scenario, metrics)`."""
    return Perf(sglang_server, glm5_run, _fail)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Tag the verdicts this test made with its id, and give them to JUnit XML as properties (on the test case
    under xunit1, on the suite, prefixed with the test id, under xunit2, whose schema allows no other place)."""
    gate = item.config.stash.get(gate_key, None)
    before = len(gate.verdicts) if gate is not None else 0
    versus = len(gate.versus) if gate is not None else 0
    try:
        return (yield)
    finally:
        gate = item.config.stash.get(gate_key, None)
        mine = gate.verdicts[before:] if gate is not None else []
        for v in [*mine, *(gate.versus[versus:] if gate is not None else [])]:
            v.test = item.nodeid
        xml = item.config.stash.get(_xml_key(), None) if mine else None
        if mine and xml is not None:
            if suite_level(str(item.config.getini("junit_family"))):
                for name, value in properties(mine):
                    xml.add_global_property(f"{item.nodeid}::{name}", value)
            else:
                item.user_properties.extend(properties(mine))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """With GPU leases, a config's server is stopped (or kept idle) after its last test here: servers of other
    workers may be waiting for its GPUs."""
    pool = item.config.stash.get(pool_key, None)
    if pool is None or pool.leases is None or pool.current is None:
        return
    name = _marker_name(item)
    if name is not None and (nextitem is None or _marker_name(nextitem) != name):
        pool.release_current(next_config="" if nextitem is None else _marker_name(nextitem) or "")


def _xml_key() -> Any:
    from _pytest.junitxml import xml_key  # where pytest keeps its LogXML; record_testsuite_property uses it too

    return xml_key


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing test of a server config gets that server's log tail as a report section."""
    report = yield
    name = _marker_name(item)
    if name is not None:  # each config's time, its server's start included, for balancing shards next time
        spent = item.config.stash.setdefault(durations_key, {})
        spent[name] = spent.get(name, 0.0) + float(report.duration)
    cfg = server_configs(item.config).get(name) if name is not None else None
    if cfg is not None and cfg.known_issue_match and call.when in ("setup", "call") and hasattr(report, "wasxfail"):
        mismatch = known_issue_mismatch(cfg.known_issue_match, str(report.longrepr or ""))
        if mismatch is not None:
            # Any failure would satisfy a strict xfail; only the known one may.
            report.outcome = "failed"
            report.longrepr = mismatch
            del report.wasxfail
    if report.failed and call.when != "teardown":
        pool = item.config.stash.get(pool_key, None)
        rec = pool.records.get(name) if pool is not None and name is not None else None
        if rec is not None and rec.log_path:
            lines = tail(Path(rec.log_path), LOG_SECTION_LINES)
            report.sections.append((f"glm5 server log: {name} (last {len(lines)} lines of {rec.log_path})",
                                    "\n".join(lines)))
    return report


@pytest.hookimpl(tryfirst=True)  # the gate's failed items reach JUnit, the summary and --lf before they finish
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop servers (also after Ctrl-C); an xdist worker hands its run to the controller; otherwise the family
    decision, baseline updates and every output, once."""
    config = session.config
    pool = config.stash.get(pool_key, None)
    if pool is not None:
        pool.close()
    gate = config.stash.get(gate_key, None)
    s = config.stash.get(settings_key, None)
    if s is None:
        return
    if _xdist_worker(config):
        if pool is not None or gate is not None:
            doc = _run_doc(config, pool, gate, [])  # before the family decision: the controller makes it once
            doc["events"] = [(e.config, e.message) for e in pool.events] if pool is not None else []
            doc["durations"] = config.stash.get(durations_key, {})
            config.workeroutput["glm5"] = json.dumps(doc, default=str)  # type: ignore[attr-defined]
        return
    raw = config.stash.get(worker_docs_key, None)
    worker_docs = [json.loads(d) for d in raw] if raw is not None else None
    _save_durations(config, [d.get("durations") or {} for d in worker_docs or []])
    if worker_docs is not None:
        view = join(worker_docs)
        # compare_to needs both configs' verdicts, which may come from two workers: decided here, over all.
        view.versus = versus_all(view.verdicts, server_configs(config), _statistics(s))
        confirmed = decide_family(view, float(s["glm5-alpha"]))
    else:
        confirmed = gate.finish() if gate is not None else []
        view = Merged(verdicts=gate.verdicts if gate else [], versus=gate.versus if gate else [],
                      problems=dict(pool.failures) if pool else {},
                      events=[(e.config, e.message) for e in pool.events] if pool else [],
                      family_size=gate.family_size if gate else 0)
    config.stash[view_key] = view
    regressed = gateitems.regressions(view.verdicts, confirmed)
    config.stash[regressed_key] = regressed
    gateitems.emit(regressed, pytest.TestReport, lambda r: config.hook.pytest_runtest_logreport(report=r))
    lf = config.pluginmanager.get_plugin("lfplugin")
    if lf is not None:
        gateitems.mark_last_failed(lf.lastfailed, regressed, {v.test for v in view.verdicts if v.test})
    if regressed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the run's family decision: a confirmed regression
    mode = s["update-baselines"]
    changes: tuple[list[Change], list[str]] = ([], [])
    if mode and view.verdicts:
        changes = update_baselines(_baselines_root(config), view.verdicts, mode)
        if changes[1] and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked to record, could not: not a green run
    config.stash[changes_key] = changes
    out = config.stash.get(outputs_key, Outputs())
    bench_json = config.pluginmanager.hasplugin("benchmark") and config.getoption("benchmark_json", None)
    if (out.any or bench_json) and not config.option.collectonly:  # --collect-only measured nothing to report
        if worker_docs is not None:
            doc = merged_doc(view, changes[0], _run_meta(config, view.verdicts))
        else:
            doc = _run_doc(config, pool, gate, changes[0])
        written = write_all(doc, out)
        try:
            line = _benchmark_json(config, doc)
            if line:
                written.lines.append(line)
        except OSError as exc:
            written.errors.append(f"cannot write --benchmark-json: {exc.strerror or exc}")
        config.stash[written_key] = written
        config.stash[output_errors_key].extend(written.errors)
        if written.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked for an output, did not get it


def _save_durations(config: pytest.Config, more: list[dict[str, float]]) -> None:
    cache = getattr(config, "cache", None)
    spent: dict[str, float] = {}
    for d in [config.stash.get(durations_key, {}), *more]:
        for name, seconds in d.items():
            spent[name] = spent.get(name, 0.0) + float(seconds)
    # A shard does not rewrite the durations the split is balanced on: its sibling shards, started after it from
    # the same cache, must split the configs exactly as it did (else a config runs twice or never).
    if cache is None or not spent or config.option.collectonly or _settings(config)["glm5-shard"] is not None:
        return
    known = dict(cache.get(DURATIONS_KEY, {}) or {})
    cache.set(DURATIONS_KEY, {**known, **{k: round(v, 2) for k, v in spent.items()}})


def _xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist with loadgroup on a suite with glm5 configs: one work unit per config (see grouping.py)."""
    if config.getvalue("dist") != "loadgroup" or not _configs_path(config).exists():
        return None
    from xdist.scheduler import LoadScopeScheduling

    names = list(server_configs(config))

    class ByConfig(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, names)

    return ByConfig(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist: a worker finished; keep the run document it sent (the controller decides and reports once)."""
    doc = getattr(node, "workeroutput", {}).get("glm5")
    if doc is not None:
        node.config.stash.setdefault(worker_docs_key, []).append(doc)


def _run_meta(config: pytest.Config, verdicts: list[Any]) -> dict[str, Any]:
    started = config.stash[started_key]
    hardware = sorted({str(v.provenance.get("hardware")) for v in verdicts if v.provenance.get("hardware")})
    return {"time": started.isoformat(timespec="seconds"),
            "duration_s": (dt.datetime.now(dt.UTC) - started).total_seconds(),
            "commit": git_commit(Path(config.rootpath)), "build": _build_name(config), "hardware": ", ".join(hardware),
            "args": list(config.invocation_params.args)}


def _run_doc(config: pytest.Config, pool: ServerPool | None, gate: PerfGate | None,
             changes: list[Change]) -> dict[str, Any]:
    servers = pool.report() if pool is not None else {}
    for rec in servers.values():
        if rec.get("crash") or rec.get("exit_status") not in (None, 0):
            rec["log_tail"] = tail(Path(rec["log_path"]), LOG_SECTION_LINES) if rec.get("log_path") else []
    verdicts = gate.verdicts if gate is not None else []
    doc = json_report(servers, verdicts, changes, gate.results if gate else None, gate.versus if gate else [],
                      gate.statistics if gate else None, _run_meta(config, verdicts),
                      dict(pool.failures) if pool is not None else {})
    configs = config.stash.get(configs_key, {})
    doc["known_issues"] = {n: configs[n].known_issue for n in doc["problems"]
                           if n in configs and configs[n].known_issue}
    return doc


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What the pools did (launches, reuses and why, failures), the verdict table and what was written."""
    view = config.stash.get(view_key, None)
    if view is None:
        return
    if view.events:
        terminalreporter.section("glm5 servers")
        for line in wrapped([f"{name}: {message}" for name, message in view.events]):
            terminalreporter.write_line(line)
    gate = config.stash.get(gate_key, None)
    changes, errors = config.stash.get(changes_key, ([], []))
    errors = [*errors, *config.stash.get(output_errors_key, [])]
    if not (view.verdicts or view.problems) and not errors:
        return
    terminalreporter.section("glm5 performance")
    s = config.stash[settings_key]
    for line in verdict_table(view.verdicts):
        terminalreporter.write_line(line)
    for line in wrapped(summary_lines(view.verdicts, changes, s["update-baselines"], view.problems, errors,
                                      view.family_size, float(s["glm5-alpha"]) if view.family_size else 0.0)):
        terminalreporter.write_line(line, red=line.startswith(("regressions", "cannot", "NO BASELINES")))
    written = config.stash.get(written_key, None)
    drift = {(a.series.config, a.series.scenario, a.series.metric): a.drift
             for a in (written.analyses if written else [])}
    for line in wrapped([*target_lines(view.verdicts, drift), *campaign_lines(view.versus)]):
        terminalreporter.write_line(line, red=" REGRESSION" in line)
    if gate is not None:
        for (cfg_name, scenario), rs in gate.results.items():
            if rs and not rs[0].shape.exact_lengths:
                terminalreporter.write_line(f"{cfg_name} {scenario}: lengths approximate: {rs[0].shape.describe()}")
            notes = sorted({r.cache_note for r in rs if r.cache_note})
            notes += [f"paused, not hung: {p}" for r in rs for p in r.pauses]
            notes += sorted({r.server_note for r in rs if r.server_note})
            for line in wrapped([f"{cfg_name} {scenario}: {note}" for note in notes]):
                terminalreporter.write_line(line, yellow=True)
        tel = telemetry_lines(gate.results)
        if tel:
            terminalreporter.write_line("GPU telemetry during the runs (NVML):")
            for line in wrapped([f"  {line}" for line in tel]):
                terminalreporter.write_line(line)
        elif gate.results:
            terminalreporter.write_line(f"GPU telemetry: none ({describe(_gpus(config))})")
    for line in wrapped([f"glm5 {line}" for line in (written.lines if written else [])]):
        terminalreporter.write_line(line)
    regressed = config.stash.get(regressed_key, [])
    known = frozenset(n for n, c in server_configs(config).items() if c.known_issue) if _configs_path(config).exists() \
        else frozenset()
    last = outcome_line(view.verdicts, regressed, view.problems, known)
    terminalreporter.write_line(last, red=last.startswith("FAILED"), green=last.startswith("PASSED"), bold=True)
    sys.stdout.flush()
