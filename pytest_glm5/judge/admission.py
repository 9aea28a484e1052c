"""Is a figure the build's speed? Asked of every verdict after its test, as one ordered table of rules.

A test says how tonight's launches stand against their reference; whether those launches measured the build is
another question, and its answer replaces the verdict with a named reason that the reports read as data
(`Verdict.reason`: kind, short, detail), never as prose. The rules, in order (`RULES`):

1. **client-bound**: the load client's own cost set the figure (judged kinds only; a later rule may still apply);
2. **invalid**: the build answers wrong (the canary, the accuracy set): whatever the figure, it is not a speed;
3. **throttled**: a GPU slowed for heat or a power brake: not comparable with a cool, unbraked reference;
4. **workload not held / drift**: another workload than the one asked or recorded (judge/held.py);
5. **power regime**: the GPUs ran another power regime than the reference's: the verdict stands, its likely cause
   is named (judge/regime.py).

The first of rules 2-5 that applies is the last applied. What the rules read of a scenario's launches is built once
(`Evidence`), value in, value out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..load.types import BenchResult
from . import held
from .regime import power_change
from .verdicts import Bound, Kind, Reason, Verdict

HOST_BOUND = (Kind.CLIENT_BOUND, Kind.EMULATOR_BOUND)  # not judged: the host, not the server, set the figure
JUDGED = (Kind.PASS, Kind.REGRESSION, Kind.IMPROVEMENT, Kind.UNRESOLVED, Kind.KNOWN_COST)


@dataclass(frozen=True)
class Evidence:
    """What the rules read of one scenario's launches: the client's verdict on its own cost per metric and
    tolerance, what sets the launches apart (INVALID or THROTTLED, with why), the workload observed, the workload
    asked and the power record (the provenance's)."""

    client: Callable[[str, float], str | None] | None = None
    apart: tuple[Kind, str] | None = None
    observed: Mapping[str, float] | None = None
    asked: Mapping[str, Any] | None = None
    power: Mapping[str, Any] | None = None


def evidence(results: Sequence[BenchResult], asked: Mapping[str, Any] | None, power: Mapping[str, Any] | None,
             ab: bool) -> Evidence:
    """The evidence of one scenario's launches (an A/B run's client cost is the same in both arms: not read)."""
    return Evidence(None if ab else _client_bound(results), _apart(results),
                    held.observed([r.metrics for r in results]) or None, asked, power)


@dataclass(frozen=True)
class Admitted:
    """A rule's answer: the verdict's new kind (None: it keeps its kind), its note, its typed reason, and whether
    the later rules are still asked."""

    kind: str | None
    note: str
    reason: Reason | None = None
    final: bool = True


Rule = Callable[[Verdict, Bound | None, float, Evidence], Admitted | None]


def client_bound(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> Admitted | None:
    """Never a regression and never a pass: the client, not the server, set this figure. (A new metric stays new:
    --update-baselines runs alone on the box, and the entry's provenance keeps the figures.)"""
    starved = ev.client(v.metric, tolerance) if ev.client is not None else None
    if not starved or v.verdict not in JUDGED:
        return None
    return Admitted(Kind.CLIENT_BOUND, starved, final=False)


def invalid(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> Admitted | None:
    """Whatever the figure says, it is not the build's speed: the build answers wrong. Never recorded."""
    if ev.apart is None or ev.apart[0] != Kind.INVALID:
        return None
    was = str(v.verdict) + (f", {v.delta * 100:+.1f}% from its bound" if v.delta is not None else "")
    return Admitted(Kind.INVALID, f"{ev.apart[1]} (the figure alone would read {was})",
                    Reason(Kind.INVALID, wrong(ev.apart[1]), f"the figure alone would read {was}"))


def throttled(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> Admitted | None:
    """Never a regression, never a pass, never recorded: the GPU was slowed for heat or a power brake."""
    if ev.apart is None or ev.apart[0] == Kind.INVALID or v.verdict not in (*JUDGED, Kind.NEW):
        return None
    return Admitted(ev.apart[0], ev.apart[1])


def not_held(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> Admitted | None:
    """Another workload than the one asked or recorded: neither faster nor slower, never recorded. What the server
    did to the workload is news whatever the host did (a busy client made mean TTFT client-bound and would have
    hidden the model's thinking drifting; beside two busy loops a prefix cache that stopped hitting read client-bound);
    what a busy host holds back (arrivals) stays the host's."""
    if not ev.observed or v.verdict not in (*JUDGED, Kind.NEW, *HOST_BOUND):
        return None
    seen = held.beyond_the_host(ev.observed) if v.verdict in HOST_BOUND else ev.observed
    miss = held.check(ev.asked or {}, seen, (bound.workload or {}).get("observed") if bound else None)
    if miss is None:
        return None
    return Admitted(miss[0], miss[1], Reason(miss[0], miss[2]))


def power_regime(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence) -> Admitted | None:
    """At the power cap under load is normal; a cap or a limit that moved since the reference is news: the verdict
    stands and names it as the likely cause."""
    if v.verdict not in (Kind.REGRESSION, Kind.IMPROVEMENT, Kind.UNRESOLVED) or bound is None:
        return None
    cause = power_change(bound.power, ev.power)
    if not cause:
        return None
    return Admitted(None, f"{v.note}; likely cause: {cause}" if v.note else f"likely cause: {cause}")


RULES: tuple[Rule, ...] = (client_bound, invalid, throttled, not_held, power_regime)


def admit(v: Verdict, bound: Bound | None, tolerance: float, ev: Evidence,
          rules: Sequence[Rule] = RULES) -> Verdict:
    """The verdict as the rules leave it (changed in place, and returned): each rule in order, until one that
    applies is final."""
    for rule in rules:
        out = rule(v, bound, tolerance, ev)
        if out is None:
            continue
        if out.kind is not None:
            v.verdict = out.kind
        v.note = out.note
        if out.reason is not None:
            v.reason = out.reason
        if out.final:
            break
    return v


def wrong(said: str) -> str:
    """The cause of a build's wrong answers in a phrase, from what its check said: `canary failed: 12 of 16 prompts
    diverged within their first 12 tokens` or `accuracy 71.0% vs 90.0% (-19.0 points), p=1.2e-08`."""
    text = said.removeprefix("faster, but wrong: ")
    if text.startswith("accuracy"):
        p = text.split("McNemar ", 1)[1].split(" ", 1)[0] if "McNemar " in text else ""
        return text.split(":", 1)[0] + (f", {p}" if p else "")
    return text.split(" (", 1)[0]


def _apart(results: Sequence[BenchResult]) -> tuple[Kind, str] | None:
    """Why these runs are not the build's speed at all (INVALID: it answers wrong) or not comparable (THROTTLED: a
    GPU slowed for heat or a power brake); None when neither."""
    bad = next((r.invalid for r in results if r.invalid), None)
    if bad:
        return Kind.INVALID, bad
    why = next((why for r in results if r.energy is not None and (why := r.energy.throttled())), None)
    return (Kind.THROTTLED, why) if why else None


def _client_bound(results: Sequence[BenchResult]) -> Callable[[str, float], str | None]:
    """For a metric and its tolerance: why the load client's own cost spoils these runs (None: it does not)."""

    def why(metric: str, tolerance: float) -> str | None:
        reasons = [r.client.why(metric, r.metrics, tolerance) for r in results if r.client is not None]
        return next((x for x in reasons if x), None)

    return why
