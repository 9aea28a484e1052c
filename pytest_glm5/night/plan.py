"""What a run costs on the box, in one place: each config's load and measuring time, the plan printed before the
first launch (`--glm5-plan` prints only that), the budget that bounds a night (`--glm5-budget 8h`), the night's
bookkeeping the session keeps (Night: admission, rounds, the price of each unresolved series, the costs recorded with
the baselines), and what resolving a series costs (`glm5 plan`).

A launch is the unit of cost: a GLM-5-NVFP4 load takes many minutes (the brief budgets 10-50; SGLang's own CI allows
3,000 s on Blackwell). Each config's first launch measures all its tests; rounds (more launches of the whole config)
are what resolving a series, recording a reference or an A/B block costs.

    >>> p = Plan([ConfigCost("tp8", 7, 1800.0, 600.0, "assumed", 30.0, 1055.0)], budget_s=8 * 3600, rounds=4)
    >>> p.lines()[-1]
    '1 config: first launches 58 min; with up to 4 rounds each 3.7 h; budget 8.0 h: every round fits'

The answers a launch is checked on are priced too: the canary on every launch (`checks`), the accuracy set once a
night on the config's first launch (`accuracy`), as this box recorded them, else assumed from the campaign's speeds.
    >>> price(0.02, 0.05, 8, 2700.0)
    'resolving 5% at CV 2.0% against 8 reference launches: about 2 launches, 1.5 h more on this box (45 min a launch)'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..judge.baselines import BaselineError, BaselineStore, write_costs
from ..judge.decide import to_resolve
from ..judge.gate import Statistics
from ..judge.stats import detectable_drop
from ..judge.verdicts import Kind, Verdict, read_report, verdicts_of
from ..metrics import log_cv
from ..settings import Settings
from ..words import counted

# A GLM-5-NVFP4 launch on 8x SM120 when this box has measured none: the middle of the brief's 10-50 minutes.
ASSUMED_LOAD_S = 1800.0
ASSUMED_MEASURE_S_PER_TEST = 120.0  # the suite's scenarios run 1-3 minutes each at the campaign's speeds
# The canary's 16 prompts of 32 tokens at once: about 4 s at the campaign's ~8 tok/s a stream; 30 s is the issue's
# bound per launch, assumed until a launch here times it.
ASSUMED_CANARY_S = 30.0
# A worked GSM8K answer is about 200 tokens, 32 questions at a time at ~8 tok/s a stream: 0.8 s a question (1,319
# questions: about 18 minutes, half a launch), assumed until a launch here times it.
ASSUMED_S_PER_QUESTION = 0.8


def hours(seconds: float) -> str:
    """`0.7 h`, `12 min`, `40 s`: the unit a night is read in."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


@dataclass(frozen=True)
class ConfigCost:
    """One config's launch on this box: its load, the time its tests take on one launch, and where both came from."""

    config: str
    tests: int
    load_s: float
    measure_s: float
    source: str  # `measured 2026-12-03 (3 launches)`, `emulator profile glm5-sm120`, `assumed`
    canary_s: float = 0.0  # the canary, before every launch's load
    accuracy_s: float = 0.0  # the accuracy set, once a night on the config's first launch

    @property
    def launch_s(self) -> float:
        """One launch of the config, loaded, its canary asked and its tests measured."""
        return self.load_s + self.canary_s + self.measure_s

    def night_s(self, launches: int) -> float:
        """This many launches of the config in one night: each launch, and the accuracy set once."""
        return self.launch_s * launches + (self.accuracy_s if launches else 0.0)


