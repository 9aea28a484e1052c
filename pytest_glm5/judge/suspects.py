"""Suspects: a drop seen on one launch, which more launches confirm or clear, and when it is its config's.

One launch never confirms a drop (a slow launch moves every metric of its config): a drop beyond the tolerance on one
launch that is likely is a suspect, and its config's next night gives it the launches that settle it, first
(night/schedule.py). A suspect is a config's, not one series' noise: a config of 14-19 series has one series beyond
the tolerance with p below SUSPECT_P on most launches of unchanged code at a CV near the tolerance, and each suspect
costs the night launches (scripts/simulate_nights.py: with every such series a suspect, the 30 simulated histories at
CV 5% confirmed a 10% drop within 3 nights in 70-80%; with the config's rule, 97%).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from . import family
from .verdicts import Kind, Test, Verdict

# The launches a suspect asks of its config's next night: one confirms or clears it alone, but a confirmation must
# also hold across the run's configs (the family decision); scripts/simulate_nights.py measured the count.
SUSPECT_LAUNCHES = 3
# A launch beyond the tolerance is a suspect only if a drop is also likely (p below this): at a launch CV near the
# tolerance one launch in six of unchanged code lies beyond it, and every config would ask for launches every night.
SUSPECT_P = 0.05


def mark(v: Verdict) -> Verdict:
    """One launch cannot confirm a drop (a slow launch moves every metric of a config): a drop beyond the tolerance
    on one launch that is likely (p below SUSPECT_P) is a suspect, unresolved, which more launches confirm or
    clear. A sample of more launches still leaning to a drop (beyond the tolerance, p below SUSPECT_P, unconfirmed)
    stays a suspect and asks again: at a CV near twice the tolerance a drop of twice it takes 20 launches or more,
    which no single ask gives (scripts/simulate_nights.py: a suspect that asked once confirmed 13% of such drops
    within 5 nights)."""
    st = v.stat
    if v.verdict == Kind.UNRESOLVED and st and int(st.get("n_new", 2)) >= 2 and drops(v) \
            and float(st.get("p_worse", 1.0)) < SUSPECT_P:
        stat = cast(Test, {**v.stat, "suspect": True, "to_add": SUSPECT_LAUNCHES})
        return replace(v, stat=stat, note=f"{v.note}; still leaning to a drop (p {st['p_worse']:.2g}): a suspect, "
                                          f"{SUSPECT_LAUNCHES} more launches first on its config's next night")
    if v.verdict not in (Kind.REGRESSION, Kind.UNRESOLVED) or not st or int(st.get("n_new", 2)) >= 2 \
            or not drops(v):
        return v
    if v.verdict == Kind.UNRESOLVED and float(st.get("p_worse", 1.0)) >= SUSPECT_P:
        return v
    stat = cast(Test, {**v.stat, "suspect": True, "to_add": SUSPECT_LAUNCHES})
    return replace(v, verdict=Kind.UNRESOLVED, stat=stat,
                   note=f"suspect: one launch shows {v.stat['change'] * 100:+.1f}% (p {v.stat['p_worse']:.2g}), beyond "
                        f"the {v.stat['tolerance'] * 100:g}% tolerance; {SUSPECT_LAUNCHES} more launches confirm or "
                        "clear it (rounds tonight if the budget allows, else first on the config's next night)")


def drops(v: Verdict) -> bool:
    """Whether a verdict's change is a drop beyond its tolerance (whatever its p)."""
    return bool(v.stat) and -float(v.stat.get("gain", 0.0)) > float(v.stat.get("tolerance", 0.0))


def drops_together(vs: Sequence[Verdict]) -> bool:
    """Whether one config's series read a drop as a config, not as one series' noise: at least half of its tested
    series drop beyond their tolerance, or one drops with a p that holds across them (SUSPECT_P over their count,
    Bonferroni). A config of 14-19 series has one beyond the tolerance on most launches of unchanged code at a CV
    near it; a config's rounds and a suspect's launches are spent on the config (scripts/simulate_nights.py)."""
    judged = [v for v in vs if v.stat and v.verdict in (Kind.PASS, Kind.UNRESOLVED, Kind.REGRESSION,
                                                         Kind.IMPROVEMENT, Kind.KNOWN_COST)]
    dropping = [v for v in judged if drops(v)]
    if not dropping:
        return False
    return 2 * len(dropping) >= len(judged) or any(float(v.stat.get("p_worse", 1.0)) < SUSPECT_P / len(judged)
                                                    for v in dropping)


def pressing(vs: Sequence[Verdict], q: float) -> bool:
    """Whether a config's drop is already what its config-level test finds at the run's alpha q (family.config_p)
    with its series dropping together, though one launch does not confirm it: the launch that settles it is worth
    more than a config merely due tonight, whose time its round may take (that config runs on a later night, first
    once it waited twice the cover). Unchanged code reads so on about q of its configs' launches. Without it a drop
    whose config the schedule left out on its first night, and whose round was refused the next for the configs not
    yet run, was confirmed on its third night: 3 of 30 histories at CV 2% (scripts/simulate_nights.py)."""
    p = family.config_p(vs, q)
    return p is not None and p < q and drops_together(vs)


def as_config(vs: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts of a run with a suspect kept only where its config's series drop together (drops_together):
    elsewhere the series stays unresolved and asks its config's next night for nothing more than its launch."""
    by: dict[str, list[Verdict]] = {}
    for v in vs:
        by.setdefault(v.config, []).append(v)
    alone = {c for c, mine in by.items() if not drops_together(mine)}
    out = []
    for v in vs:
        if v.config in alone and v.stat.get("suspect"):
            stat = cast(Test, {k: x for k, x in v.stat.items() if k not in ("suspect", "to_add")})
            v = replace(v, stat=stat, note=f"{v.note}; but its config's other series do not drop with it: not a "
                                           "suspect, its config's next launch decides")
        out.append(v)
    return out
