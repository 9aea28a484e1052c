"""What resolving a series costs on the box (`glm5 plan`): the launches a tolerance needs at a CV, and the hours
those launches take, from a report's unresolved series, a baselines file's references, or figures given.

    >>> price(0.02, 0.05, 8, 2700.0)
    'resolving 5% at CV 2.0% against 8 reference launches: about 2 launches, 1.5 h more on this box (45 min a launch)'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..metrics import log_cv
from ..plan import hours
from .baselines import BaselineStore
from .decide import to_resolve
from .stats import detectable_drop
from .verdicts import Kind, read_report, verdicts_of


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
