"""The test-facing API: `bench(...)` and `perf.run / check / check_value / stability`, without pytest.

What fails a test is injected (`fail(message)`, pytest.fail in the plugin), as pytest-benchmark's fixture takes
its warner: this module is usable from any harness and from the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, Protocol

from ..configs import ServerConfig
from ..judge.gate import Checked, PerfGate
from ..judge.provenance import HardwareError, Provenance, args_hash, git_commit, hardware_for
from ..judge.references import GateError
from ..judge.slo import ATTAINMENT, CAPACITY, Attainment, Capacity, Slo, attainment, capacity, needed, requests_of
from ..judge.verdicts import Kind
from ..load import trace
from ..load.types import BenchResult, Workload
from ..servers.builds import DEFAULT_BUILD, Build
from ..servers.builds import describe as describe_build
from ..servers.pool import ServerPool
from ..servers.process import ServerError, ServerHandle
from ..telemetry.nvml import Gpu
from .answering import Answering
from .measurement import Measured, Stability, check_stability, measure


class Fail(Protocol):
    """Ends the test with a message (pytest.fail(msg, pytrace=False) in the plugin)."""

    def __call__(self, message: str) -> NoReturn: ...


@dataclass(frozen=True)
class Recipe:
    """How a scenario was measured (its recipe), so that the config's rounds can measure it again on a new launch."""

    concurrency: int
    num_prompts: int | None
    repeats: int
    kw: dict[str, Any]
    slo: Slo | None = None  # each launch's attainment of it becomes the scenario's slo_attainment


@dataclass
class Pending:
    """A scenario whose series the config's rounds measure again: how, which metrics, everything so far."""

    plan: Recipe
    metrics: list[str] | None
    results: list[BenchResult]
    test: str = ""  # the test that measured it first: its gate item fails on a regression
    measure_s: float = 0.0  # what measuring it once took


# Recording stops at this many launches of a config even if a reference still cannot resolve its tolerance (the
# entry then says what it can find): a night's budget usually stops it first.
RECORDING_CAP = 12


class RoundFailed(Exception):
    """A round could not measure (the server died, requests failed); the message says what."""


def _round_failed(message: str) -> NoReturn:
    raise RoundFailed(message)


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
    pending: dict[str, dict[str, Pending]] = field(default_factory=dict)  # config -> scenario -> its series
    budget: Callable[[str, float], str | None] = lambda config, cost_s: None  # why a round of cost_s may not run
    recording: bool = False  # --update-baselines: rounds until each reference can resolve its tolerance
    said: list[str] = field(default_factory=list)  # lines for the run's summary (rounds not spent, and why)
    answering: Answering | None = None  # the canary and the accuracy set, checked on each launch before its load

    def tag_pending(self, nodeid: str) -> None:
        """The test that measured each pending series first (its gate item fails on a regression)."""
        for pending in self.pending.values():
            for p in pending.values():
                p.test = p.test or nodeid

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
                build=(f"{ident['build']}: {describe_build(ident)}" if ident else "") + server.engine.build_note())
        return self.provenances[key]


def workload(server: ServerHandle, ctx: PerfContext, concurrency: int, num_prompts: int, **kw: Any) -> Workload:
    """A Workload with the run's defaults: the config's (else the engine's) protocol, the stall timeout."""
    kw.setdefault("protocol", server.config.protocol or server.engine.protocol)
    kw.setdefault("stall_timeout_s", ctx.pool.settings.stall_timeout)
    return Workload(concurrency=concurrency, num_prompts=num_prompts, **kw)


def after_failed_run(pool: ServerPool, failed: Measured | Stability) -> None:
    """A load run that failed: a server alive but not answering is stopped as hung; otherwise it may have died."""
    if failed.not_answering:
        aborted = failed.result.aborted if failed.result is not None else None
        pool.notice_hang(str(aborted or "not answering"))
    else:
        pool.notice_death()


