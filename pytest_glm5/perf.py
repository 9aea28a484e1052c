"""The test-facing API: `bench(...)` and `perf.run / check / check_value / stability`, without pytest.

What fails a test is injected (`fail(message)`, pytest.fail in the plugin), as pytest-benchmark's fixture takes
its warner: this module is usable from any harness and from the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, Protocol

from .configs import ServerConfig
from .judge.gate import Checked, GateError, PerfGate
from .judge.provenance import HardwareError, Provenance, args_hash, git_commit, hardware_for
from .loadgen import BenchResult, Workload
from .measurement import Measured, Stability, check_stability, measure
from .servers.builds import DEFAULT_BUILD, Build
from .servers.builds import describe as describe_build
from .servers.pool import ServerPool
from .servers.process import ServerError, ServerHandle
from .telemetry import Gpu


class Fail(Protocol):
    """Ends the test with a message (pytest.fail(msg, pytrace=False) in the plugin)."""

    def __call__(self, message: str) -> NoReturn: ...


@dataclass
class PerfContext:
    """What every test of one run shares: the pool, the gate, and how provenance is found."""

    pool: ServerPool
    gate: PerfGate
    root: Path
    hardware: str | None = None  # --glm5-hardware
    repeats: int | None = None  # --glm5-repeats: overrides each scenario's own
    gpus: Callable[[], list[Gpu] | None] = lambda: None
    nvml_key: Callable[[], str | None] = lambda: None
    provenances: dict[tuple[str, int | None], Provenance] = field(default_factory=dict)
    commit: str | None = None
    builds: dict[str, Build] = field(default_factory=dict)  # the configs file's [build.NAME] tables
    build: str = DEFAULT_BUILD  # --glm5-build
    launches: int = 1  # --glm5-launches: server launches per scenario

    def server(self, config: ServerConfig, build: str, fresh: bool) -> ServerHandle:
        """This config's server on this build; `fresh`: a new launch."""
        return self.pool.get(config, self.builds.get(build), fresh=fresh)

    def provenance(self, server: ServerHandle) -> Provenance:
        """Once per server (the commit once per run): a check needs no HTTP call or git subprocess."""
        key = (server.url, server.pid)
        if key not in self.provenances:
            info = server.server_info()
            hw = hardware_for(info, self.hardware, self.nvml_key())
            if self.commit is None:
                self.commit = git_commit(self.root)
            gpus = self.gpus() if not info.get("sim") else None
            version = server.record.engine_version or info.get("version", "?")
            ident = server.engine.build_identity
            self.provenances[key] = Provenance(
                hardware=hw, model=self.pool.model_for(server.config), commit=self.commit,
                engine=f"{server.engine.name} {version}", server_args=args_hash(info),
                driver=gpus[0].driver if gpus else "",
                build=f"{ident['build']}: {describe_build(ident)}" if ident else "")
        return self.provenances[key]


def workload(server: ServerHandle, run: PerfContext, concurrency: int, num_prompts: int, **kw: Any) -> Workload:
    """A Workload with the run's defaults: the config's (else the engine's) protocol, the stall timeout."""
    kw.setdefault("protocol", server.config.protocol or server.engine.protocol)
    kw.setdefault("stall_timeout_s", run.pool.settings.stall_timeout)
    return Workload(concurrency=concurrency, num_prompts=num_prompts, **kw)


def after_failed_run(pool: ServerPool, failed: Measured | Stability) -> None:
    """A load run that failed: a server alive but not answering is stopped as hung; otherwise it may have died."""
    if failed.not_answering:
        aborted = failed.result.aborted if failed.result is not None else None
        pool.notice_hang(str(aborted or "not answering"))
    else:
        pool.notice_death()


def bench(server: ServerHandle, run: PerfContext, fail: Fail, concurrency: int = 1, num_prompts: int | None = None,
          **kw: Any) -> BenchResult:
    """One watched measurement; a death, hang or unanswered server fails the test with its report."""
    kw.setdefault("warmup", concurrency)
    try:
        wl = workload(server, run, concurrency, num_prompts or max(8, 4 * concurrency), **kw)
    except ValueError as exc:
        fail(f"bad workload for {server.config.name}: {exc}")
    before = run.pool.cotenants()
    m = measure(server, wl, run.pool.progress)
    done = getattr(run.pool.progress, "done", None)
    if done is not None:
        done()  # the live line gives way to what comes next
    if m.problem is not None:
        after_failed_run(run.pool, m)
        fail(m.problem)
    assert m.result is not None
    m.result.cotenants = sorted(set(before) | set(run.pool.cotenants()))
    return m.result


@dataclass(frozen=True)
class Plan:
    """How a scenario was measured, so that the gate can add launches of it."""

    concurrency: int
    num_prompts: int | None
    repeats: int
    kw: dict[str, Any]


