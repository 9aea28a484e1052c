"""What a history says about each series: its recent trend, its change points (the first bad night, its commit
and build, the step with its CI) and, where the baselines set one, how far there is still to go to the target.

`glm5 history h/ --config tp8 --metric output_throughput` prints, per series:

    tp8 single-stream output_throughput (sim-glm5-sm120-x0.01): 90 runs, last 950.2 tok/s (+0.3% on the run
      before), trend -0.1% per run
      change point at run 61 (2026-11-12T02:00:00+00:00, commit 1a2b3c4, build default): -5.0% [-5.6%, -4.4%],
        p 3.1e-20: 1000.1 -> 950.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..judge.verdicts import fmt, to_go_text
from ..metrics import higher_is_better, unit_of
from .changepoints import MIN_RUN, ChangePointsUnavailable, Step, find, trend
from .history import Series


@dataclass
class Analysis:
    """One series with what was found in it."""

    series: Series
    steps: list[Step]
    drift: float | None  # relative change per run, recent runs
    unavailable: str = ""  # why there are no change points (Otava missing)

    @property
    def worse_steps(self) -> list[Step]:
        """Steps the worse way for this metric (drops of throughput, rises of latency)."""
        better_up = higher_is_better(self.series.metric)
        return [s for s in self.steps if (s.change < 0) == better_up]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the HTML page."""
        s = self.series
        return {"hardware": s.hardware, "model": s.model, "config": s.config, "scenario": s.scenario,
                "metric": s.metric, "unit": unit_of(s.metric).strip(), "bound": s.bound, "target": s.target,
                "points": [{"run": p.index, "time": p.time, "commit": p.commit, "build": p.build, "value": p.value,
                            "verdict": p.verdict} for p in s.points],
                "steps": [{"at": st.index, "run": s.points[st.index].index, "time": s.points[st.index].time,
                           "commit": s.points[st.index].commit, "build": s.points[st.index].build,
                           "change": st.change, "ci": list(st.ci), "p": st.p, "before": st.before,
                           "after": st.after, "worse": st in self.worse_steps} for st in self.steps],
                "drift": self.drift, "unavailable": self.unavailable}


def analyse(series: Sequence[Series]) -> list[Analysis]:
    """Change points and trend of each series; without Otava the trend alone, saying why."""
    out = []
    for s in series:
        try:
            steps = find(s.values())
            why = ""
        except ChangePointsUnavailable as exc:
            steps, why = [], str(exc)
        out.append(Analysis(s, steps, trend(s.values()), why))
    return out


def target_line(value: float, target: float | None, metric: str, drift: float | None) -> str:
    """`target 100 tok/s: 10% of it, 9.7x to go, +1.2% per run (about 190 runs at this pace)`; '' without a target.

        >>> target_line(42.1, 100.0, "output_throughput", None)
        'target 100.00 tok/s: 42% of it, 2.4x to go'
    """
    if target is None or value <= 0:
        return ""
    unit = unit_of(metric)
    up = higher_is_better(metric)
    factor = target / value if up else value / target
    if factor <= 1:
        return f"target {fmt(target)}{unit}: reached"
    pace = ""
    if drift is not None:
        toward = drift > 0 if up else drift < 0
        pace = f", {drift * 100:+.2f}% per run"
        if toward and abs(drift) > 1e-9:
            runs = math.log(factor) / abs(math.log(1 + drift))
            pace += f" (about {runs:.0f} runs at this pace)"
        else:
            pace += " (not heading there)"
    return f"target {fmt(target)}{unit}: {to_go_text(factor, up)}{pace}"


def lines(analyses: Sequence[Analysis]) -> list[str]:
    """The printed view of `glm5 history`."""
    out: list[str] = []
    notes = {a.unavailable for a in analyses if a.unavailable}
    out += [f"note: {n}" for n in sorted(notes)]
    for a in analyses:
        s = a.series
        unit = unit_of(s.metric)
        last = s.points[-1].value
        drift = "" if a.drift is None else f", trend {a.drift * 100:+.2f}% per run"
        step = (f" ({(last / s.points[-2].value - 1) * 100:+.1f}% on the run before)" if len(s.points) > 1 else "")
        out.append(f"{s.key} ({s.hardware}): {len(s.points)} runs, last {fmt(last)}{unit}{step}{drift}")
        if not a.steps and not a.unavailable:
            short = len(s.points) < 2 * MIN_RUN
            out.append(f"  no change point{f' (one needs {MIN_RUN} runs on each side)' if short else ''}")
        for st in a.steps:
            p = s.points[st.index]
            worse = " (worse)" if st in a.worse_steps else " (better)"
            out.append(f"  change point at run {p.index + 1} ({p.time}, commit {p.commit or '?'}, build "
                       f"{p.build or '?'}): {st.describe()}: {fmt(st.before)} -> {fmt(st.after)}{unit}{worse}")
        tl = target_line(last, s.target, s.metric, a.drift)
        if tl:
            out.append(f"  {tl}")
    return out
