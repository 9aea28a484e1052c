"""The run: one object, built from Settings in pytest_configure, that owns the configs, builds, GPU leases, server
pool, gate and outputs, and offers collect / finish / summary (pytest-benchmark's BenchmarkSession, xdist's
DSession). pytest-free: the plugin hands it plain values (test ids, config names, a terminal to write to) and
applies what it returns; `glm5 merge` finishes a run through the same code.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .configs import ConfigError, ServerConfig, load_configs
from .correctness.answers import AnswersError
from .judge.baselines import BaselineStore, store_of
from .judge.gate import PerfGate, Reference, Statistics, references_of, versus_all
from .judge.merge import Merged, join, update
from .judge.provenance import git_commit
from .judge.references import GateError, check_stores
from .judge.verdicts import Change, Kind, Verdict, run_document
from .night.plan import Checks, ConfigCost, Night, config_cost
from .night.schedule import for_suite
from .perf.answering import Answering
from .perf.fixture import PerfContext, rounds
from .report import exports
from .report.finish import Finished, finish
from .report.history import Reader
from .report.outcome import Facts, Outcome, Tally, nothing_measured
from .report.outputs import Outputs
from .report.terminal import Summary, TerminalProgress
from .scaleout import shard_of
from .servers.builds import Build, identity, load_builds
from .servers.engines import ENGINES, EngineError, engine_factory
from .servers.forensics import known_issue_mismatch
from .servers.machine import Machine, MachineError
from .servers.pool import ConfigMismatch, PoolSettings, ServerPool
from .servers.process import ServerError, ServerHandle
from .servers.records import KEPT, RecordStore, reap_leftovers, stop_recorded
from .settings import Settings, SettingsError
from .telemetry.nvml import describe

LOG_SECTION_LINES = 30


class RunError(Exception):
    """A usage error of the run (a bad configs file, an unknown config, GPUs that cannot be leased): one line."""


@dataclass(frozen=True)
class TestItem:
    """What the session needs of a collected test."""

    __test__ = False  # a value, not a test class: pytest must not try to collect it
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
    exit: tuple[str, int] | None = None  # end the run here with this line and status (--glm5-plan)


@dataclass
class Served:
    """A test's server, or why it has none: `skip` (an external server that differs, not strict) or `fail`."""

    handle: ServerHandle | None = None
    skip: str | None = None
    fail: str | None = None


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
        self.started, self.run_id = dt.datetime.now(dt.UTC), os.urandom(8).hex()  # keeps a night once in a history
        try:  # a question file that cannot be read stops the run now, as an output that cannot be written
            self.outputs = Outputs.from_settings(settings, self.environ)
            self.answering = Answering.from_settings(settings)
        except SettingsError as exc:
            raise RunError(f"glm5: {exc}") from None
        self.engine_for = engine_factory(settings)
        self.machine = Machine(settings, self.environ, self.engine_for, cache)
        self._configs: dict[str, ServerConfig] | None = None
        self._builds: dict[str, Build] | None = None
        self.pool: ServerPool | None = None
        self.gate: PerfGate | None = None
        self.context: PerfContext | None = None
        self.shard_configs: list[str] | None = None  # this shard's configs, and all of the split's
        self.all_configs: list[str] = []
        self.worker_docs: list[dict[str, Any]] | None = None  # xdist's controller: what each worker sent
        self.handed_over = False  # an xdist worker gave its run to the controller
        self.view: Merged | None = None
        self.finished: Finished | None = None  # what the finish decided, recorded and wrote
        self.errors: list[str] = []
        self.regressed: list[Verdict] = []  # the gate's failed items: confirmed regressions and provisional ones
        self.night = Night.from_settings(settings)  # the plan, the budget and what launches cost here
        self.history = Reader(Path(settings.history), lambda line: self.say(f"glm5: {line}", yellow=True)) \
            if settings.history else None  # read by the schedule and the carried evidence; bad lines said once
        self.stores: dict[Path, BaselineStore] = {}  # baselines files read for the plan (as check_baselines read them)
        self.tally = Tally()  # which config tests ran: a night that measured nothing must not read green
        self.outcome: Outcome | None = None

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
            try:
                self._builds = load_builds(self.settings.configs_path, self.settings.build, self.settings.ab)
            except ConfigError as exc:
                raise RunError(f"glm5: {exc}") from None
        return self._builds

    def references(self) -> dict[str, Reference]:
        """Each config's compare_to reference."""
        try:
            return references_of(self.configs if self.has_configs else {})
        except RunError:
            return {}  # a broken configs file was reported where it was read

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
        try:
            out = self._collect(items)
        except MachineError as exc:
            raise RunError(f"glm5: {exc}") from None
        if self.settings.plan:
            planned = self.night.plan is not None and bool(self.night.plan.costs)
            # 5, pytest's "no tests collected": a plan command that printed no plan never exits 0
            out.exit = ("glm5: --glm5-plan: the plan above; nothing was launched", 0) if planned else (
                "glm5: --glm5-plan: no test of a server config was collected, so there is no plan (check -m, -k and "
                "the test paths); nothing was launched", 5)
        return out

    def _collect(self, items: Sequence[TestItem]) -> Collected:
        out = Collected(skips=self.machine.gpu_skips(items, self.configs if self.has_configs else {},
                                                     self.gated_markers))
        self.tally.gpu_skipped = dict(out.skips)
        gated = set(self.gated_markers)
        self.tally.watch({item.nodeid for item in items if item.config is not None or item.markers & gated})
        if not any(item.config for item in items):
            out.order = [item.nodeid for item in items]
            return out
        configs = self.configs
        self.builds  # noqa: B018 - a bad --glm5-build is a usage error now
        for item in items:
            if item.config is not None and item.config not in configs:
                raise RunError(f"{item.nodeid}: unknown server config {item.config!r}; known configs in "
                               f"{self.settings.configs_path}: {', '.join(configs)}")
            issue = configs[item.config].issue_at(item.concurrency) if item.config is not None else None
            if issue is not None:
                out.xfails[item.nodeid] = f"known issue of {item.config}: {issue}"
        runnable = sorted({item.config for item in items
                           if item.config is not None and not item.skipped and item.nodeid not in out.skips})
        self.check_baselines({n: configs[n] for n in runnable})
        for name in runnable:
            self.machine.lease_book(configs[name])
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
            self.tally.watch(self.tally.watched & {item.nodeid for item in kept_items})
        plan = self.night.make_plan([self.cost_of(name, len(ids)) for name, ids in groups.items()])
        said, s = [self.night.carries()], self.settings
        if self.history and s.budget and plan.first_s > s.budget and not any(a.startswith("-k") for a in self.args):
            # More than a night: tonight's configs by the history's priorities (-k picks them by hand instead).
            runs = self.history.runs(set(self._filed({n: configs[n] for n in groups}).values()))
            tonight = for_suite(plan.costs, s.budget, runs, plan.planned, configs, dt.datetime.now(dt.UTC).date())
            out.skips |= self.night.tonight(tonight, groups)
            out.order = plain + [nodeid for name in tonight.order(list(groups)) for nodeid in groups[name]]
            said += tonight.lines()
        if self.worker is None and plan.costs:
            for line in [*plan.lines(), *said]:
                self.say(f"glm5: plan: {line}")
        return out

    def _filed(self, used: Mapping[str, ServerConfig]) -> dict[str, tuple[str, str]]:
        """The (hardware, model) each config's baselines and history are filed under, where both are known now."""
        return {name: (hw, model) for name, cfg in used.items() if (model := cfg.model or self.settings.model)
                is not None and (hw := self.machine.hardware_known(cfg)) is not None}

    def round_allowed(self, config: str, measured_s: float) -> str | None:
        """Why a round of this config may not run (None: it may): the night decides (night/plan.round_allowed)."""
        cfg = self.configs[config]
        return self.night.round_allowed(config, measured_s, self.engine_for(cfg).modeled_load(cfg) is not None,
                                        pressing=self.gate is not None and self.gate.pressing(config))

    def _store_of(self, cfg: ServerConfig) -> tuple[Path, BaselineStore] | None:
        return store_of(self.settings.baselines_root, self.stores, self.machine.hardware_known(cfg),
                        cfg.model or self.settings.model)

    def cost_of(self, name: str, tests: int) -> ConfigCost:
        """What one launch of this config, measuring `tests` tests, costs on this box (night/plan.py decides)."""
        cfg = self.configs[name]
        found = self._store_of(cfg)
        try:
            modeled = self.engine_for(cfg).modeled_load(cfg)
        except EngineError:
            modeled = None
        checks = Checks(self.answering.canary_on, len(self.answering.questions))
        return config_cost(name, tests, found[1].cost(name) if found is not None else None, modeled, checks)

    def check_baselines(self, used: dict[str, ServerConfig]) -> None:
        """Read every baselines and answers file the run will use now, not after a model load and a load run."""
        wanted, s = self._filed(used), self.settings
        try:
            files = check_stores(s.baselines_root, wanted, self.stores, bool(s.update_baselines))
            self.answering.check_files(wanted)
        except (GateError, AnswersError) as exc:
            raise RunError(f"glm5: {exc}") from None
        for line in files if self.worker is None else []:  # the controller says it once
            self.say(f"glm5: {line}")

    def _take_shard(self, items: Sequence[TestItem]) -> list[TestItem]:
        """This shard's tests (scaleout.shard_of splits by config, the same on every machine)."""
        assert self.settings.shard is not None
        index, count = self.settings.shard
        where, self.all_configs = shard_of([item.config for item in items], count)
        self.shard_configs = [n for n in self.all_configs if where[n] == index]
        self.say(f"glm5: shard {index}/{count}: {len(self.shard_configs)} of {len(self.all_configs)} configs "
                 f"({', '.join(self.shard_configs) or 'none'}; balanced by tests per config, the same split on "
                 "every machine)")
        return [item for item in items if (where[item.config] if item.config is not None else 1) == index]

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
                               leases_for=self.machine.lease_book)
        return self.pool

    def make_gate(self) -> PerfGate:
        """The run's perf gate: verdicts, the baselines files the plan read, earlier nights' launches (carry.py)."""
        s = self.settings
        self.gate = PerfGate(s.baselines_root, strict=s.strict_baselines, statistics=Statistics.from_settings(s),
                             references=self.references(), require=s.require_baselines and not s.update_baselines,
                             stores=self.stores, history=self.history.of if self.history else None)
        return self.gate

    def make_context(self, pool: ServerPool, gate: PerfGate) -> PerfContext:
        """What every perf test of the run shares: pool, gate, hardware key, repeats."""
        s = self.settings
        self.context = PerfContext(pool, gate, s.rootdir, hardware=s.hardware, repeats=s.repeats,
                                   gpus=self.machine.visible_gpus, nvml_key=self.machine.nvml_key, builds=self.builds,
                                   build=s.build_name, answering=self.answering,
                                   budget=self.round_allowed, recording=bool(s.update_baselines) and not s.ab)
        return self.context

    def server(self, pool: ServerPool, name: str) -> Served:
        """The live server of a test's config, or why the test gets none."""
        why_not = self.night.begin(name, time.monotonic())
        if why_not is not None:
            return Served(skip=f"{name}: {why_not}")
        try:
            handle = pool.get(self.configs[name], self.builds[self.settings.build_name])
            return Served(handle=handle)
        except ConfigMismatch as exc:
            detail = f"external server differs from config {exc.config}: " + "; ".join(exc.diffs)
            return Served(fail=detail) if pool.settings.strict else Served(skip=detail)
        except ServerError as exc:
            return Served(fail=str(exc))
        finally:
            if isinstance(pool.progress, TerminalProgress):
                pool.progress.done()

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
            self.context.tag_pending(nodeid)
        return mine

    def rounds_after(self, name: str | None, next_name: str | None, last: bool) -> None:
        """After a config's last test here, before the run's fixtures are torn down: its rounds (the launches that
        resolve its series)."""
        if self.context is None or name is None or not (last or next_name != name):
            return
        self.night.first_launch_done(name, time.monotonic())
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
        return self.pool.log_section(name, LOG_SECTION_LINES) if self.pool is not None and name is not None else None

    def close(self) -> None:
        """Stop this process's servers (also after Ctrl-C); --update-baselines: record what its launches answered."""
        if self.pool is not None:
            self.pool.close()
        self.answering.record()

    def meta(self, verdicts: Iterable[Verdict]) -> dict[str, Any]:
        """The run's own facts for the report: when, how long, commit, build, hardware, arguments, shard."""
        hardware = sorted({str(v.provenance.get("hardware")) for v in verdicts if v.provenance.get("hardware")})
        out: dict[str, Any] = {
            "time": self.started.isoformat(timespec="seconds"),
            "duration_s": (dt.datetime.now(dt.UTC) - self.started).total_seconds(),
            "commit": git_commit(self.settings.rootdir), "build": self.settings.build_name, "run_id": self.run_id,
            "hardware": ", ".join(hardware), "args": self.args,
            # Launches are what a night on the real box is made of: each config's count and load times.
            "launches": {c: {"launches": len(t), "load_s": t}
                         for c, t in (self.pool.load_s if self.pool is not None else {}).items()},
            **self.tally.to_dict(), **self.night.meta(), "answers": self.answering.to_dict()}
        if self.settings.shard is not None and self.shard_configs is not None:
            index, count = self.settings.shard
            out["shard"] = {"index": index, "count": count, "configs": self.shard_configs,
                            "all_configs": self.all_configs}
        return out

    def live(self) -> Merged:
        """This process's run as a Merged view, before the family decision."""
        pool, gate = self.pool, self.gate
        problems = dict(pool.failures) if pool is not None else {}
        configs = self._configs or {}  # as loaded (a broken file was reported where it was read)
        return Merged(
            verdicts=list(gate.verdicts) if gate else [], versus=list(gate.versus) if gate else [], problems=problems,
            servers=pool.server_table(tail_lines=LOG_SECTION_LINES) if pool is not None else {},
            known_issues={n: issue for n in problems if n in configs and (issue := configs[n].known_issue)},
            results=[{"config": c, "scenario": sc, "runs": [r.to_dict() for r in rs]}
                     for (c, sc), rs in (gate.results if gate else {}).items()],
            events=[(e.config, e.message) for e in pool.events] if pool is not None else [],
            statistics={**gate.statistics.to_dict(), "variance": gate.book.models()} if gate is not None else None)

    def document(self, view: Merged, changes: Sequence[Change] = (), outcome: Outcome | None = None
                 ) -> dict[str, Any]:
        """The run document every output is rendered from (with the outcome, once it is decided)."""
        doc = run_document(view.servers, view.verdicts, changes, view.results, view.versus, view.statistics,
                           self.meta(view.verdicts), view.problems, view.known_issues, view.events)
        outcome = outcome or self.outcome
        return {**doc, "outcome": outcome.to_dict()} if outcome is not None else doc

    def worker_doc(self) -> str | None:
        """An xdist worker's run before the family decision (the controller's, once); None: it ran no config test."""
        self.handed_over = True
        if self.pool is None and self.gate is None and not self.tally.config_tests:
            return None
        return json.dumps(self.document(self.live()), default=str)

    def receive(self, doc: dict[str, Any]) -> None:
        """xdist's controller: a worker's run document (the controller decides and reports once, over all)."""
        self.worker_docs = [*(self.worker_docs or []), doc]

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
                self.tally.join(told)
                self.answering.join(told.get("answers") or {})
                self.night.not_run.update(told.get("not_run") or {})
        else:
            view = self.live()
        if bench_json and not bench_saved:
            self.outputs.benchmark_json = Path(bench_json)
        done = finish(view, s.alpha, lambda v, regressed, errs: self.facts(failed_tests, interrupted, regressed, errs),
                      self.document, None if collect_only else self.outputs,  # --collect-only measured nothing
                      record=self._record if s.update_baselines else None, decided_hook=self._decided)
        self.finished, self.outcome, self.regressed = done, done.outcome, done.regressed
        self.errors += done.errors  # asked to record or to write, could not: not a green run
        return done.view.confirmed, self.outcome.failed

    def _decided(self, view: Merged) -> None:  # before anything is recorded: kept, and the night prices its launches
        self.view = view
        self.night.price(view.verdicts)

    def facts(self, failed_tests: int, interrupted: bool, regressed: list[Verdict], errors: Sequence[str]) -> Facts:
        """What the run's outcome is decided from (report/outcome.py decides): `errors`, those of the finish so far."""
        view = self.view
        known = frozenset(n for n, c in (self._configs or {}).items() if c.known_issue)
        launched = self.pool is not None and bool(self.pool.load_s)
        idle = not (self.tally.ran or launched or (view is not None and (view.verdicts or view.problems)))
        # pytest counted its failures before the gate's items (the regressions, said apart) were emitted.
        return Facts(
            verdicts=view.verdicts if view else [], regressed=regressed, problems=view.problems if view else {},
            known=known, failed_tests=failed_tests, errors=[*self.errors, *errors, *self.answering.errors],
            not_run=dict(self.night.not_run), unfinished=list(self.tally.unfinished), nothing_measured=nothing_measured(
                self.tally.config_tests, self.tally.gpu_skipped, self.night.not_run, list(self.gated_markers))
            if idle else None,
            require=self.settings.require_baselines, interrupted=interrupted, unchecked=self.answering.unchecked(),
            coverage=self.answering.coverage())

    def _record(self, verdicts: Sequence[Verdict]) -> tuple[list[Change], list[str]]:
        """--update-baselines: the recordable verdicts, and what each config's launch cost here (not for an A/B)."""
        out = update(self.settings.baselines_root, self.answering.recordable(list(verdicts)),
                     str(self.settings.update_baselines))  # asked for: new or all
        if self.settings.ab:
            return out
        where: dict[str, tuple[Path, float | None]] = {}
        wrong = {v.config for v in verdicts if v.verdict == Kind.INVALID}
        for name in set(self.night.measure_s) - wrong:  # a build that answers wrong records nothing, costs included
            cfg = (self._configs or {}).get(name)
            found = self._store_of(cfg) if cfg is not None else None
            if cfg is not None and found is not None:
                modeled = self.engine_for(cfg).modeled_load(cfg)
                where[name] = (found[0], modeled[0] if modeled is not None else None)
        return out[0], [*out[1], *self.night.record(where, self.pool.load_s if self.pool is not None else {},
                                                     self.settings.sim_time_scale, git_commit(self.settings.rootdir),
                                                     self.settings.build_name, self.answering.times())]

    def benchmarks(self) -> list[dict[str, Any]]:
        """This run's results as pytest-benchmark entries (for its --benchmark-json of a run with its own)."""
        if self.gate is None or not self.gate.verdicts:
            return []
        return list(exports.pytest_benchmark(self.document(self.live()))["benchmarks"])

    def summary(self, tr: Any) -> None:
        """What the pools did, the verdicts, what was written, the outcome last (report/terminal.Summary shows it)."""
        done = self.finished
        if self.view is None or self.outcome is None or done is None:
            return
        took = (dt.datetime.now(dt.UTC) - self.started).total_seconds()
        Summary(self.view, self.outcome, done.changes, self.errors, self.settings.update_baselines,
                self.settings.alpha, show=bool(self.tally.config_tests or self.tally.unfinished),
                not_run=self.night.not_run, unfinished=self.tally.unfinished,
                written=done.written, costs_written=self.night.recorded,
                said=[*(self.context.said if self.context is not None else []), *self.answering.recorded],
                spent=self.night.spent_lines(self.pool.load_s if self.pool is not None else {}, took),
                gpus=describe(self.machine.gpus()), answers=self.answering.lines()).display(tr)
