"""The run: one object, built from Settings in pytest_configure, that owns the configs, builds, GPU leases, server
pool, gate and outputs, and offers collect / finish / summary (pytest-benchmark's BenchmarkSession, xdist's
DSession). pytest-free: the plugin hands it plain values (test ids, config names, a terminal to write to) and
applies what it returns; `glm5 merge` finishes a run through the same code.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from . import proxies
from .configs import ConfigError, ServerConfig, load_configs
from .judge.baselines import BaselineError, BaselineStore, baseline_path, write_costs
from .judge.decide import to_add
from .judge.gate import GateError, PerfGate, Reference, Statistics, check_stores, versus_all
from .judge.merge import Merged, MergeError, coverage, decided, join, update
from .judge.provenance import git_commit
from .judge.verdicts import Change, Kind, ReportError, Verdict, read_report, run_document
from .perf import PerfContext, rounds
from .plan import ASSUMED_LOAD_S, ASSUMED_MEASURE_S_PER_TEST, Budget, ConfigCost, Plan, hours
from .report import exports, gateitems
from .report.outcome import Facts, Outcome, decide
from .report.outputs import Outputs, Written, write_all
from .report.terminal import (
    TerminalProgress,
    campaign_lines,
    recording_lines,
    result_notes,
    summary_lines,
    target_lines,
    telemetry_lines,
    verdict_table,
    wrapped,
)
from .scaleout import assign
from .servers.builds import Build, identity, load_builds, pick
from .servers.engines import ENGINES, EngineError, engine_factory
from .servers.engines.base import gpus_for
from .servers.forensics import known_issue_mismatch, tail
from .servers.leases import Device, LeaseBook, LeaseError, book_for, default_lease_dir, emulated, visible
from .servers.pool import ConfigMismatch, PoolSettings, ServerPool
from .servers.process import ServerError, ServerHandle
from .servers.records import KEPT, RecordStore, reap_leftovers, stop_recorded
from .settings import Settings, SettingsError
from .telemetry import Gpu, describe, gpu_processes, hardware_key, inventory

LOG_SECTION_LINES = 30


class RunError(Exception):
    """A usage error of the run (a bad configs file, an unknown config, GPUs that cannot be leased): one line."""


@dataclass(frozen=True)
class TestItem:
    """What the session needs of a collected test."""

    nodeid: str
    config: str | None  # its server_config marker's
    markers: frozenset[str] = frozenset()
    concurrency: int | None = None
    skipped: bool = False


@dataclass
class Collected:
    """What collection decided: tests to skip or to mark strict-xfail (with reasons), and the run order."""

    skips: dict[str, str] = field(default_factory=dict)
    xfails: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # node ids kept, in run order
    deselected: list[str] = field(default_factory=list)


@dataclass
class Served:
    """A test's server, or why it has none: `skip` (an external server that differs, not strict) or `fail`."""

    handle: ServerHandle | None = None
    skip: str | None = None
    fail: str | None = None


def sigterm_as_interrupt() -> Callable[[], None] | None:
    """Make SIGTERM end the run like Ctrl-C (so servers are stopped); returns the undo, None where not possible."""
    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