@dataclass
class Plan:
    """The run's configs with their costs, the rounds each may get, and the budget."""

    costs: list[ConfigCost]
    budget_s: float | None = None
    planned: int = 1  # launches every config gets (--glm5-launches N; 4 for an A/B block)
    rounds: int = 0  # extra launches a config may get while a series is unresolved (looks beyond the planned)
    cover: int | None = None  # a schedule spreads the configs over this many nights (night/schedule.py)

    @property
    def first_s(self) -> float:
        """Every config's planned launches."""
        return sum(c.night_s(self.planned) for c in self.costs)

    @property
    def most_s(self) -> float:
        """Every config's planned launches and every round it may get."""
        return sum(c.night_s(self.planned + self.rounds) for c in self.costs)

    def lines(self) -> list[str]:
        """The table and the verdict on the budget."""
        out = [f"{'config':<18} {'tests':>5} {'load':>8} {'canary':>8} {'measure':>8} {'launch':>8} {'accuracy':>8}"
               "  source"]
        for c in self.costs:
            out.append(f"{c.config:<18} {c.tests:>5} {hours(c.load_s):>8} {hours(c.canary_s):>8} "
                       f"{hours(c.measure_s):>8} {hours(c.launch_s):>8} {hours(c.accuracy_s):>8}  {c.source}")
        n = len(self.costs)
        planned = f"first launches {hours(self.first_s)}" if self.planned == 1 else \
            f"{self.planned} planned launches each {hours(self.first_s)}"
        tail = f"{counted(n, 'config')}: {planned}; with up to {self.rounds} rounds each {hours(self.most_s)}"
        if self.budget_s is None:
            return [*out, tail + "; no budget (--glm5-budget 8h bounds the run)"]
        if self.first_s > self.budget_s and self.cover:
            return [*out, tail + f"; budget {hours(self.budget_s)}: more than a night, so the schedule below runs "
                                 f"tonight's configs and judges every config at least every {self.cover} nights"]
        if self.first_s > self.budget_s:
            fit, spent = [], 0.0
            for c in self.costs:
                if spent + c.night_s(self.planned) > self.budget_s:
                    break
                fit.append(c.config)
                spent += c.night_s(self.planned)
            left = [c.config for c in self.costs if c.config not in fit]
            return [*out, tail + f"; budget {hours(self.budget_s)}: NOT ENOUGH for the planned launches: "
                                 f"{counted(len(fit), 'config')} fit, {', '.join(left)} would not run (raise the "
                                 "budget, split the suite with --glm5-shard, or deselect configs)"]
        if self.most_s <= self.budget_s:
            return [*out, tail + f"; budget {hours(self.budget_s)}: every round fits"]
        spare = self.budget_s - self.first_s
        mean = sum(c.launch_s for c in self.costs) / max(n, 1)
        return [*out, tail + f"; budget {hours(self.budget_s)}: about {int(spare // mean)} rounds fit after the "
                             "planned launches (they go to unresolved series in run order)"]


@dataclass
class Budget:
    """Bounds a run's launches, priced as the plan prices them (what this box recorded, else what the engine
    models): a config's launches start only if they fit, and a round runs only if it fits after keeping the first
    launches of the configs not yet started. The emulator's launches are priced in the time of the box it stands
    for, so a rehearsal with --glm5-budget 8h does what the night would."""

    limit_s: float
    first: Mapping[str, float]  # config -> its planned launches' cost
    charged: float = 0.0
    begun: set[str] = field(default_factory=set)
    prepaid: dict[str, float] = field(default_factory=dict)  # config -> rounds the schedule gave it, charged at begin
    # Configs the schedule added only because they fit (judged recently, nothing open): a round of what tonight
    # found may take their time; they run on a later night.
    optional: set[str] = field(default_factory=set)
    # The schedule's lead (references, suspects, configs waited twice the cover): a pressing drop's round keeps
    # their time only; None without a schedule (every config runs tonight or on no night).
    lead: set[str] | None = None
    yielded: set[str] = field(default_factory=set)  # configs a pressing round's time may leave out tonight

    def begin(self, config: str) -> str | None:
        """Before a config's first launch: why it may not start (None: it may, and its launches are charged)."""
        if config in self.begun:
            return None
        for done in [n for n in self.prepaid if n != config and n in self.begun]:
            self.charged -= self.prepaid.pop(done)  # a config before it left launches it was given unspent
        cost = self.first.get(config, 0.0)
        if self.charged + cost > self.limit_s:
            gave = " (tonight's rounds took its time; the schedule runs it on a later night)" \
                if config in self.optional else " (a pressing drop's rounds took its time; the schedule runs it " \
                "on a later night)" if config in self.yielded else ""
            return (f"budget {hours(self.limit_s)}: {hours(self.charged)} planned so far, its launches need about "
                    f"{hours(cost)}; not run{gave}")
        self.begun.add(config)
        self.charged += cost
        return None

    def round(self, config: str, cost_s: float, pressing: bool = False) -> str | None:
        """Before a round: why it may not run (None: it may, and it is charged). A `pressing` one keeps only the
        time of the schedule's lead among the configs not yet run."""
        if config in self.begun and self.prepaid.get(config, 0.0) >= cost_s * 0.999:
            self.prepaid[config] -= cost_s  # the schedule gave it these launches: charged with its first
            return None
        waiting = [name for name in self.first if name not in self.begun and name != config
                   and name not in self.optional]
        gives = [name for name in waiting if name not in self.lead] if pressing and self.lead is not None else []
        keep = sum(self.first[name] for name in waiting if name not in gives)
        if self.charged + cost_s + keep > self.limit_s:
            return (f"budget {hours(self.limit_s)}: {hours(self.charged)} spent, a round costs about {hours(cost_s)}"
                    + (f" and {hours(keep)} is kept for the configs not yet run" if keep else ""))
        if self.charged + cost_s + keep + sum(self.first[name] for name in gives) > self.limit_s:
            self.yielded.update(gives)
        self.charged += cost_s
        return None


