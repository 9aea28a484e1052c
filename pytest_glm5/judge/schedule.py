"""Tonight's configs within the budget, and when the others run: a suite that needs more than a night of launches is
covered over a few nights, every config judged at least every K nights, instead of its last configs never running.

The plan picks, in this order, while their first launches fit the budget: the reference configs (those others are
compared to) every night; configs the history has never judged; configs whose last night left a series unresolved
or suspect (tomorrow's launch decides it, not a round tonight); then the one judged longest ago. Configs with a known
crash run on a cadence of their own (weekly by default): confirming a crash costs a load every time. The state is
the history itself (each night appends its series), so a killed run leaves nothing to repair. Without a history, or
when every config fits, everything runs as before.

    >>> from .plan import ConfigCost
    >>> costs = [ConfigCost(n, 7, 1800.0, 1100.0, "assumed") for n in ("tp8", "a", "b", "c")]
    >>> t = pick(costs, 3 * 3600.0, {"a": Standing("a", 1), "b": Standing("b", 2), "c": Standing("c", 1, open=2)},
    ...          references={"tp8"})
    >>> t.run, t.later
    (['tp8', 'b', 'c'], {'a': 'judged 1 night ago; next tomorrow (the longest waiting go first)'})
    >>> t.cover
    2
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..configs import ServerConfig
from .plan import ConfigCost, hours
from .verdicts import Kind

KNOWN_CRASH_DAYS = 7  # a known crash is confirmed weekly: every night it would cost a model load to see it again


@dataclass(frozen=True)
class Standing:
    """What the history says of one config: nights since it was last judged (None: never), the series that night left
    unresolved or suspect."""

    config: str
    nights_ago: int | None = None
    open: int = 0


def standing_of(runs: Sequence[Mapping[str, Any]], today: dt.date) -> dict[str, Standing]:
    """Each config's standing from the history's runs (oldest first): its last night and what that night left open."""
    out: dict[str, Standing] = {}
    for run in runs:
        try:
            when = dt.date.fromisoformat(str(run.get("time", ""))[:10])
        except ValueError:
            continue
        by: dict[str, int] = {}
        for s in run.get("series") or []:
            by.setdefault(str(s.get("config")), 0)
            by[str(s.get("config"))] += s.get("verdict") == Kind.UNRESOLVED
        for config, left in by.items():
            out[config] = Standing(config, max(0, (today - when).days), left)
    return out


@dataclass
class Tonight:
    """The night's pick: the configs that run, why each other does not and when it will, and the cover."""

    run: list[str]
    later: dict[str, str] = field(default_factory=dict)
    cover: int = 1  # every config is judged at least every `cover` nights at this budget

    def lines(self) -> list[str]:
        """`tonight: tp8, b, c; not tonight: a (judged 1 night ago; next tomorrow ...); every config judged at least
        every 2 nights`."""
        head = f"tonight: {', '.join(self.run) or 'none'}"
        out = [head + (f"; every config judged at least every {self.cover} nights at this budget"
                       if self.later else "")]
        out += [f"not tonight: {name} ({why})" for name, why in self.later.items()]
        return out


def _ago(n: int | None) -> str:
    return "never judged here" if n is None else "judged today" if n == 0 else \
        f"judged {n} night{'s' if n != 1 else ''} ago"


def _night(costs: Sequence[ConfigCost], budget_s: float, standing: Mapping[str, Standing], planned: int,
           references: Collection[str], known_crash: Collection[str], crash_days: int) -> tuple[list[str], set[str]]:
    """One night's pick: the configs that run, and the known crashes not due yet."""
    rank = {c.config: i for i, c in enumerate(costs)}

    def st(name: str) -> Standing:
        return standing.get(name, Standing(name))

    waiting = {c.config for c in costs if c.config in known_crash and (n := st(c.config).nights_ago) is not None
               and n < crash_days}

    def priority(c: ConfigCost) -> tuple[int, int, int]:
        got = st(c.config)
        tier = 0 if c.config in references else 1 if got.nights_ago is None else 2 if got.open else 3
        return tier, -(got.nights_ago or 0), rank[c.config]

    run, spent = [], 0.0
    for c in sorted((c for c in costs if c.config not in waiting), key=priority):
        if spent + c.night_s(planned) <= budget_s:
            run.append(c.config)
            spent += c.night_s(planned)
    return [c.config for c in costs if c.config in run], waiting