class Glm5Session:
    """The run's state and what it does at each phase; the plugin's hooks delegate here in a line or two."""

    def __init__(self, settings: Settings, suite: Mapping[str, Any], cache: Callable[[str], Path] | None,
                 terminal: Callable[[], Any] = lambda: None, args: Sequence[str] = (), worker: str | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.suite = suite
        self.cache = cache  # pytest's cache directories by name (None under -p no:cacheprovider)
        # pytest's terminal reporter (looked up when needed: it registers after this plugin), or a worker's writer
        self._terminal = terminal
        self.args = list(args)
        self.worker = worker  # the xdist worker id, None on the controller or alone
        self.environ = dict(os.environ if environ is None else environ)
        self.started = dt.datetime.now(dt.UTC)
        try:
            self.outputs = Outputs.from_settings(settings, self.environ)
        except SettingsError as exc:
            raise RunError(f"glm5: {exc}") from None
        self.engine_for = engine_factory(settings)
        self._configs: dict[str, ServerConfig] | None = None
        self._builds: dict[str, Build] | None = None
        self._gpus: list[Gpu] | None = None
        self._gpus_read = False
        self.books: dict[str, LeaseBook | None] = {}  # per machine: NVML's, or each emulated profile's
        self.pool: ServerPool | None = None
        self.gate: PerfGate | None = None
        self.context: PerfContext | None = None
        self.shard_configs: list[str] | None = None  # this shard's configs, and all of the split's
        self.all_configs: list[str] = []
        self.worker_docs: list[dict[str, Any]] | None = None  # xdist's controller: what each worker sent
        self.handed_over = False  # an xdist worker gave its run to the controller
        self.view: Merged | None = None
        self.changes: tuple[list[Change], list[str]] = ([], [])
        self.written: Written | None = None
        self.errors: list[str] = []
        self.regressed: list[Verdict] = []  # the gate's failed items: confirmed regressions and provisional ones
        self.plan: Plan | None = None
        self.stores: dict[Path, BaselineStore] = {}  # baselines files read for the plan (as check_baselines read them)
        self.budget: Budget | None = None
        self._measuring_since: dict[str, float] = {}  # config -> when its first test got its server here
        self.measure_s: dict[str, float] = {}  # config -> what its tests took on its first launch here
        self.tests_run: dict[str, int] = {}
        self.config_tests = 0  # tests of a server config or a gated marker this run kept after deselection
        self.watched: set[str] = set()  # their ids
        self.ran = 0  # how many of them got to run (a call phase): none is a night that measured nothing
        self.gpu_skipped: dict[str, str] = {}  # test -> why this machine's GPUs cannot run it
        self.not_run: dict[str, str] = {}  # config -> why it was not run (--glm5-budget)
        self.unfinished: list[str] = []  # tests a dead xdist worker never finished
        self.outcome: Outcome | None = None
        self.costs_written: dict[str, str] = {}  # config -> the launch cost --update-baselines recorded

    # --- what the run is made of ---------------------------------------------------------------------------------

    @property
    def gated_markers(self) -> dict[str, str]:
        """Marker -> the compute capability its tests need (the suite's `gated_markers`)."""
        return dict(self.suite.get("gated_markers", {}))

    @property
    def has_configs(self) -> bool:
        """Whether the configs file exists (a plain test suite has none)."""
        return self.settings.configs_path.exists()

    @property
    def configs(self) -> dict[str, ServerConfig]:
        """The configs file, loaded once; RunError names the file and the problem."""
        if self._configs is None:
            try:
                self._configs = load_configs(self.settings.configs_path, ENGINES)
            except ConfigError as exc:
                raise RunError(str(exc)) from None
        return self._configs

    @property
    def builds(self) -> dict[str, Build]:
        """The configs file's builds (plus `default`, this Python); --glm5-build and --glm5-ab must name them."""
        if self._builds is None:
            path = self.settings.configs_path
            try:
                builds = load_builds(path)
                if self.settings.build:
                    pick(builds, self.settings.build, "--glm5-build", path)
                for name in self.settings.ab or ():
                    pick(builds, name, "--glm5-ab", path)
            except ConfigError as exc:
                raise RunError(f"glm5: {exc}") from None
            self._builds = builds
        return self._builds

    def references(self) -> dict[str, Reference]:
        """Each config's compare_to reference."""
        try:
            return _references(self.configs if self.has_configs else {})
        except RunError:
            return {}  # a broken configs file was reported where it was read

    def known_issue(self, name: str, concurrency: int | None) -> str | None:
        """The known issue a test of this config and concurrency hits (it must fail: strict xfail), or None."""
        cfg = self.configs[name]
        if not cfg.known_issue:
            return None
        if cfg.known_issue_phase == "startup" or not cfg.known_issue_concurrency:
            return cfg.known_issue
        return cfg.known_issue if concurrency is not None and concurrency >= cfg.known_issue_concurrency else None

    def store(self) -> RecordStore | None:
        """The servers recorded across runs (kept ones, launched ones), in pytest's cache."""
        return RecordStore(self.cache("glm5")) if self.cache is not None else None

    @property
    def terminal(self) -> Any:
        """Where lines go: write_line, rewrite, isatty (None: nowhere)."""
        return self._terminal()

    def say(self, line: str, **markup: bool) -> None:
        """One line on the terminal (nothing without one)."""
        if self.terminal is not None:
            self.terminal.write_line(line, **markup)

    # --- the GPUs --------------------------------------------------------------------------------------------------

    def gpus(self) -> list[Gpu] | None:
        """NVML's GPUs (None: no NVML), read once."""
        if not self._gpus_read:
            self._gpus, self._gpus_read = inventory(), True
        return self._gpus

    def visible_gpus(self) -> list[Gpu] | None:
        """NVML's GPUs as this run may use them: an outer CUDA_VISIBLE_DEVICES narrows them (a box whose run sees 1
        of its 8 GPUs is a 1-GPU machine for the baselines and the gate)."""
        gpus = self.gpus()
        if not gpus:
            return gpus
        try:
            keep = visible([Device(g.index, g.uuid) for g in gpus], self.environ.get("CUDA_VISIBLE_DEVICES"),
                           "NVML GPUs")
        except LeaseError as exc:
            raise RunError(f"glm5: {exc}") from None
        by_index = {g.index: g for g in gpus}
        return [by_index[d.index] for d in keep]

    def nvml_key(self) -> str | None:
        """The hardware key of the GPUs this run sees (None without NVML)."""
        gpus = self.visible_gpus()
        return hardware_key(gpus) if gpus else None

    def gpu_skips(self, items: Sequence[TestItem]) -> dict[str, str]:
        """Tests of a gated marker (`sm120`) that this machine's GPUs cannot run, with the reason (not under the
        emulator or an external server)."""
        s = self.settings
        if s.sim or s.external:
            return {}
        configs = self.configs if self.has_configs else {}
        where = f" (CUDA_VISIBLE_DEVICES={self.environ['CUDA_VISIBLE_DEVICES']})" \
            if "CUDA_VISIBLE_DEVICES" in self.environ else ""
        out: dict[str, str] = {}
        for marker, cc in self.gated_markers.items():
            gated = [item for item in items if marker in item.markers]
            if not gated:
                continue
            gpus = self.visible_gpus()
            have = [g for g in gpus or [] if g.compute_capability == cc]
            for item in gated:
                cfg = configs.get(item.config or "")
                need, why = gpus_for(self.engine_for(cfg), cfg, len(gpus or [])) if cfg is not None else (1, "")
                if have and len(have) >= need:
                    continue
                if not have:
                    out[item.nodeid] = (f"{marker}: needs compute capability {cc} GPUs; found {describe(gpus)}"
                                        f"{where}. Rehearse on the emulator with --glm5-sim, or use a running "
                                        "server with --sglang-url URL")
                else:
                    out[item.nodeid] = (f"{marker}: config {cfg.name if cfg else '?'} needs {need} GPUs of compute "
                                        f"capability {cc} ({why}); this run sees {len(have)}{where}")
        return out

    def hardware_known(self, cfg: ServerConfig) -> str | None:
        """The hardware key a config's baselines will be read under, where it is known before any launch."""
        s = self.settings
        try:
            key = self.engine_for(cfg).hardware_key(cfg)
        except EngineError as exc:
            raise RunError(f"glm5: {exc}") from None
        if key is not None:
            return key
        if s.hardware:
            return s.hardware
        return None if s.external else self.nvml_key()

    def lease_book(self, cfg: ServerConfig) -> LeaseBook | None:
        """The GPUs a config's server is leased from: its emulator profile's (each profile a machine of its own),
        else NVML's; None with an external server."""
        s = self.settings
        if s.external:
            return None
        try:
            # Only under --glm5-sim is the machine emulated: a config of engine "sim" on a GPU box leases real GPUs.
            emulated_by = self.engine_for(cfg).devices(cfg) if s.sim else None
        except EngineError as exc:
            raise RunError(f"glm5: {exc}") from None
        key = f"sim-{emulated_by[0]}" if emulated_by else "nvml"
        if key in self.books:
            return self.books[key]
        if emulated_by is not None:
            name, count = emulated_by
            devices = emulated(name, count)
            what = f"{count} emulated GPUs (profile {name})"
            directory = self.cache("glm5") if self.cache is not None else default_lease_dir() / "sim"
            # The host's CUDA_VISIBLE_DEVICES names real GPUs (empty on a box without any), not the emulated ones:
            # a rehearsal narrows the emulated machine with a variable of its own.
            variable = "GLM5_SIM_VISIBLE_DEVICES"
            file = f"gpu-leases-{name}.json"
        else:
            gpus = self.gpus() or []
            devices = [Device(g.index, g.uuid) for g in gpus]
            what = f"{len(gpus)} GPUs (NVML)"
            directory = Path(s.lease_dir) if s.lease_dir else default_lease_dir()
            variable = "CUDA_VISIBLE_DEVICES"
            file = "gpu-leases.json"
        try:
            book = book_for(devices, what, self.environ.get(variable), directory,
                            exclusive=s.exclusive or bool(s.update_baselines),
                            probe=None if emulated_by else gpu_processes, file=file, variable=variable)
        except LeaseError as exc:
            raise RunError(f"glm5: {exc}") from None
        except OSError as exc:
            raise RunError(f"glm5: cannot keep GPU leases in {directory}: {exc.strerror or exc}; set "
                           "--glm5-lease-dir or env GLM5_LEASE_DIR to a writable directory") from None
        self.books[key] = book
        return book

    # --- phases ---------------------------------------------------------------------------------------------------

    def header(self) -> list[str]:
        """Where this run's configs, baselines and hardware key come from, and the emulator's scale."""
        s = self.settings
        lines = [f"glm5: configs {s.configs_path}; baselines {s.baselines_root}"]
        if s.sim:
            lines.append(f"glm5: emulator (--glm5-sim), time scale {s.sim_time_scale:g} "
                         f"({s.source('glm5-sim-time-scale')}); hardware key sim-<profile>-x{s.sim_time_scale:g}")
        elif s.hardware:
            lines.append(f"glm5: hardware key {s.hardware} (--glm5-hardware)")
        elif s.sglang_url:
            lines.append(f"glm5: external server {s.sglang_url} (--sglang-url); hardware key from --glm5-hardware "
                         "or NVML")
        if s.sglang_url:
            via = proxies.proxy_for(s.sglang_url)
            lines.append(f"glm5: requests to {s.sglang_url} go through the proxy {via} (the environment's proxy "
                         "settings; add the host to no_proxy to go direct)" if via else
                         f"glm5: requests to {s.sglang_url} go direct (no proxy applies)")
        else:
            lines.append("glm5: hardware key from NVML when a server is measured")
        return lines

    def start(self) -> None:
        """Reap servers a killed earlier run left behind."""
        store = self.store()
        if store is not None:
            for line in reap_leftovers(store):
                self.say(f"glm5: {line}", yellow=True)

    def stop_kept(self) -> tuple[str, int]:
        """--glm5-stop-servers: reap leftovers, stop the servers earlier runs kept; the message and exit code."""
        store = self.store()
        if store is None:
            return "glm5: --glm5-stop-servers needs pytest's cache (drop -p no:cacheprovider)", 4
        lines = [*reap_leftovers(store), *stop_recorded(store, self.settings.stop_timeout)]
        return "\n".join(f"glm5: {line}" for line in lines) or "glm5: no kept servers recorded", 0

    def sweep(self, default: Sequence[int]) -> list[tuple[str, int]]:
        """(config, concurrency) for a sweep test: each config's own `sweep`, else the module's SWEEP."""
        return [(n, c) for n, cfg in self.configs.items() for c in (cfg.sweep or default)]

    def collect(self, items: Sequence[TestItem]) -> Collected:
        """After -m/-k deselection: hardware gating, config names checked, known issues strict-xfail, every
        baselines file read and every GPU lease book opened (not after a model load), this shard's configs, and
        each config's tests together, a kept server's config first."""
        out = Collected(skips=self.gpu_skips(items))
        self.gpu_skipped = dict(out.skips)
        gated = set(self.gated_markers)
        self.watched = {item.nodeid for item in items if item.config is not None or item.markers & gated}
        self.config_tests = len(self.watched)
        if not any(item.config for item in items):
            out.order = [item.nodeid for item in items]
            return out
        configs = self.configs
        self.builds  # noqa: B018 - a bad --glm5-build is a usage error now
        for item in items:
            if item.config is not None and item.config not in configs:
                raise RunError(f"{item.nodeid}: unknown server config {item.config!r}; known configs in "
                               f"{self.settings.configs_path}: {', '.join(configs)}")
            issue = self.known_issue(item.config, item.concurrency) if item.config is not None else None
            if issue is not None:
                out.xfails[item.nodeid] = f"known issue of {item.config}: {issue}"
        runnable = sorted({item.config for item in items
                           if item.config is not None and not item.skipped and item.nodeid not in out.skips})
        self.check_baselines({n: configs[n] for n in runnable})
        for name in runnable:
            self.lease_book(configs[name])
        kept_items = list(items)
        if self.settings.shard is not None:
            kept_items = self._take_shard(items)
            out.deselected = [item.nodeid for item in items if item not in kept_items]
        plain = [item.nodeid for item in kept_items if item.config is None]
        groups: dict[str, list[str]] = {}
        for item in kept_items:
            if item.config is not None:
                groups.setdefault(item.config, []).append(item.nodeid)
        store = self.store() if self.settings.keep_servers else None
        if store is not None:
            # The server kept by the last run is the only one alive: its config goes first, so it is reused before
            # another launch would have to stop it.
            kept = {str(d.get("config")) for d in store.read()[KEPT].values()}
            groups = dict(sorted(groups.items(), key=lambda kv: kv[0] not in kept))
        out.order = plain + [nodeid for group in groups.values() for nodeid in group]
        if self.settings.shard is not None:
            self.watched &= {item.nodeid for item in kept_items}
            self.config_tests = len(self.watched)
        self.plan = self.make_plan({name: len(ids) for name, ids in groups.items()})
        if self.worker is None and self.plan.costs:
            for line in self.plan.lines():
                self.say(f"glm5: plan: {line}")
        if self.settings.budget is not None:
            first = {c.config: c.launch_s * self.plan.planned for c in self.plan.costs}
            self.budget = Budget(self.settings.budget, first)
        return out

    def round_allowed(self, config: str, measured_s: float) -> str | None:
        """Why a round of this config may not run (None: it may): priced by the plan where the engine models its
        box (the emulator), else by what this run measured (`measured_s`)."""
        if self.budget is None:
            return None
        cost = next((c.launch_s for c in (self.plan.costs if self.plan else []) if c.config == config), measured_s)
        cfg = self.configs[config]
        return self.budget.round(config, cost if self.engine_for(cfg).modeled_load(cfg) is not None else measured_s)

    def make_plan(self, tests: Mapping[str, int]) -> Plan:
        """Each config's launch cost on this box (recorded with its baselines, else what the engine models, else
        assumed) and the launches the settings give it."""
        s = self.settings
        planned = 4 if s.ab else s.launches
        most = 2 * (s.max_repeats or 8) if s.ab else (s.max_repeats or 5)
        return Plan([self.cost_of(name, n) for name, n in tests.items()], s.budget, planned, max(0, most - planned))

    def _store_of(self, cfg: ServerConfig) -> tuple[Path, BaselineStore] | None:
        model = cfg.model or self.settings.model
        hw = self.hardware_known(cfg)
        if model is None or hw is None:
            return None
        path = baseline_path(self.settings.baselines_root, hw, model)
        if path not in self.stores:
            try:
                self.stores[path] = BaselineStore(path)
            except BaselineError:
                return None  # check_baselines said why already
        return path, self.stores[path]

    def cost_of(self, name: str, tests: int) -> ConfigCost:
        """What one launch of this config, measuring `tests` tests, costs on this box."""
        cfg = self.configs[name]
        found = self._store_of(cfg)
        stored = found[1].cost(name) if found is not None else None
        if stored and stored.get("tests"):
            per_test = float(stored.get("measure_s", 0.0)) / int(stored["tests"])
            return ConfigCost(name, tests, float(stored.get("load_s", 0.0)), per_test * tests,
                              str(stored.get("source") or f"recorded {stored.get('updated', '')}"))
        try:
            modeled = self.engine_for(cfg).modeled_load(cfg)
        except EngineError:
            modeled = None
        load, source = modeled if modeled is not None else (ASSUMED_LOAD_S, "assumed (none recorded here)")
        return ConfigCost(name, tests, load, ASSUMED_MEASURE_S_PER_TEST * tests,
                          f"load {source}, {hours(ASSUMED_MEASURE_S_PER_TEST)} a test assumed")

    def check_baselines(self, used: dict[str, ServerConfig]) -> None:
        """Read every baselines file the run will use now, not after a model load and a load run."""
        wanted = {name: (hw, model) for name, cfg in used.items()
                  if (model := cfg.model or self.settings.model) is not None
                  and (hw := self.hardware_known(cfg)) is not None}
        try:
            files = check_stores(self.settings.baselines_root, wanted, self.stores,
                                 writing=bool(self.settings.update_baselines))
        except GateError as exc:
            raise RunError(f"glm5: {exc}") from None
        if self.worker is None:
            for line in files:
                self.say(f"glm5: {line}")

    def _take_shard(self, items: Sequence[TestItem]) -> list[TestItem]:
        """This shard's tests (tests without a config run in shard 1). The split is by config, balanced by each
        config's test count, which every machine collects alike: it is the same on every shard's machine."""
        assert self.settings.shard is not None
        index, count = self.settings.shard
        tests: dict[str, int] = {}
        for item in items:
            if item.config is not None:
                tests[item.config] = tests.get(item.config, 0) + 1
        # A launch costs about as much as a few scenarios: a config's cost is its launch plus its tests.
        where = assign(sorted(tests), {n: 2.0 + k for n, k in tests.items()}, count)
        self.all_configs = sorted(tests)
        self.shard_configs = [n for n in self.all_configs if where[n] == index]
        self.say(f"glm5: shard {index}/{count}: {len(self.shard_configs)} of {len(tests)} configs "
                 f"({', '.join(self.shard_configs) or 'none'}; balanced by tests per config, the same split on "
                 "every machine)")
        return [item for item in items if (where[item.config] if item.config is not None else 1) == index]

    # --- the objects the fixtures hand out --------------------------------------------------------------------------

    def make_pool(self, basetemp: Path, progress: TerminalProgress | None) -> ServerPool:
        """The run's server pool (one live server at a time in this process)."""
        s = self.settings
        store = self.store()
        if s.keep_servers and store is None:
            raise RunError("--glm5-keep-servers records servers in pytest's cache: drop -p no:cacheprovider")
        # Kept servers outlive this run's basetemp, which the next run deletes: log where the cache lives.
        logs = self.cache("glm5-logs") if s.keep_servers and self.cache is not None else basetemp / "glm5-logs"
        self.pool = ServerPool(PoolSettings.from_settings(s, logs), self.engine_for, store=store, progress=progress,
                               identify=lambda build: identity(build, s.rootdir),
                               leases_for=self.lease_book)
        return self.pool

    def make_gate(self) -> PerfGate:
        """The run's perf gate: verdicts and baselines stores."""
        s = self.settings
        self.gate = PerfGate(s.baselines_root, strict=s.strict_baselines, statistics=Statistics.from_settings(s),
                             references=self.references(), require=s.require_baselines and not s.update_baselines)
        return self.gate

    def make_context(self, pool: ServerPool, gate: PerfGate) -> PerfContext:
        """What every perf test of the run shares: pool, gate, hardware key, repeats."""
        s = self.settings
        self.context = PerfContext(pool, gate, s.rootdir, hardware=s.hardware, repeats=s.repeats,
                                   gpus=self.visible_gpus, nvml_key=self.nvml_key, builds=self.builds,
                                   build=s.build_name, launches=s.launches,
                                   budget=self.round_allowed, recording=bool(s.update_baselines) and not s.ab)
        return self.context

    def server(self, pool: ServerPool, name: str) -> Served:
        """The live server of a test's config, or why the test gets none."""
        why_not = self.budget.begin(name) if self.budget is not None else None
        if why_not is not None:
            self.not_run[name] = f"{why_not} (--glm5-budget)"
            return Served(skip=f"{name}: {why_not} (--glm5-budget)")
        self.tests_run[name] = self.tests_run.get(name, 0) + 1
        try:
            handle = pool.get(self.configs[name], self.builds[self.settings.build_name])
            self._measuring_since.setdefault(name, time.monotonic())
            return Served(handle=handle)
        except ConfigMismatch as exc:
            detail = f"external server differs from config {exc.config}: " + "; ".join(exc.diffs)
            return Served(fail=detail) if pool.settings.strict else Served(skip=detail)
        except ServerError as exc:
            return Served(fail=str(exc))
        finally:
            if isinstance(pool.progress, TerminalProgress):
                pool.progress.done()

    # --- as tests run ---------------------------------------------------------------------------------------------

    def reported(self, nodeid: str, when: str, skipped: bool) -> None:
        """A test's phase ended: a watched test whose call phase was not skipped ran (it measured, or tried to)."""
        if when == "call" and not skipped and nodeid in self.watched:
            self.ran += 1

    def mark(self) -> tuple[int, int]:
        """Where the verdicts stand now (before a test)."""
        return (len(self.gate.verdicts), len(self.gate.versus)) if self.gate is not None else (0, 0)

    def tag(self, mark: tuple[int, int], nodeid: str) -> list[Verdict]:
        """The verdicts a test made since `mark`, each tagged with its id."""
        if self.gate is None:
            return []
        mine = self.gate.verdicts[mark[0]:]
        for v in [*mine, *self.gate.versus[mark[1]:]]:
            v.test = nodeid
        if self.context is not None:
            for pending in self.context.pending.values():
                for p in pending.values():
                    p.test = p.test or nodeid
        return mine

    def rounds_after(self, name: str | None, next_name: str | None, last: bool) -> None:
        """After a config's last test here, before the run's fixtures are torn down: its rounds (the launches that
        resolve its series)."""
        if self.context is None or name is None or not (last or next_name != name):
            return
        if name in self._measuring_since and name not in self.measure_s:
            self.measure_s[name] = time.monotonic() - self._measuring_since[name]
        if name in self.context.pending and name in (self._configs or {}):
            rounds(self.context, self.configs[name], lambda line: self.say(f"glm5: {line}"))

    def release_after(self, name: str | None, next_name: str | None, last: bool) -> None:
        """With GPU leases, a config's server is stopped (or kept idle) after its last test here: servers of other
        workers may be waiting for its GPUs."""
        pool = self.pool
        if pool is None or pool.leases is None or pool.current is None or name is None:
            return
        if last or next_name != name:
            pool.release_current(next_config=next_name or "")

    def known_issue_mismatch(self, name: str | None, text: str) -> str | None:
        """For a strict-xfail test of a config with `known_issue_match`: why its failure is not the known one."""
        cfg = (self._configs or {}).get(name) if name is not None else None
        if cfg is None or not cfg.known_issue_match:
            return None
        return known_issue_mismatch(cfg.known_issue_match, text)

    def log_section(self, name: str | None) -> tuple[str, str] | None:
        """A failing test's server log tail: (title, text)."""
        rec = self.pool.records.get(name) if self.pool is not None and name is not None else None
        if rec is None or not rec.log_path:
            return None
        lines = tail(Path(rec.log_path), LOG_SECTION_LINES)
        return f"glm5 server log: {name} (last {len(lines)} lines of {rec.log_path})", "\n".join(lines)

    # --- the end of the run ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop this process's servers (also after Ctrl-C)."""
        if self.pool is not None:
            self.pool.close()

    def meta(self, verdicts: Iterable[Verdict]) -> dict[str, Any]:
        """The run's own facts for the report: when, how long, commit, build, hardware, arguments, shard."""
        hardware = sorted({str(v.provenance.get("hardware")) for v in verdicts if v.provenance.get("hardware")})
        out: dict[str, Any] = {
            "time": self.started.isoformat(timespec="seconds"),
            "duration_s": (dt.datetime.now(dt.UTC) - self.started).total_seconds(),
            "commit": git_commit(self.settings.rootdir), "build": self.settings.build_name,
            "hardware": ", ".join(hardware), "args": self.args,
            # Launches are what a night on the real box is made of: each config's count and load times.
            "launches": {c: {"launches": len(t), "load_s": t}
                         for c, t in (self.pool.load_s if self.pool is not None else {}).items()},
            "config_tests": self.config_tests, "ran": self.ran, "gpu_skipped": self.gpu_skipped,
            "not_run": self.not_run, "unfinished": self.unfinished}
        if self.settings.shard is not None and self.shard_configs is not None:
            index, count = self.settings.shard
            out["shard"] = {"index": index, "count": count, "configs": self.shard_configs,
                            "all_configs": self.all_configs}
        return out

    def live(self) -> Merged:
        """This process's run as a Merged view, before the family decision."""
        pool, gate = self.pool, self.gate
        servers = pool.server_table() if pool is not None else {}
        for rec in servers.values():
            if rec.get("crash") or rec.get("exit_status") not in (None, 0):
                rec["log_tail"] = tail(Path(rec["log_path"]), LOG_SECTION_LINES) if rec.get("log_path") else []
        problems = dict(pool.failures) if pool is not None else {}
        configs = self._configs or {}  # as loaded (a broken file was reported where it was read)
        st = gate.statistics if gate is not None else None
        return Merged(
            verdicts=list(gate.verdicts) if gate else [], versus=list(gate.versus) if gate else [],
            servers=servers, problems=problems,
            known_issues={n: issue for n in problems if n in configs and (issue := configs[n].known_issue)},
            results=[{"config": c, "scenario": sc, "runs": [r.to_dict() for r in rs]}
                     for (c, sc), rs in (gate.results if gate else {}).items()],
            events=[(e.config, e.message) for e in pool.events] if pool is not None else [],
            statistics=None if st is None else {"alpha": st.alpha, "effect": st.effect,
                                                "max_repeats": st.max_repeats,
                                                "ab": list(st.ab) if st.ab else None})

    def document(self, view: Merged, changes: Sequence[Change] = ()) -> dict[str, Any]:
        """The run document every output is rendered from (with the outcome, once it is decided)."""
        doc = run_document(view.servers, view.verdicts, changes, view.results, view.versus, view.statistics,
                           self.meta(view.verdicts), view.problems, view.known_issues, view.events)
        if self.outcome is not None:
            doc["outcome"] = self.outcome.to_dict()
        return doc

    def worker_doc(self) -> str:
        """An xdist worker's run, before the family decision (the controller makes it once, over all)."""
        self.handed_over = True
        return json.dumps(self.document(self.live()), default=str)

    def finish(self, collect_only: bool, bench_json: str | None, bench_saved: bool, failed_tests: int = 0,
               interrupted: bool = False) -> tuple[list[Verdict], bool]:
        """The family decision over the whole run (joined from the workers under xdist), baseline updates, the
        outcome and every output, once. Returns the regressions it confirmed and whether the run fails (the outcome
        says why: the exit status and every output agree)."""
        self.close()
        if self.handed_over:
            return [], False
        s = self.settings
        if self.worker_docs is not None:
            view = join(self.worker_docs)
            # compare_to needs both configs' verdicts, which may come from two workers: decided here, over all.
            view.versus = versus_all(view.verdicts, self.references(), Statistics.from_settings(s))
            for doc in self.worker_docs:
                told = doc.get("run") or {}
                self.config_tests += int(told.get("config_tests") or 0)
                self.ran += int(told.get("ran") or 0)
                self.gpu_skipped.update(told.get("gpu_skipped") or {})
                self.not_run.update(told.get("not_run") or {})
        else:
            view = self.live()
        self.view = decided(view, s.alpha)
        self.price_unresolved(self.view.verdicts)
        self.regressed = gateitems.regressions(self.view.verdicts, self.view.confirmed)
        if s.update_baselines and self.view.verdicts:
            self.changes = update(s.baselines_root, self.view.verdicts, s.update_baselines)
            self.errors += self.changes[1]  # asked to record, could not: not a green run
            if not s.ab:
                self.record_costs()
        self.outcome = self.decide(failed_tests, interrupted)
        if (self.outputs.any or bench_json) and not collect_only:  # --collect-only measured nothing to report
            doc = self.document(self.view, self.changes[0])
            self.written = write_all(doc, self.outputs)
            if bench_json and not bench_saved and doc["verdicts"]:
                try:
                    exports.write_json(Path(bench_json), exports.pytest_benchmark(doc))
                    self.written.lines.append(f"--benchmark-json: {bench_json} (pytest-benchmark's format; the glm5 "
                                              "results, as pytest-benchmark had none)")
                except OSError as exc:
                    self.written.errors.append(f"cannot write --benchmark-json: {exc.strerror or exc}")
            if self.written.errors:  # asked for an output, did not get it: the terminal and the exit say so
                self.errors += self.written.errors
                self.outcome = self.decide(failed_tests, interrupted)
        return self.view.confirmed, self.outcome.failed

    def nothing_measured(self) -> str | None:
        """Why this run measured nothing, where its config tests were all skipped (None: it measured, or had no
        config tests): `89 sm120 tests skipped (needs compute capability 12.0 GPUs; found no NVML ...)`."""
        view = self.view
        launched = self.pool is not None and bool(self.pool.load_s)
        if not self.config_tests or self.ran or launched or (view is not None and (view.verdicts or view.problems)):
            return None
        reasons: dict[str, int] = {}
        for why in self.gpu_skipped.values():
            reasons[why] = reasons.get(why, 0) + 1
        for config, why in self.not_run.items():
            reasons[f"{config}: {why}"] = reasons.get(f"{config}: {why}", 0) + 1
        markers = "/".join(self.gated_markers) or "config"
        skipped = len(self.gpu_skipped)
        head = (f"all {skipped} {markers} tests skipped" if skipped == self.config_tests else
                f"{skipped} of {self.config_tests} {markers} tests skipped") if skipped else \
            f"none of {self.config_tests} config tests measured"
        common = max(reasons, key=lambda r: reasons[r]) if reasons else "every config test was skipped"
        return f"{head} ({common})"

    def decide(self, failed_tests: int, interrupted: bool) -> Outcome:
        """The run's outcome from what it did (report/outcome.py decides)."""
        view = self.view
        known = frozenset(n for n, c in (self._configs or {}).items() if c.known_issue)
        # pytest counted its failures before the gate's items (the regressions, said apart) were emitted.
        failed = failed_tests
        return decide(Facts(
            verdicts=view.verdicts if view else [], regressed=self.regressed, problems=view.problems if view else {},
            known=known, failed_tests=failed, errors=list(self.errors), not_run=dict(self.not_run),
            unfinished=list(self.unfinished), nothing_measured=self.nothing_measured(),
            require=self.settings.require_baselines, interrupted=interrupted))

    def price_unresolved(self, verdicts: Sequence[Verdict]) -> None:
        """Each unresolved series' advice in time on this box: the launches its line says to add, at its config's
        launch cost in the plan (`about 4 more new launches would resolve it (80% power): 3.2 h on this box`)."""
        costs = {c.config: c.launch_s for c in (self.plan.costs if self.plan else [])}
        for v in verdicts:
            more = to_add(v.note)
            if v.verdict != Kind.UNRESOLVED or v.config not in costs or more is None or "on this box" in v.note:
                continue
            v.note = f"{v.note}: {hours(more * costs[v.config])} on this box ({hours(costs[v.config])} a launch, " \
                     "the plan's price)"

    def record_costs(self) -> None:
        """With the baselines: what a launch of each config measured here cost (load, and its tests on one launch),
        for the plans of later runs. The emulator's are in model time (its modeled load, its measuring divided by
        the time scale): a plan of the rehearsal is a plan of the real box."""
        if self.pool is None:
            return
        today = dt.date.today().isoformat()
        by_file: dict[Path, dict[str, dict[str, Any]]] = {}
        for name, measured in self.measure_s.items():
            cfg = (self._configs or {}).get(name)
            found = self._store_of(cfg) if cfg is not None else None
            loads = self.pool.load_s.get(name, [])
            if found is None or not loads or not self.tests_run.get(name):
                continue
            modeled = self.engine_for(cfg).modeled_load(cfg) if cfg is not None else None
            scale = self.settings.sim_time_scale if modeled is not None else 1.0
            load = modeled[0] if modeled is not None else sorted(loads)[len(loads) // 2]
            measure = max(0.0, measured - loads[0]) / scale
            source = (f"rehearsal {today}: modeled load, measuring in model time" if modeled is not None else
                      f"measured {today} over {len(loads)} launches")
            hardware = found[0].parent.name
            by_file.setdefault(found[0], {})[name] = {
                "load_s": round(load, 1), "measure_s": round(measure, 1), "tests": self.tests_run[name],
                "launches": len(loads), "source": source,
                # Like every entry: where the figure came from, so a reviewer can tell a box's cost from a guess.
                "provenance": {"hardware": hardware, "commit": git_commit(self.settings.rootdir),
                               "build": self.settings.build_name, "engine": cfg.engine if cfg is not None else ""}}
        for path, costs in by_file.items():
            try:
                write_costs(path, costs)
            except (OSError, BaselineError) as exc:
                self.errors.append(f"cannot record launch costs in {path}: {exc}")
                continue
            for name, cost in costs.items():
                self.costs_written[name] = (f"load {cost['load_s']:,.0f} s, measuring {cost['measure_s']:,.0f} s over "
                                            f"{cost['tests']} tests")

    def benchmarks(self) -> list[dict[str, Any]]:
        """This run's results as pytest-benchmark entries (for its --benchmark-json of a run with its own)."""
        if self.gate is None or not self.gate.verdicts:
            return []
        return list(exports.pytest_benchmark(self.document(self.live()))["benchmarks"])

    def summary(self, tr: Any) -> None:
        """What the pools did (launches, reuses and why, failures), the verdict table, what was written, and the
        outcome last (the line the exit status agrees with)."""
        view = self.view
        if view is None or self.outcome is None:
            return
        if view.events:
            tr.section("glm5 servers")
            for line in wrapped([f"{name}: {message}" for name, message in view.events]):
                tr.write_line(line)
        changes, errors = self.changes[0], self.errors
        if not (view.verdicts or view.problems or errors or self.config_tests or self.unfinished):
            return
        tr.section("glm5 performance")
        s = self.settings
        if view.verdicts:
            for line in verdict_table(view.verdicts):
                tr.write_line(line)
        for line in wrapped(summary_lines(view.verdicts, changes, s.update_baselines, view.problems, errors,
                                          view.family_size, s.alpha if view.family_size else 0.0, self.not_run,
                                          self.unfinished)):
            tr.write_line(line, red=line.startswith(("regressions", "cannot", "NO BASELINES", "never finished")))
        drift = {(a.series.config, a.series.scenario, a.series.metric): a.drift
                 for a in (self.written.analyses if self.written else [])}
        for line in wrapped([*target_lines(view.verdicts, drift), *campaign_lines(view.versus)]):
            tr.write_line(line, red=" REGRESSION" in line)
        if s.update_baselines:
            said = self.context.said if self.context is not None else []
            for line in wrapped(recording_lines(view.verdicts, changes, self.costs_written, said)):
                tr.write_line(line)
        for line in wrapped(result_notes(view.results)):
            tr.write_line(line, yellow=True)
        tel = telemetry_lines(view.results)
        if tel:
            tr.write_line("GPU telemetry during the runs (NVML):")
            for line in wrapped([f"  {line}" for line in tel]):
                tr.write_line(line)
        elif view.results:
            tr.write_line(f"GPU telemetry: none ({describe(self.gpus())})")
        for line in wrapped([f"glm5 {line}" for line in (self.written.lines if self.written else [])]):
            tr.write_line(line)
        for line in wrapped(self.spent_lines()):
            tr.write_line(line)
        last = self.outcome.line
        for line in wrapped([last]):
            tr.write_line(line, red=self.outcome.failed, green=self.outcome.status == "PASSED",
                          yellow=self.outcome.status == "SKIPPED", bold=True)

    def spent_lines(self) -> list[str]:
        """Launches and time against the plan: `launches: tp8 5 (1 + 4 rounds), ep8 1; 6 launches in 0.4 h of
        the planned 0.2 h (budget 8 h)`."""
        if self.pool is None or not self.pool.load_s or self.plan is None:
            return []
        planned = self.plan.planned
        each = [f"{c} {len(t)}" + (f" ({planned} + {len(t) - planned} rounds)" if len(t) > planned else "")
                for c, t in self.pool.load_s.items()]
        took = (dt.datetime.now(dt.UTC) - self.started).total_seconds()
        budget = f"; {hours(self.budget.charged)} of the budget's {hours(self.budget.limit_s)} as the plan prices " \
                 "them" if self.budget is not None else ""
        return [f"launches: {', '.join(each)}; {sum(len(t) for t in self.pool.load_s.values())} launches in "
                f"{hours(took)}{budget}"]


def _references(configs: Mapping[str, ServerConfig]) -> dict[str, Reference]:
    return {n: Reference(ref, c.expected_slower) for n, c in configs.items() if (ref := c.compare_to) is not None}


@dataclass
class MergeOutcome:
    """What `glm5 merge` decided and printed."""

    lines: list[str]
    failed: bool  # the outcome's: regressions, crashes or outputs not written
    errors: list[str]


def merge_reports(paths: Sequence[Path], configs_path: Path | None, alpha: float | None, update_mode: str | None,
                  baselines: Path, outputs: Outputs) -> MergeOutcome:
    """`glm5 merge`: shard reports joined (the same hardware and model, each config covered exactly once), decided
    as one run, baselines updated once, every output written once. ReportError or ConfigError says what is wrong."""
    docs = [read_report(p) for p in paths]
    names = [str(p) for p in paths]
    try:
        coverage(docs, names)
        view = join(docs, names)
    except MergeError as exc:
        raise ReportError(str(exc)) from None
    stats = view.statistics or {}
    a = alpha if alpha is not None else float(stats.get("alpha") or 0.01)
    if configs_path is not None:
        configs = load_configs(configs_path)
        statistics = Statistics(alpha=a, effect=float(stats.get("effect") or 0.05))
        view.versus = versus_all(view.verdicts, _references(configs), statistics)
    view = decided(view, a)
    changes, errors = update(baselines, view.verdicts, update_mode) if update_mode else ([], [])
    first = docs[0].get("run") or {} if docs else {}
    run = {**first, "time": first.get("time") or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "merged_from": names}
    run.pop("shard", None)
    doc = run_document(view.servers, view.verdicts, changes, view.results, view.versus, view.statistics, run,
                       view.problems, view.known_issues, view.events)
    outcome = decide(Facts(verdicts=view.verdicts, regressed=gateitems.regressions(view.verdicts, view.confirmed),
                           problems=view.problems, known=frozenset(view.known_issues), errors=errors))
    doc["outcome"] = outcome.to_dict()
    written = write_all(doc, outputs)
    if written.errors:
        outcome = decide(Facts(verdicts=view.verdicts, regressed=gateitems.regressions(view.verdicts, view.confirmed),
                               problems=view.problems, known=frozenset(view.known_issues),
                               errors=[*errors, *written.errors]))
    lines = [*verdict_table(view.verdicts),
             *summary_lines(view.verdicts, changes, update_mode, view.problems, [*errors, *written.errors],
                            view.family_size, a),
             *campaign_lines(view.versus), *(f"glm5 {line}" for line in written.lines), outcome.line]
    return MergeOutcome(lines, outcome.failed, [*errors, *written.errors])