@dataclass(frozen=True)
class Checks:
    """The answer checks a run asks of each launch: the canary (every launch) and the accuracy set's size (asked on a
    config's first launch of the night; 0: none)."""

    canary: bool = True
    questions: int = 0


def config_cost(name: str, tests: int, stored: Mapping[str, Any] | None, modeled: tuple[float, str] | None,
                checks: Checks = Checks(canary=False)) -> ConfigCost:
    """What one launch of a config, measuring `tests` tests, costs on this box: as its baselines file recorded it,
    else the load its engine models (the emulator's box), else assumed; with the answer checks this run asks."""
    got = stored or {}
    canary = float(got.get("canary_s", ASSUMED_CANARY_S)) if checks.canary else 0.0
    per_question = float(got["accuracy_s"]) / int(got["questions"]) if got.get("questions") else \
        ASSUMED_S_PER_QUESTION
    accuracy = per_question * checks.questions
    assumed = [what for what, known in (("canary", "canary_s" in got or not checks.canary),
                                        ("accuracy", "questions" in got or not checks.questions)) if not known]
    also = f"; {' and '.join(assumed)} assumed" if assumed else ""
    if got.get("tests"):
        per_test = float(got.get("measure_s", 0.0)) / int(got["tests"])
        return ConfigCost(name, tests, float(got.get("load_s", 0.0)), per_test * tests,
                          str(got.get("source") or f"recorded {got.get('updated', '')}") + also, canary, accuracy)
    load, source = modeled if modeled is not None else (ASSUMED_LOAD_S, "assumed (none recorded here)")
    return ConfigCost(name, tests, load, ASSUMED_MEASURE_S_PER_TEST * tests,
                      f"load {source}, {hours(ASSUMED_MEASURE_S_PER_TEST)} a test assumed{also}", canary, accuracy)


class Picked(Protocol):
    """A schedule's pick of tonight's configs (night/schedule.py Tonight), as the night reads it."""

    run: list[str]
    later: dict[str, str]
    cover: int
    extra: dict[str, int]
    optional: list[str]
    standby: list[str]
    lead: list[str]