def pick(costs: Sequence[ConfigCost], budget_s: float, standing: Mapping[str, Standing], planned: int = 1,
         references: Collection[str] = (), known_crash: Collection[str] = (),
         crash_days: int = KNOWN_CRASH_DAYS) -> Tonight:
    """Tonight's configs by priority while their planned launches fit `budget_s` (the order of `costs` breaks ties),
    and when each other one runs: the nights after tonight are planned the same way, as if nothing were left open."""
    rules = (planned, references, known_crash, crash_days)
    run, waiting = _night(costs, budget_s, standing, *rules)
    later: dict[str, str] = {}
    for c in costs:
        got = standing.get(c.config, Standing(c.config))
        if c.config in waiting:
            left = crash_days - (got.nights_ago or 0)
            later[c.config] = (f"a known crash, confirmed every {crash_days} nights; {_ago(got.nights_ago)}, next in "
                               f"{left} night{'s' if left != 1 else ''}")
        elif c.config not in run and c.night_s(planned) > budget_s:
            later[c.config] = f"its launches alone need {hours(c.night_s(planned))} of the {hours(budget_s)} budget"
    ahead, tonight = dict(standing), run
    for night in range(1, 2 * len(costs) + 1):  # the nights after tonight, until each config left has its turn
        ahead = {c.config: Standing(c.config, 0 if c.config in tonight else None if (n := ahead.get(
            c.config, Standing(c.config)).nights_ago) is None else n) for c in costs}
        ahead = {k: Standing(k, None if v.nights_ago is None else v.nights_ago + 1) for k, v in ahead.items()}
        tonight, _ = _night(costs, budget_s, ahead, *rules)
        for name in tonight:
            if name not in run and name not in later:
                got = standing.get(name, Standing(name))
                when = "tomorrow" if night == 1 else f"in {night} nights"
                later[name] = f"{_ago(got.nights_ago)}; next {when} (the longest waiting go first)"
        if all(c.config in run or c.config in later for c in costs):
            break
    for c in costs:
        if c.config not in run and c.config not in later:
            later[c.config] = f"not within {2 * len(costs)} nights at this budget: raise it or deselect configs"
    rank = {c.config: i for i, c in enumerate(costs)}
    return Tonight(run, dict(sorted(later.items(), key=lambda kv: rank[kv[0]])),
                   cover(costs, budget_s, planned, references, known_crash))


def cover(costs: Sequence[ConfigCost], budget_s: float, planned: int = 1, references: Collection[str] = (),
          known_crash: Collection[str] = ()) -> int:
    """Nights in which every config (known crashes aside, which keep their cadence) is judged once, the references
    every night: the rotation's length at this budget (0: the references alone do not fit)."""
    fixed = sum(c.night_s(planned) for c in costs if c.config in references)
    rest = sorted((c.night_s(planned) for c in costs if c.config not in references and c.config not in known_crash),
                  reverse=True)
    room = budget_s - fixed
    if room <= 0 or (rest and rest[0] > room):
        return 0
    nights, left = 1, room
    for cost in rest:  # first fit, largest first: the nights a rotation needs
        if cost > left:
            nights, left = nights + 1, room
        left -= cost
    return max(1, nights) if rest else 1 if fixed <= budget_s else 0


def for_suite(costs: Sequence[ConfigCost], budget_s: float, runs: Sequence[Mapping[str, Any]], planned: int,
              configs: Mapping[str, ServerConfig], today: dt.date) -> Tonight:
    """The pick for a configs file: its compare_to targets are the references, its known issues the known crashes."""
    return pick(costs, budget_s, standing_of(runs, today), planned,
                references={c.compare_to for c in configs.values() if c.compare_to},
                known_crash={n for n, c in configs.items() if c.known_issue})