def on_clock(scale: float, slo: Slo | None, kw: dict[str, Any], sent: int) -> tuple[Slo | None, dict[str, Any]]:
    """A scenario written in the box's seconds, on a server whose clock runs `scale` times as long (the emulator's
    rehearsal: 0.01): the SLO's limits and a duration scale by it, a request rate by its inverse (a trace's first
    `sent` rows at their own rate where none is asked); the rest stays. TraceError for a trace that cannot be read."""
    if scale == 1.0:
        return slo, kw
    out = dict(kw)
    if out.get("trace") and not out.get("request_rate"):
        # A trace at its own timestamps: at its own mean rate, which the clock then scales like any other.
        rows = trace.load(out["trace"])[:sent]
        out["request_rate"] = trace.native_rate(rows)
    if out.get("request_rate"):
        out["request_rate"] = out["request_rate"] / scale
    if out.get("duration_s"):
        out["duration_s"] = out["duration_s"] * scale
    return (slo.scaled(scale) if slo is not None else None), out


def default_prompts(concurrency: int) -> int:
    """Requests a scenario sends when it names none: four waves, at least eight."""
    return max(8, 4 * concurrency)


def bench(server: ServerHandle, ctx: PerfContext, fail: Fail, concurrency: int = 1, num_prompts: int | None = None,
          **kw: Any) -> BenchResult:
    """One watched measurement; a death, hang or unanswered server fails the test with its report."""
    kw.setdefault("warmup", concurrency)
    try:
        wl = workload(server, ctx, concurrency, num_prompts or default_prompts(concurrency), **kw)
    except ValueError as exc:
        fail(f"bad workload for {server.config.name}: {exc}")
    before = ctx.pool.cotenants()
    m = measure(server, wl, ctx.pool.progress)
    done = getattr(ctx.pool.progress, "done", None)
    if done is not None:
        done()  # the live line gives way to what comes next
    if m.problem is not None:
        after_failed_run(ctx.pool, m)
        fail(m.problem)
    assert m.result is not None
    m.result.cotenants = sorted(set(before) | set(ctx.pool.cotenants()))
    return m.result


def bench_all_answered(server: ServerHandle, ctx: PerfContext, fail: Fail, concurrency: int = 1,
                       num_prompts: int | None = None, max_failed: int = 0, **kw: Any) -> BenchResult:
    """The `bench` fixture: one watched measurement whose failed requests fail the test beyond `max_failed` (a
    result with 5 of 16 requests failed is no measurement of the server), on a launch whose answers held."""
    _answered(ctx, server, ctx.build, fail)
    r = bench(server, ctx, fail, concurrency, num_prompts, **kw)
    if r.failed > max_failed:
        first = f": {r.errors[0]}" if r.errors else ""
        fail(f"{server.config.name}: {r.failed} of {r.workload.num_prompts} requests failed at concurrency "
             f"{concurrency}{first} (bench(..., max_failed=N) allows N)")
    return r


def measure_plan(ctx: PerfContext, server: ServerHandle, build: str, arm: str, plan: Recipe,
                 fail: Fail) -> list[BenchResult]:
    """A scenario's repeats on one launch, each result labelled with the launch, build and A/B arm."""
    launch = launch_of(server, build)
    # Before the launch's first load: does it answer right? (Once a launch; its verdict holds for every result.)
    invalid = _answers_of(ctx, server, launch)
    out = []
    for _ in range(plan.repeats):
        r = bench(server, ctx, fail, plan.concurrency, plan.num_prompts, **plan.kw)
        r.launch, r.build, r.arm, r.invalid = launch, build, arm, invalid
        if plan.slo is not None:
            r.slo = attainment(plan.slo, requests_of(r.records))
            r.metrics[ATTAINMENT] = r.slo.rate
        out.append(r)
    return out


def launch_of(server: ServerHandle, build: str) -> str:
    """The id of a server's launch (build, pid, start): the unit a canary is asked on and launches vary by."""
    return f"{build}:{server.pid}:{server.record.launched_at}"


def _answered(ctx: PerfContext, server: ServerHandle, build: str, fail: Fail) -> None:
    """Where no figure is gated (bench, stability), a launch that answers wrong fails the test before its load."""
    invalid = _answers_of(ctx, server, launch_of(server, build))
    if invalid:
        fail(f"{server.config.name}: {invalid}")