@dataclass
class Night:
    """The night's costs as a run goes: its plan and budget, which configs the budget left out, what each config's
    first launch measured, the price of each unresolved series, and the costs to record with the baselines. The
    session hands it values (costs, times, loads) and reads its answers."""

    budget_s: float | None
    planned: int  # launches every config gets (--glm5-launches N; 4 for an A/B block)
    rounds: int  # extra launches a config may get
    plan: Plan | None = None
    budget: Budget | None = None
    started: dict[str, float] = field(default_factory=dict)  # config -> when its first test got its server
    measure_s: dict[str, float] = field(default_factory=dict)  # config -> what its tests took on its first launch
    tests_run: dict[str, int] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=dict)  # config -> why the budget left it out
    recorded: dict[str, str] = field(default_factory=dict)  # config -> the launch cost --update-baselines wrote
    # Configs some of whose tests this run left out (-k, -m): what their launch measured is a part's cost, no launch's
    partial: set[str] = field(default_factory=set)
    history: str | None = None  # --glm5-history: where earlier nights' launches carry from (judge/carry.py)
    schedule: dict[str, Any] = field(default_factory=dict)  # tonight's pick, when the suite needs more than a night

    @classmethod
    def from_settings(cls, s: Settings) -> Night:
        """The launches and rounds the settings give each config."""
        st = Statistics.from_settings(s)  # the one launch count rule
        return cls(s.budget, st.planned, max(0, st.most - st.planned), history=s.history)

    def carries(self) -> str:
        """The plan's word on earlier nights: whether their launches carry into tonight's tests."""
        if self.history is None:
            return ("no history (--glm5-history DIR): nothing carries from earlier nights; each series is judged on "
                    "tonight's launches alone")
        return (f"history {self.history}: launches of earlier nights with the same build, workload and reference "
                "join tonight's in one test; what they decided stands until the build changes")

    def make_plan(self, costs: list[ConfigCost]) -> Plan:
        """The plan of these configs' launches, and the budget that holds the run to it."""
        self.plan = Plan(costs, self.budget_s, self.planned, self.rounds)
        if self.budget_s is not None:
            self.budget = Budget(self.budget_s, {c.config: c.night_s(self.planned) for c in costs})
        return self.plan

    def tonight(self, pick: Picked, tests: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """The schedule's pick (night/schedule.py Tonight): only its `run` is charged to the budget, each with the
        launches beyond the planned it was given (`extra`: for what it left open; its rounds draw on them); the rest
        are not run, and say when they will be; `optional` ones give their time to rounds of what tonight finds.
        Returns the skip reason of each test of theirs (`tests`: config -> test ids)."""
        run, later, cover, extra, optional = pick.run, pick.later, pick.cover, dict(pick.extra), pick.optional
        if self.plan is not None:
            self.plan.cover = cover
        self.schedule = {"tonight": list(run), "later": dict(later), "cover": cover, "extra": extra,
                         "optional": list(optional), "standby": list(pick.standby)}
        if self.budget is not None:
            self.budget.first = {k: v for k, v in self.budget.first.items() if k in run}
            self.budget.optional = set(optional)
            self.budget.lead = set(pick.lead)
            for name, more in extra.items():
                each = self.cost(name) or 0.0
                self.budget.first = {**self.budget.first, name: self.budget.first.get(name, 0.0) + more * each}
                self.budget.prepaid[name] = more * each
        self.not_run.update({name: f"not tonight: {why}" for name, why in later.items()})
        return {test: f"{name}: {self.not_run[name]}" for name in later for test in tests.get(name, ())}

    def meta(self) -> dict[str, Any]:
        """What the run document keeps of the night: the configs not run and why, the schedule, the budget."""
        return {"not_run": self.not_run, "schedule": self.schedule or None, "launched": sorted(self.tests_run),
                "budget_s": self.budget.limit_s if self.budget is not None else None,
                "charged_s": self.budget.charged if self.budget is not None else None}

    def cost(self, config: str) -> float | None:
        """One launch of the config as the plan prices it (None: not planned)."""
        return next((c.launch_s for c in (self.plan.costs if self.plan else []) if c.config == config), None)

    def begin(self, config: str, now: float) -> str | None:
        """A test of the config wants its server: why the budget will not start it (None: it may)."""
        why_not = self.budget.begin(config) if self.budget is not None else None
        if why_not is not None:
            self.not_run[config] = f"{why_not} (--glm5-budget)"
            return self.not_run[config]
        self.tests_run[config] = self.tests_run.get(config, 0) + 1
        self.started.setdefault(config, now)
        return None

    def first_launch_done(self, config: str, now: float) -> None:
        """The config's last test on its first launch ended: what measuring it took."""
        if config in self.started and config not in self.measure_s:
            self.measure_s[config] = now - self.started[config]

    def round_allowed(self, config: str, measured_s: float, modeled: bool, pressing: bool = False) -> str | None:
        """Why a round of this config may not run (None: it may): priced by the plan where the engine models its box
        (the emulator), else by what this run measured; `pressing`: a drop its config-level test already finds
        (judge/suspects.pressing), whose round may take the time of configs merely due tonight."""
        if self.budget is None:
            return None
        planned = self.cost(config)
        return self.budget.round(config, planned if modeled and planned is not None else measured_s, pressing)

    def price(self, verdicts: Sequence[Verdict]) -> None:
        """Each unresolved series' advice in time on this box: the launches its line says to add, at its config's
        launch cost in the plan (`about 4 more new launches would resolve it (80% power): 3.2 h on this box`)."""
        for v in verdicts:
            each, more = self.cost(v.config), v.stat.get("to_add")
            if v.verdict != Kind.UNRESOLVED or each is None or more is None or "on this box" in str(v.note):
                continue
            v.note = f"{v.note}: {hours(more * each)} on this box ({hours(each)} a launch, the plan's price)"

    def left_out(self, configs: Sequence[str | None]) -> None:
        """Tests of these configs were deselected: a launch of theirs tonight measures part of their tests."""
        self.partial.update(c for c in configs if c is not None)

    def to_record(self, loads: Mapping[str, list[float]], modeled: Mapping[str, float | None], scale: float,
                  today: str, provenance: Mapping[str, Any],
                  checks: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, dict[str, Any]]:
        """What a launch of each config measured here cost, for the plans of later runs, with its provenance. The
        emulator's are in model time (its modeled load, its measuring divided by the time scale): a plan of the
        rehearsal is a plan of the real box. `checks`: config -> the answer checks' seconds (`canary_s` a launch,
        `accuracy_s` over `questions`, `first_s` on its first launch), which its first launch's measuring held."""
        out: dict[str, dict[str, Any]] = {}
        for name, measured in self.measure_s.items():
            took = loads.get(name, [])
            if not took or not self.tests_run.get(name) or name in self.partial:
                continue
            model = modeled.get(name)
            per = scale if model is not None else 1.0
            load = model if model is not None else sorted(took)[len(took) // 2]
            timed = (checks or {}).get(name) or {}
            measure = max(0.0, measured - took[0] - float(timed.get("first_s", 0.0))) / per
            source = (f"rehearsal {today}: modeled load, measuring in model time" if model is not None else
                      f"measured {today} over {len(took)} launches")
            out[name] = {"load_s": round(load, 1), "measure_s": round(measure, 1), "tests": self.tests_run[name],
                         "launches": len(took), "source": source, "provenance": dict(provenance)}
            if "canary_s" in timed:
                out[name]["canary_s"] = round(float(timed["canary_s"]) / per, 1)
            if timed.get("questions"):
                out[name] |= {"accuracy_s": round(float(timed["accuracy_s"]) / per, 1),
                              "questions": int(timed["questions"])}
        return out

    def record(self, where: Mapping[str, tuple[Path, float | None]], loads: Mapping[str, list[float]], scale: float,
               commit: str, build: str, checks: Mapping[str, Mapping[str, float]] | None = None) -> list[str]:
        """Write what each config's launch cost into its baselines file (`where`: config -> the file and the load
        its engine models, None for a real one; `checks` as to_record takes them); returns the errors, one line
        each."""
        errors = []
        for path in dict.fromkeys(p for p, _ in where.values()):
            mine = {n: m for n, (p, m) in where.items() if p == path}
            provenance = {"hardware": path.parent.name, "commit": commit, "build": build}
            costs = {n: c for n, c in self.to_record(loads, mine, scale, dt.date.today().isoformat(),
                                                     provenance, checks).items() if n in mine}
            try:
                write_costs(path, costs)
            except (OSError, BaselineError) as exc:
                errors.append(f"cannot record launch costs in {path}: {exc}")
                continue
            for n, c in costs.items():
                asked = f", canary {c['canary_s']:,.0f} s a launch" if "canary_s" in c else ""
                asked += f", accuracy {c['accuracy_s']:,.0f} s over {c['questions']} questions" if "questions" in c \
                    else ""
                self.recorded[n] = (f"load {c['load_s']:,.0f} s, measuring {c['measure_s']:,.0f} s over {c['tests']} "
                                    f"tests{asked}")
        for n in sorted(self.partial & set(self.measure_s) & set(where)):
            self.recorded[n] = "not recorded: this run left out some of its tests (-k, -m), and a part is no launch"
        return errors

    def spent_lines(self, loads: Mapping[str, list[float]], took_s: float) -> list[str]:
        """Launches and time against the plan: `launches: tp8 5 (1 + 4 rounds), ep8 1; 6 launches in 0.4 h of the
        planned 0.2 h (budget 8 h)`."""
        if not loads or self.plan is None:
            return []
        planned = self.plan.planned
        each = [f"{c} {len(t)}" + (f" ({planned} + {len(t) - planned} rounds)" if len(t) > planned else "")
                for c, t in loads.items()]
        budget = f"; {hours(self.budget.charged)} of the budget's {hours(self.budget.limit_s)} as the plan prices " \
                 "them" if self.budget is not None else ""
        return [f"launches: {', '.join(each)}; {sum(len(t) for t in loads.values())} launches in "
                f"{hours(took_s)}{budget}"]


def _smallest_reference(cv: float, tolerance: float) -> int:
    """Reference launches after which some count of new launches resolves the tolerance."""
    for n_ref in range(2, 200):
        if to_resolve(cv, tolerance, n_ref) is not None:
            return n_ref
    return 200


def price(cv: float, tolerance: float, n_ref: int | None, launch_s: float, done: int = 0) -> str:
    """One line: the launches (per arm for an A/B: n_ref None) that resolve `tolerance` at this CV, and their time."""
    against = f"against {n_ref} reference launches" if n_ref is not None else "in an A/B (per arm)"
    head = f"resolving {tolerance * 100:g}% at CV {cv * 100:.1f}% {against}"
    n = to_resolve(cv, tolerance, n_ref)
    if n is None:
        return f"{head}: a reference this small cannot, at any count; record at least " \
               f"{_smallest_reference(cv, tolerance)} launches"
    arms = 2 if n_ref is None else 1
    if done >= n:
        return f"{head}: about {n} launches resolve it in 4 of 5 runs; this one had {done} and did not (its change " \
               f"lies near the tolerance): record a larger reference, or {hours(arms * launch_s)} a further launch"
    so_far = f" ({done} so far)" if done else ""
    return f"{head}: about {n} launches{so_far}, {hours((n - done) * arms * launch_s)} more on this box " \
           f"({hours(launch_s)} a launch)"


def from_report(path: Path, launch_s: float | None) -> list[str]:
    """A line per unresolved series of a --glm5-report: what it could see and what resolving it costs (the launch
    time: the report's own loads and measuring, else `launch_s`)."""
    doc = read_report(path)
    loads: dict[str, Any] = dict(doc.get("run", {}).get("launches") or {})
    out = []
    for v in verdicts_of(doc, str(path)):
        if v.verdict != Kind.UNRESOLVED or not v.stat:
            continue
        st = v.stat
        own = loads.get(v.config, {}).get("load_s") or []
        each = launch_s if launch_s is not None else (sorted(own)[len(own) // 2] if own else None)
        if each is None:
            out.append(f"{v.config} {v.scenario} {v.metric}: the report has no load times; give --load-time")
            continue
        seen = st.get("detectable")
        could = f"could see {seen * 100:.0f}%; " if seen else ""
        out.append(f"{v.config} {v.scenario} {v.metric}: {could}"
                   + price(st["cv"], st["tolerance"], st.get("n_ref"), each, st.get("n_new", 0)))
    return out or [f"{path}: no unresolved series"]


def from_baselines(path: Path, launch_s: float | None, tolerance: float | None) -> list[str]:
    """A line per entry with a reference: its CV, the drop one new launch finds against it, and what resolving its
    tolerance costs (the launch time: the file's [costs.CONFIG], else `launch_s`)."""
    store = BaselineStore(path)
    out = []
    for config, scenario, metric, entry in store.entries():
        launches: Sequence[float] = entry.get("launches") or []
        if len(launches) < 2:
            continue
        cv = log_cv(launches)
        bound = store.bound(config, scenario, metric)
        tol = tolerance if tolerance is not None else (bound.tolerance if bound is not None else 0.05)
        cost = store.cost(config)
        each = launch_s if launch_s is not None else (
            float(cost["load_s"]) + float(cost["measure_s"]) if cost else None)
        one = detectable_drop(cv, 1, 0.01, len(launches))
        line = f"{config} {scenario} {metric}: CV {cv * 100:.1f}% over {len(launches)} launches; one new launch " \
               f"finds a drop of {one * 100:.0f}%"
        out.append(line + ("; " + price(cv, tol, len(launches), each) if each is not None else
                           "; no [costs] for it: give --load-time"))
    return out or [f"{path}: no entry with launches"]
