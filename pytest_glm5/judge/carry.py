"""Evidence that carries from one night to the next: a series' launches of the same build, workload and reference
accumulate across nights into one sequential test, read back from the history the nights append to.

A night on the box is 30-50 minutes a launch, so rounds inside one night are the dearest evidence there is, while
tomorrow's first launch of the config comes anyway. The sample of a series tonight is every earlier night's launches
of it back to the first night with another build fingerprint, another workload or another reference (baselines
updated): those start a new sample, and the line says why. Looks are counted across the nights, up to SAMPLE_LOOKS,
and each night tests the whole sample with alpha spent over that night's looks (judge/looks.py): the bound is on
false nights, a false regression on at most alpha of them, which a sample re-tested nightly keeps (spending over
the sample's looks instead cost a drop at CV 10% most of its power: 23% confirmed within 5 nights against 83%).
What was decided stays decided while tonight agrees: a confirmed regression fails until the build changes or the
baselines are updated; a pass needs no more launches until the build changes.
Nights whose figures were not the build's (invalid, throttled, client- or emulator-bound, another workload) add
nothing and break nothing. A sample that spent its looks undecided ends there; the next night starts a new one (the
history line says `restart`).

    >>> runs = [{"time": "2026-12-01", "series": [dict(config="t", scenario="s", metric="m", build="b1",
    ...          ref="r", workload="w", launches=[98.0], verdict="unresolved")]},
    ...         {"time": "2026-12-02", "series": [dict(config="t", scenario="s", metric="m", build="b2",
    ...          ref="r", workload="w", launches=[90.0], verdict="unresolved")]}]
    >>> prior_of(runs, ("t", "s", "m"), Sample("b2", "w", "r"))
    Prior(launches=(90.0,), nights=1, since='2026-12-02', decided=None, decided_on='', broke='')
    >>> prior_of(runs, ("t", "s", "m"), Sample("b3", "w", "r")).broke
    'the build changed since 2026-12-02'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..digests import digest
from .verdicts import Kind

__all__ = ["Prior", "Sample", "digest", "prior_of"]

# What an earlier night may leave a series: its launches go on (unresolved, suspect), or it was decided.
OPEN = (Kind.UNRESOLVED,)  # a suspect is an unresolved series whose one launch dropped
DECIDED = (Kind.PASS, Kind.REGRESSION, Kind.IMPROVEMENT)
# Looks a sample may take across nights (one a launch). At a CV twice the tolerance a drop of twice the tolerance takes
# 20-30 launches against a reference of 12-24; a sample of 5 never got there (13% within 5 nights at CV 10%).
SAMPLE_LOOKS = 25


@dataclass(frozen=True)
class Sample:
    """What tonight's launches of a series must share with an earlier night's to pool with them."""

    build: str
    workload: str  # digest of the workload
    ref: str  # digest of the reference launches and tolerance


@dataclass(frozen=True)
class Prior:
    """Earlier nights' evidence for one series: their launch values (oldest first), how many nights, since when,
    the verdict one of them reached (then nothing is pooled), and why the sample starts anew tonight, if it does."""

    launches: tuple[float, ...] = ()
    nights: int = 0
    since: str = ""
    decided: str | None = None
    decided_on: str = ""
    broke: str = ""


def _changed(entry: Mapping[str, Any], sample: Sample) -> str:
    for name, key in (("build", "build"), ("workload", "workload"), ("reference (baselines updated)", "ref")):
        if str(entry.get(key, "")) != getattr(sample, key):
            return name
    return ""


def grown(runs: Sequence[Mapping[str, Any]], key: tuple[str, str, str], ref: str, build: str) -> tuple[float, ...]:
    """The launches later nights made of the reference's own build against the same reference (oldest first): once
    a new build is judged, they join the recorded launches, a larger reference at no cost (none while tonight's build
    is the reference's: a test of a sample against itself proves nothing). Figures that were not the build's add
    nothing.

        >>> grown([{"series": [dict(config="t", scenario="s", metric="m", build="b0", ref="r", launches=[99.0],
        ...                         verdict="pass")]}], ("t", "s", "m"), "r", "b0")
        (99.0,)
    """
    out: list[float] = []
    for run in runs:
        for s in run.get("series") or []:
            if (s.get("config"), s.get("scenario"), s.get("metric")) == key and str(s.get("build", "")) == build \
                    and str(s.get("ref", "")) == ref and s.get("verdict") in (*OPEN, *DECIDED):
                out += [float(x) for x in s.get("launches") or [] if isinstance(x, int | float) and x > 0]
    return tuple(out)


def prior_of(runs: Sequence[Mapping[str, Any]], key: tuple[str, str, str], sample: Sample) -> Prior:
    """The evidence earlier runs (oldest first, as the history holds them) leave this series tonight."""
    launches: list[float] = []
    nights, since = 0, ""
    for run in reversed(runs):
        entry = next((s for s in run.get("series") or [] if (s.get("config"), s.get("scenario"), s.get("metric"))
                      == key), None)
        if entry is None:
            continue  # the config did not run that night: nothing added, nothing broken
        when = str(run.get("time", ""))
        what = _changed(entry, sample)
        if what:
            return Prior(tuple(launches), nights, since, broke=f"the {what} changed since {when}" if not nights
                         else "")
        verdict = str(entry.get("verdict", ""))
        if verdict in DECIDED:
            if nights:  # open again since (a pass, then a drop): the sample starts after that decision
                return Prior(tuple(launches), nights, since)
            return Prior(decided=verdict, decided_on=when)
        if verdict not in OPEN:
            continue  # figures that were not the build's (invalid, throttled, bound by the client or emulator)
        values = [float(x) for x in entry.get("launches") or [] if isinstance(x, int | float) and x > 0]
        launches[:0] = values
        nights, since = nights + 1, when
        if entry.get("restart"):
            break  # an earlier sample spent its looks undecided: this night began the present one
    return Prior(tuple(launches), nights, since)
