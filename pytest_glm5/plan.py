"""What a run costs on the box: each config's load and measuring time, the plan printed before the first launch
(`--glm5-plan` prints only that), the budget that bounds a night (`--glm5-budget 8h`), and what resolving a series
costs (`glm5 plan`).

A launch is the unit of cost: a GLM-5-NVFP4 load takes many minutes (the brief budgets 10-50; SGLang's own CI allows
3,000 s on Blackwell). Each config's first launch measures all its tests; rounds (more launches of the whole config)
are what resolving a series, recording a reference or an A/B block costs.

    >>> p = Plan([ConfigCost("tp8", 7, 1800.0, 600.0, "assumed")], budget_s=8 * 3600, rounds=4)
    >>> p.lines()[-1]
    '1 configs: first launches 40 min; with up to 4 rounds each 3.3 h; budget 8.0 h: every round fits'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# A GLM-5-NVFP4 launch on 8x SM120 when this box has measured none: the middle of the brief's 10-50 minutes.
ASSUMED_LOAD_S = 1800.0
ASSUMED_MEASURE_S_PER_TEST = 120.0  # the suite's scenarios run 1-3 minutes each at the campaign's speeds


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

    @property
    def launch_s(self) -> float:
        """One launch of the config, loaded and measured."""
        return self.load_s + self.measure_s


@dataclass
class Plan:
    """The run's configs with their costs, the rounds each may get, and the budget."""

    costs: list[ConfigCost]
    budget_s: float | None = None
    planned: int = 1  # launches every config gets (--glm5-launches N; 4 for an A/B block)
    rounds: int = 0  # extra launches a config may get while a series is unresolved (looks beyond the planned)

    @property
    def first_s(self) -> float:
        """Every config's planned launches."""
        return sum(c.launch_s for c in self.costs) * self.planned

    @property
    def most_s(self) -> float:
        """Every config's planned launches and every round it may get."""
        return sum(c.launch_s for c in self.costs) * (self.planned + self.rounds)

    def lines(self) -> list[str]:
        """The table and the verdict on the budget."""
        out = [f"{'config':<18} {'tests':>5} {'load':>8} {'measure':>8} {'launch':>8}  source"]
        for c in self.costs:
            out.append(f"{c.config:<18} {c.tests:>5} {hours(c.load_s):>8} {hours(c.measure_s):>8} "
                       f"{hours(c.launch_s):>8}  {c.source}")
        n = len(self.costs)
        planned = f"first launches {hours(self.first_s)}" if self.planned == 1 else \
            f"{self.planned} planned launches each {hours(self.first_s)}"
        tail = f"{n} configs: {planned}; with up to {self.rounds} rounds each {hours(self.most_s)}"
        if self.budget_s is None:
            return [*out, tail + "; no budget (--glm5-budget 8h bounds the run)"]
        if self.first_s > self.budget_s:
            fit, spent = [], 0.0
            for c in self.costs:
                if spent + c.launch_s * self.planned > self.budget_s:
                    break
                fit.append(c.config)
                spent += c.launch_s * self.planned
            left = [c.config for c in self.costs if c.config not in fit]
            return [*out, tail + f"; budget {hours(self.budget_s)}: NOT ENOUGH for the planned launches: "
                                 f"{len(fit)} configs fit, {', '.join(left)} would not run (raise the budget, "
                                 "split the suite with --glm5-shard, or deselect configs)"]
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

    def begin(self, config: str) -> str | None:
        """Before a config's first launch: why it may not start (None: it may, and its launches are charged)."""
        if config in self.begun:
            return None
        cost = self.first.get(config, 0.0)
        if self.charged + cost > self.limit_s:
            return (f"budget {hours(self.limit_s)}: {hours(self.charged)} planned so far, its launches need about "
                    f"{hours(cost)}; not run")
        self.begun.add(config)
        self.charged += cost
        return None

    def round(self, config: str, cost_s: float) -> str | None:
        """Before a round: why it may not run (None: it may, and it is charged)."""
        keep = sum(cost for name, cost in self.first.items() if name not in self.begun and name != config)
        if self.charged + cost_s + keep > self.limit_s:
            return (f"budget {hours(self.limit_s)}: {hours(self.charged)} spent, a round costs about {hours(cost_s)}"
                    + (f" and {hours(keep)} is kept for the configs not yet run" if keep else ""))
        self.charged += cost_s
        return None