def _answers_of(ctx: PerfContext, server: ServerHandle, launch: str) -> str | None:
    """Why this launch's figures are invalid (its canary or its config's accuracy failed); None when they hold."""
    if ctx.answering is None:
        return None
    try:
        prov = ctx.provenance(server)
    except HardwareError:
        return None  # the check that follows fails the test with the cause
    return ctx.answering.on_launch(server, prov, launch)


def _arms(ab: tuple[str, str] | None, done: int) -> tuple[str, str]:
    """The arm and build of a config's launch number `done` (0-based): ABBA blocks under --glm5-ab."""
    if ab is None:
        return "", ""
    arm = "ABBA"[done % 4]
    return arm, ab[0] if arm == "A" else ab[1]


def rounds(ctx: PerfContext, config: ServerConfig, say: Callable[[str], None]) -> int:
    """After a config's last test: relaunch it and measure every pending scenario again, one launch per round,
    while a series is unresolved (or planned launches remain: --glm5-launches N, an A/B block) and the looks and
    the budget allow; each round re-judges every scenario it measured. Returns the rounds made."""
    pend = ctx.pending.pop(config.name, {})
    if pend and config.name in ctx.pool.failures:
        say(f"{config.name}: no rounds: its server failed earlier; {len(pend)} scenarios keep what the first "
            "launch showed")
        return 0
    gate = ctx.gate
    ab = gate.statistics.ab
    planned = gate.statistics.planned
    looks = gate.per_night()  # nightly: new launches tonight; A/B: ABBA blocks
    # Recording runs to RECORDING_CAP launches unless --glm5-max-repeats bounds it (a GPU check in 10 minutes).
    explicit = gate.statistics.max_repeats is not None
    cap = 4 * looks if ab else (max(looks, RECORDING_CAP) if ctx.recording and not explicit else looks)
    done = 1  # the launch the tests measured on
    while pend and done < max(planned, cap):
        cost = ctx.pool.load_estimate(config.name) + sum(p.measure_s for p in pend.values())
        why_not = ctx.budget(config.name, cost) if done >= planned else None  # planned: charged when it began
        if why_not is not None:
            say(f"{config.name}: no round {done + 1} ({len(pend)} series left unresolved): {why_not}")
            break
        arm, build = _arms(ab, done)
        build = build or ctx.build
        waiting = f"{len(pend)} scenario{'s' if len(pend) > 1 else ''}"
        reason = "planned" if done < planned else (f"{waiting} whose reference cannot resolve its tolerance yet"
                                                   if ctx.recording else f"{waiting} unresolved")
        say(f"{config.name}: round {done + 1} ({reason}): a new launch{f' of build {build}' if ab else ''} "
            f"measures {', '.join(pend)}")
        try:
            server = ctx.server(config, build, fresh=True)
            for p in pend.values():
                p.results += measure_plan(ctx, server, build, arm, p.plan, _round_failed)
        except (ServerError, RoundFailed) as exc:
            say(f"{config.name}: round {done + 1} failed, the series keep what earlier launches showed: {exc}")
            break
        done += 1
        if ab and done % 4:
            continue  # an A/B is judged on whole ABBA blocks
        look_no = done // 4 if ab else done
        prov = ctx.provenance(server)
        for scenario, p in list(pend.items()):
            checked = gate.judge(config.name, scenario, p.results, p.metrics, prov, look_no)
            gate.replace(config.name, scenario, p.results, checked, p.test)
            short = ctx.recording and gate.reference_short(config.name, scenario, p.results, p.metrics, prov)
            if (not (checked.undecided or short) or checked.failures) and done >= planned:
                del pend[scenario]
    return done - 1