class Perf:
    """The `perf` fixture: run scenarios against this test's server and hold them against baselines."""

    def __init__(self, server: ServerHandle, run: PerfContext, fail: Fail) -> None:
        self.server = server
        self.run_state = run
        self.fail = fail
        self.config = server.config.name
        self.plans: dict[str, Plan] = {}

    def run(self, scenario: str, concurrency: int, num_prompts: int | None = None, repeats: int | None = None,
            **kw: Any) -> list[BenchResult]:
        """Measure a scenario `repeats` times (--glm5-repeats overrides the suite's value) on each of the run's
        launches: --glm5-launches N, or an ABBA block of two launches per build under --glm5-ab."""
        plan = Plan(concurrency, num_prompts, self.run_state.repeats or repeats or 1, dict(kw))
        self.plans[scenario] = plan
        return self._measure(plan, first=True)

    def _order(self, first: bool) -> list[tuple[str, bool, str]]:
        """(build, fresh launch, A/B arm) per launch to measure on."""
        st = self.run_state
        ab = st.gate.statistics.ab
        if ab:
            arms = ["A", "B", "B", "A"]
            block = [ab[0] if arm == "A" else ab[1] for arm in arms]
            # Every arm visit is its own launch, except that the block may open on a live server of build A that
            # no visit of this scenario used yet.
            reuse_first = first and st.pool.current_build == ab[0] and st.pool.current is not None \
                and st.pool.current.config.name == self.config
            return [(b, not (i == 0 and reuse_first), arms[i]) for i, b in enumerate(block)]
        n = st.launches if first else 1
        return [(st.build, not (first and i == 0), "") for i in range(n)]

    def _measure(self, plan: Plan, first: bool) -> list[BenchResult]:
        out: list[BenchResult] = []
        for build, fresh, arm in self._order(first):
            problem = None
            try:
                server = self.run_state.server(self.server.config, build, fresh)
            except ServerError as exc:
                problem = str(exc)
            if problem is not None:
                self.fail(problem)
            self.server = server
            launch = f"{build}:{server.pid}:{server.record.launched_at}"
            for _ in range(plan.repeats):
                r = bench(server, self.run_state, self.fail, plan.concurrency, plan.num_prompts, **plan.kw)
                r.launch, r.build, r.arm = launch, build, arm
                out.append(r)
        return out

    def stability(self, concurrency: int, num_prompts: int, error_budget: int = 0, **kw: Any) -> None:
        """Sustained load; fail with every problem found (death, errors, not ready after, fatal log lines,
        wrong output lengths)."""
        kw.setdefault("warmup", 0)
        report = check_stability(self.server, workload(self.server, self.run_state, concurrency, num_prompts, **kw),
                                 error_budget)
        if not report.ok:
            after_failed_run(self.run_state.pool, report)
            self.fail(f"{self.config} is not stable under load at concurrency {concurrency}:\n"
                      + "\n".join(report.problems))

    def results_of(self, scenario: str) -> list[BenchResult]:
        """Results of a scenario checked earlier in this run for this config (empty if none)."""
        return list(self.run_state.gate.results.get((self.config, scenario), []))

    def _judged(self, judge: Callable[[Provenance], Checked]) -> Checked:
        problem = None
        try:
            checked = judge(self.run_state.provenance(self.server))
        except (GateError, HardwareError) as exc:
            problem = str(exc)  # outside the except block: the report shows the cause alone, no chain
        if problem is not None:
            self.fail(problem)
        return checked

    def check(self, results: BenchResult | list[BenchResult], scenario: str,
              metrics: list[str] | None = None) -> Checked:
        """Hold each metric against its floor or ceiling (statistically where its reference has launches), adding
        launches while a series is noisy and looks remain; fail with one line per failure that needs no family
        decision (failed requests, a provisional bound's regression). Statistical regressions are decided over the
        whole run when it ends."""
        rs = results if isinstance(results, list) else [results]
        gate = self.run_state.gate
        look = 1
        while True:
            checked = self._judged(partial(self._judge_once, scenario, list(rs), metrics, look))
            if checked.failures or not checked.undecided or scenario not in self.plans:
                break
            look += 1
            rs = rs + self._measure(self.plans[scenario], first=False)
        gate.record(self.config, scenario, rs, checked)
        if checked.failures:
            self.fail("\n".join(checked.failures))
        return checked

    def _judge_once(self, scenario: str, rs: list[BenchResult], metrics: list[str] | None, look: int,
                    prov: Provenance) -> Checked:
        return self.run_state.gate.judge(self.config, scenario, rs, metrics, prov, look)

    def check_value(self, scenario: str, metric: str, samples: list[float]) -> Checked:
        """Hold a derived metric (e.g. scaling_2x) against its bound (not judged in an A/B run: its parts mix
        builds)."""
        gate = self.run_state.gate
        if gate.statistics.ab:
            return Checked([], [])
        launch = f"derived:{self.server.pid}"
        checked = self._judged(lambda prov: gate.judge_values(self.config, scenario, metric, samples, prov, launch))
        gate.record(self.config, scenario, [], checked)
        if checked.failures:
            self.fail("\n".join(checked.failures))
        return checked
