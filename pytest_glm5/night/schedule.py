"""Tonight's configs within the budget, and when the others run: a suite that needs more than a night of launches is
covered over a few nights, every config judged at least every K nights, instead of its last configs never running.

The plan picks, in this order, while their first launches fit the budget: the reference configs (those others are
compared to) every night; configs with a suspect, with the launches it asked for (a drop seen on one launch is
settled the next night, before the cover: a config merely due waits a night more); configs the history has never
judged and configs due by the cover; configs whose last night left a series unresolved (tomorrow's launch decides
it, not a round tonight); then the one judged longest ago. Configs with a known
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
from dataclasses import dataclass, field, replace
from typing import Any

from ..configs import ServerConfig
from ..judge.verdicts import Kind
from ..words import counted
from .plan import ConfigCost, hours

KNOWN_CRASH_DAYS = 7  # a known crash is confirmed weekly: every night it would cost a model load to see it again


@dataclass(frozen=True)
class Standing:
    """What the history says of one config: nights since it was last judged (None: never), the series that night left
    unresolved or suspect, and the launches its suspects asked for (those that confirm or clear them)."""

    config: str
    nights_ago: int | None = None
    open: int = 0
    wants: int = 0
    stale: bool = False  # last judged on another build than the newest the history has measured


def standing_of(runs: Sequence[Mapping[str, Any]], today: dt.date) -> dict[str, Standing]:
    """Each config's standing from the history's runs (oldest first): its last night and what that night left open."""
    out: dict[str, Standing] = {}
    built: dict[str, str] = {}  # config -> the build it was last judged on
    newest = ""
    for run in runs:
        try:
            when = dt.date.fromisoformat(str(run.get("time", ""))[:10])
        except ValueError:
            continue
        for s in run.get("series") or []:
            if s.get("build"):
                newest = built[str(s.get("config"))] = str(s["build"])
        # A config launched that night counts as run even when it measured nothing (a known crash).
        by: dict[str, list[int]] = {str(c): [0, 0] for c in run.get("launched") or []}
        for s in run.get("series") or []:
            got = by.setdefault(str(s.get("config")), [0, 0])
            if s.get("verdict") == Kind.UNRESOLVED:
                got[0] += 1
                if s.get("suspect"):
                    got[1] = max(got[1], int(s.get("to_add") or 1))
        for config, (left, wants) in by.items():
            out[config] = Standing(config, max(0, (today - when).days), left, wants)
    # A config not judged since a new build arrived is where a drop it brought shows first: it runs before the rest.
    return {k: replace(v, stale=k in built and built[k] != newest) for k, v in out.items()}


@dataclass
class Tonight:
    """The night's pick: the configs that run, the launches beyond the planned that each is given for its open series,
    why each other does not run and when it will, and the cover."""

    run: list[str]
    later: dict[str, str] = field(default_factory=dict)
    cover: int = 1  # every config is judged at least every `cover` nights at this budget
    extra: dict[str, int] = field(default_factory=dict)
    optional: list[str] = field(default_factory=list)  # run last; a round of what tonight finds may take their time
    standby: list[str] = field(default_factory=list)  # optional, first: due, and run if the suspects clear
    lead: list[str] = field(default_factory=list)  # run first: the references, then the configs with a suspect
    extra_s: dict[str, float] = field(default_factory=dict)  # what each config's extra launches cost on this box

    def order(self, names: Sequence[str]) -> list[str]:
        """`names` in run order for tonight: the references and the suspects' configs first (a suspect is settled
        before the budget is spent), the optional configs last, so that what the others find can still get its
        rounds tonight."""
        return sorted(names, key=lambda n: (n in self.optional, self.optional.index(n) if n in self.optional else 0,
                                            self.lead.index(n) if n in self.lead else len(self.lead)))

    def lines(self) -> list[str]:
        """`tonight: tp8, b (+3 launches for what it left open, 2.4 h), c; not tonight: a (judged 1 night ago; next
        tomorrow ...); every config judged at least every 2 nights`."""
        names = [f"{n} (+{counted(self.extra[n], 'launch', 'launches')} for what it left open"
                 + (f", {hours(self.extra_s[n])})" if n in self.extra_s else ")")
                 if self.extra.get(n) else f"{n} (stands by: runs last if the suspects clear)" if n in self.standby
                 else n for n in self.run]
        head = f"tonight: {', '.join(names) or 'none'}"
        out = [head + (f"; every config judged at least every {self.cover} nights at this budget"
                       if self.later else "")]
        out += [f"not tonight: {name} ({why})" for name, why in self.later.items()]
        return out


def _ago(n: int | None) -> str:
    return "never judged here" if n is None else "judged today" if n == 0 else \
        f"judged {counted(n, 'night')} ago"


@dataclass(frozen=True)
class _Rules:
    planned: int
    references: Collection[str]
    known_crash: Collection[str]
    crash_days: int
    cover: int
    most: int  # launches beyond the planned a config may be given for its open series


def _night(costs: Sequence[ConfigCost], budget_s: float, standing: Mapping[str, Standing], rules: _Rules
           ) -> tuple[list[str], set[str], dict[str, int], list[str], list[str], list[str]]:
    """One night's pick: the configs that run, the known crashes not due yet, the extra launches given, and the
    configs that need not run tonight (not due, no suspect: a round of what tonight finds may take their time).

    In this order, each while it fits: the references; configs with a suspect, and those unjudged for twice the cover
    (a suspect still leaning asks every night: it starved a config 21 nights in scripts/simulate_nights.py), then the
    launches the suspects asked for (a confirmation is the night's best use of the box); configs never judged, and
    configs that would otherwise wait longer than the cover; configs not judged since a newer build arrived (where a
    drop it brought shows first); then configs with open series and the longest waiting."""
    rank = {c.config: i for i, c in enumerate(costs)}

    def st(name: str) -> Standing:
        return standing.get(name, Standing(name))

    waiting = {c.config for c in costs if c.config in rules.known_crash and (n := st(c.config).nights_ago) is not None
               and n < rules.crash_days}

    def priority(c: ConfigCost) -> tuple[int, int, int, int]:
        got = st(c.config)
        covers = got.nights_ago // rules.cover if got.nights_ago is not None and rules.cover > 0 \
            and c.config not in rules.known_crash else 0  # the covers it waited: 1 is due, 2 overdue
        tier = 0 if c.config in rules.references else 1 if (got.wants and got.open) or covers >= 2 else \
            2 if got.nights_ago is None else 3 if covers else 4 if got.stale else 5 if got.open else 6
        return tier, -got.wants, -(got.nights_ago or 0), rank[c.config]

    order = sorted((c for c in costs if c.config not in waiting), key=priority)
    given: dict[str, int] = {}  # config -> its launches tonight
    spent = 0.0

    def give(c: ConfigCost, launches: int) -> bool:
        nonlocal spent
        have = given.get(c.config, 0)
        if launches <= have or spent - c.night_s(have) + c.night_s(launches) > budget_s:
            return False
        spent += c.night_s(launches) - c.night_s(have)
        given[c.config] = launches
        return True

    for c in order:
        if priority(c)[0] <= 1:
            give(c, rules.planned)
    for c in order:  # a suspect's launches: as many as it asked for that fit
        got = st(c.config)
        more = min(got.wants, rules.most) if got.open else 0
        while more > 0 and not give(c, rules.planned + more):
            more -= 1
    for c in order:
        if priority(c)[0] <= 3:
            give(c, rules.planned)
    for c in order:
        give(c, rules.planned)
    extra = {name: n - rules.planned for name, n in given.items() if n > rules.planned}
    room = budget_s - spent + sum(c.night_s(given[c.config]) - c.night_s(rules.planned) for c in costs
                                  if c.config in extra)
    standby = _standby([c for c in order if c.config not in given and priority(c)[0] <= 3], room, rules.planned)
    optional = standby + [c.config for c in costs if given.get(c.config) == rules.planned and priority(c)[0] > 4]
    lead = [c.config for c in order if c.config in given and priority(c)[0] <= 1]
    return ([c.config for c in costs if c.config in given or c.config in standby], waiting, extra, optional, standby,
            lead)


def _standby(left_out: Sequence[ConfigCost], room: float, planned: int) -> list[str]:
    """The configs due or new that the suspects' launches left out and that fit `room` (the night's budget left if
    every suspect clears): they stand by, run last if the launches a suspect did not spend went back to the budget,
    else on a later night."""
    out = []
    for c in left_out:
        if c.night_s(planned) <= room:
            out.append(c.config)
            room -= c.night_s(planned)
    return out


def pick(costs: Sequence[ConfigCost], budget_s: float, standing: Mapping[str, Standing], planned: int = 1,
         references: Collection[str] = (), known_crash: Collection[str] = (),
         crash_days: int = KNOWN_CRASH_DAYS, most: int = 3) -> Tonight:
    """Tonight's configs by priority while their launches fit `budget_s` (the order of `costs` breaks ties), and
    when each other one runs: the nights after tonight are planned the same way, as if nothing were left open.
    `most`: launches beyond the planned a config with open series may be given."""
    rules = _Rules(planned, references, known_crash, crash_days,
                   cover(costs, budget_s, planned, references, known_crash), most)
    run, waiting, extra, optional, standby, lead = _night(costs, budget_s, standing, rules)
    later: dict[str, str] = {}
    for c in costs:
        got = standing.get(c.config, Standing(c.config))
        if c.config in waiting:
            left = crash_days - (got.nights_ago or 0)
            later[c.config] = (f"a known crash, confirmed every {crash_days} nights; {_ago(got.nights_ago)}, next in "
                               f"{counted(left, 'night')}")
        elif c.config not in run and c.night_s(planned) > budget_s:
            later[c.config] = f"its launches alone need {hours(c.night_s(planned))} of the {hours(budget_s)} budget"
    ahead, tonight = dict(standing), run
    for night in range(1, 2 * len(costs) + 1):  # the nights after tonight, until each config left has its turn
        # A night on, in one pass: tonight's configs judged a night ago and nothing left open, the others a night
        # older than they were.
        ahead = {c.config: Standing(c.config, 1) if c.config in tonight else
                 Standing(c.config, None if (n := ahead.get(c.config, Standing(c.config)).nights_ago) is None
                          else n + 1) for c in costs}
        tonight = _night(costs, budget_s, ahead, rules)[0]
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
    by = {c.config: c for c in costs}
    extra_s = {n: by[n].night_s(planned + more) - by[n].night_s(planned) for n, more in extra.items()}
    return Tonight(run, dict(sorted(later.items(), key=lambda kv: rank[kv[0]])), rules.cover, extra, optional,
                   standby, lead, extra_s)


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