class Perf:
    """The `perf` fixture: run scenarios against this test's server and hold them against baselines."""

    def __init__(self, server: ServerHandle, ctx: PerfContext, fail: Fail) -> None:
        self.server = server
        self.ctx = ctx
        self.fail = fail
        self.config = server.config.name
        self.plans: dict[str, Recipe] = {}

    def run(self, scenario: str, concurrency: int, num_prompts: int | None = None, repeats: int | None = None,
            slo: Slo | None = None, **kw: Any) -> list[BenchResult]:
        """Measure a scenario `repeats` times (--glm5-repeats overrides the suite's value) on the config's live
        launch (build A's under --glm5-ab). More launches are rounds of the whole config after its last test.
        With an `slo`, each launch's attainment of it is the scenario's `slo_attainment` (check holds it)."""
        if slo is not None and not isinstance(slo, Slo):
            self.fail(f"{self.config} {scenario}: slo must be a pytest_glm5.Slo (Slo(ttft_ms=2000, tpot_ms=200)), "
                      f"not {type(slo).__name__}")
        sent = num_prompts or default_prompts(concurrency)
        try:
            slo, kw = on_clock(self.server.engine.time_scale, slo, kw, sent)
        except trace.TraceError as exc:
            self.fail(f"{self.config} {scenario}: {exc}")
        if slo is not None and sent < needed(slo.target):
            self.fail(f"{self.config} {scenario}: an SLO at {slo.target * 100:g}% is judged from at least "
                      f"{needed(slo.target)} requests a launch, and this scenario sends {sent}: set num_prompts="
                      f"{needed(slo.target)} or more")
        plan = Recipe(concurrency, num_prompts, self.ctx.repeats or repeats or 1, dict(kw), slo)
        self.plans[scenario] = plan
        st = self.ctx
        ab = st.gate.statistics.ab
        build, arm = (ab[0], "A") if ab else (st.build, "")
        problem = None
        try:
            self.server = st.server(self.server.config, build, fresh=False)
        except ServerError as exc:
            problem = str(exc)
        if problem is not None:
            self.fail(problem)
        return measure_plan(st, self.server, build, arm, plan, self.fail)

    def stability(self, concurrency: int, num_prompts: int, error_budget: int = 0, **kw: Any) -> None:
        """Sustained load; fail with every problem found (death, errors, not ready after, fatal log lines,
        wrong output lengths)."""
        kw.setdefault("warmup", 0)
        _answered(self.ctx, self.server, self.ctx.build, self.fail)  # crash-free and wrong is no pass either
        report = check_stability(self.server, workload(self.server, self.ctx, concurrency, num_prompts, **kw),
                                 error_budget)
        if not report.ok:
            after_failed_run(self.ctx.pool, report)
            self.fail(f"{self.config} is not stable under load at concurrency {concurrency}:\n"
                      + "\n".join(report.problems))

    def results_of(self, scenario: str) -> list[BenchResult]:
        """Results of a scenario checked earlier in this run for this config (empty if none)."""
        return list(self.ctx.gate.results.get((self.config, scenario), []))

    def _judged(self, judge: Callable[[Provenance], Checked]) -> Checked:
        problem = None
        try:
            checked = judge(self.ctx.provenance(self.server))
        except (GateError, HardwareError) as exc:
            problem = str(exc)  # outside the except block: the report shows the cause alone, no chain
        if problem is not None:
            self.fail(problem)
        return checked

    def check(self, results: BenchResult | list[BenchResult], scenario: str,
              metrics: list[str] | None = None) -> Checked:
        """Hold each metric against its floor or ceiling (statistically where its reference has launches); fail with
        one line per failure that needs no family decision (failed requests, a provisional bound's regression).
        A series that one launch cannot resolve, and every series under --glm5-launches N or --glm5-ab, is measured
        again in the config's rounds after its last test; statistical regressions are decided when the run ends."""
        rs = results if isinstance(results, list) else [results]
        gate = self.ctx.gate
        # A ladder's top points may miss the SLO by design (that is where capacity ends): a miss is no failure of
        # its own; the attainment is held as a floor and the line says what this launch's requests did.
        said = rs[-1].slo.line() if rs and rs[-1].slo is not None else ""
        ab = gate.statistics.ab
        if ab:
            checked = Checked([], [], undecided=True)  # build B has not been measured yet: its rounds will
        else:
            checked = self._judged(partial(self._judge_once, scenario, list(rs), metrics, 1))
        for v in checked.verdicts:
            if v.metric == ATTAINMENT and said and said not in v.note:
                v.note = f"{v.note}; {said}" if v.note else said
        gate.record(self.config, scenario, rs, checked)
        wrong = next((r.invalid for r in rs if r.invalid), None)
        if wrong:
            self.fail(f"{self.config} {scenario}: {wrong}")
        held = next((v.note for v in checked.verdicts if v.verdict in (Kind.WORKLOAD_DRIFT,
                                                                           Kind.WORKLOAD_NOT_HELD)), None)
        if held:  # another workload than the one asked or recorded: no round can make it comparable
            self.fail(f"{self.config} {scenario}: {held}")
        if checked.failures:
            self.fail("\n".join(checked.failures))
        plan = self.plans.get(scenario)
        ctx = self.ctx
        wants_rounds = checked.undecided or gate.statistics.launches > 1 or ab or ctx.recording
        if wants_rounds and ctx.recording and gate.statistics.launches <= 1 and not ab and gate.book.reference_full(
                self.config, scenario, metrics, ctx.provenance(self.server), RECORDING_CAP):
            # Recording: no launch of this run can record a larger reference, so none is spent on it.
            wants_rounds = False
            ctx.said.append(f"{self.config} {scenario}: no rounds: its references already hold {RECORDING_CAP} "
                            "launches (the cap), so another launch tonight cannot change what is recorded")
        if plan is not None and wants_rounds and not self.ctx.pool.settings.external_url:
            took = sum(r.metrics.get("duration", 0.0) for r in rs)
            self.ctx.pending.setdefault(self.config, {})[scenario] = Pending(plan, metrics, list(rs),
                                                                                    measure_s=took)
        return checked

    def _judge_once(self, scenario: str, rs: list[BenchResult], metrics: list[str] | None, look: int,
                    prov: Provenance) -> Checked:
        return self.ctx.gate.judge(self.config, scenario, rs, metrics, prov, look)

    def capacity(self, name: str, scenarios: Sequence[str]) -> Capacity:
        """Capacity at the SLO of a ladder measured earlier in this test (scenarios run with the same `slo`): the
        largest concurrency within it, as a bracket, held as the floor `slo_capacity` of `name`. Every launch's
        requests of a point count (the ladder the night measured; no extra launch)."""
        ladder: dict[int, Attainment] = {}
        slos = set()
        for scenario in scenarios:
            rs = self.results_of(scenario)
            if not rs or any(r.slo is None for r in rs):
                self.fail(f"{self.config} {name}: {scenario} was not measured with an slo in this run "
                          "(perf.run(..., slo=SLO) before perf.capacity)")
            slos.add(rs[0].slo.slo)
            ladder[rs[0].workload.concurrency] = attainment(rs[0].slo.slo,
                                                            requests_of([x for r in rs for x in r.records]))
        if len(slos) > 1:
            self.fail(f"{self.config} {name}: the ladder's scenarios were measured under {len(slos)} different SLOs")
        cap = capacity(ladder)
        if cap.feasible is None:
            self.fail(f"{self.config} {name}: {cap.line()}")
        checked = self.check_value(name, CAPACITY, [float(cap.feasible or 0)], [(s, ATTAINMENT) for s in scenarios])
        for v in checked.verdicts:
            v.note = f"{v.note}; {cap.line()}" if v.note else cap.line()
        return cap

    def check_value(self, scenario: str, metric: str, samples: list[float],
                    inputs: Sequence[tuple[str, str]] = ()) -> Checked:
        """Hold a derived metric (e.g. scaling_2x) against its bound (not judged in an A/B run: its parts mix
        builds). `inputs`: the (scenario, metric) series it is computed from; where one was not judged (client- or
        emulator-bound), neither is this."""
        gate = self.ctx.gate
        if gate.statistics.ab:
            return Checked([], [])
        launch = f"derived:{self.server.pid}"
        checked = self._judged(lambda prov: gate.judge_values(self.config, scenario, metric, samples, prov, launch,
                                                              inputs))
        gate.record(self.config, scenario, [], checked)
        if checked.failures:
            self.fail("\n".join(checked.failures))
        return checked
