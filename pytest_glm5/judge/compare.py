"""`glm5 compare BASE.json HEAD.json`: two --glm5-report files made elsewhere, judged as the A/B gate judges
(HEAD against BASE per series, SAME / DIFFERENT / UNKNOWN, the family decision over the configs).

Each series uses launch-level values from both reports (`launches` of a verdict). Where a side has one launch, the
between-launch spread comes from the reference launches each report was judged against (`bound.launches`), as
the nightly does, and each series borrows what its family lent it in the runs (the variance model a report keeps
with each verdict judged against baselines: `test.pooled`), so two one-launch nightly reports of one box are
compared on the box's pooled spread; with none of these there is no spread to test with, and the last lines say what
would give one. What a
run did not judge (client-bound, emulator-bound, too few requests) is not judged here either: its values were the
client's or the host's, not the server's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .decide import AB_TOLERANCE, ab
from .family import family
from .looks import Look
from .stats import DEFAULT_ALPHA, DEFAULT_EFFECT, launches_needed
from .variance import Spread
from .verdicts import NOT_JUDGED, Kind, ReportError, Verdict, read_report, same_machines

Series = tuple[str, str, str]


class CompareError(Exception):
    """A report that cannot be compared; the message names the file and what is wrong."""


@dataclass
class Outcome:
    """The lines to print, the verdicts (HEAD against BASE, after the family decision) and whether HEAD regressed."""

    lines: list[str]
    compared: int
    verdicts: list[Verdict]

    @property
    def regressed(self) -> list[Verdict]:
        """HEAD's regressions against BASE."""
        return [v for v in self.verdicts if v.verdict == Kind.REGRESSION]


@dataclass(frozen=True)
class Side:
    """One report's view of a series: its launch values, its reference's launches and what the run called it."""

    values: list[float]
    reference: list[float]
    verdict: str
    lent: Spread | None = None  # what the series' family lent it in that run (judge/variance.py)


def launch_values(path: Path, doc: dict[str, Any]) -> dict[Series, Side]:
    """Launch values per (config, scenario, metric) of a run document; CompareError when one is not a number."""
    out: dict[Series, Side] = {}
    for i, v in enumerate(doc["verdicts"]):
        try:
            key = (str(v["config"]), str(v["scenario"]), str(v["metric"]))
            values = v.get("launches") or [v["measured"]]
            floats = [float(x) for x in values]
            reference = [float(x) for x in (v.get("bound") or {}).get("launches") or []]
        except (KeyError, TypeError, ValueError):
            raise CompareError(f"{path}: verdict {i} lacks config, scenario, metric or numeric values") from None
        if any(not 0 < x < math.inf for x in [*floats, *reference]):
            raise CompareError(f"{path}: verdict {i} ({' '.join(key)}) has a value that is not a finite number > 0")
        pooled = (v.get("test") or {}).get("pooled")
        out[key] = Side(floats, reference, str(v.get("verdict", "")),
                        Spread.from_dict(pooled) if isinstance(pooled, dict) else None)
    return out


def _lent(a: Side, b: Side) -> Spread | None:
    """The family spread a series was lent in either run: the one of more degrees of freedom (the later history)."""
    have = [s.lent for s in (a, b) if s.lent is not None and s.lent.lent[1] > 0]
    return max(have, key=lambda s: s.lent[1]) if have else None


def compare_reports(base: Path, head: Path, alpha: float = DEFAULT_ALPHA, effect: float = DEFAULT_EFFECT,
                    tolerance: float = AB_TOLERANCE, mixed: bool = False) -> Outcome:
    """HEAD against BASE for every series both hold; reports of different hardware or models only with `mixed`."""
    try:
        docs = read_report(base), read_report(head)
    except ReportError as exc:
        raise CompareError(str(exc)) from None
    try:
        if not mixed:
            same_machines([(str(base), docs[0]), (str(head), docs[1])], "two reports")
    except ReportError as exc:
        raise CompareError(f"{exc}; pass --mixed to compare anyway") from None
    a, b = launch_values(base, docs[0]), launch_values(head, docs[1])
    both = [k for k in a if k in b]
    if not both:
        raise CompareError(f"{base} and {head} share no (config, scenario, metric) series")
    unjudged = {k: (name, side.verdict) for k in both for name, side in ((base.name, a[k]), (head.name, b[k]))
                if side.verdict in NOT_JUDGED}
    common = [k for k in both if k not in unjudged]
    look = Look(alpha, 1, 1, effect)
    alone = [ab(*k, a[k].values, b[k].values, ("base", "head"), b[k].values, look, tolerance,
                prior=[r for r in (a[k].reference, b[k].reference) if len(r) >= 2], pooled=_lent(a[k], b[k]))
             for k in common]
    verdicts = family(alone, alpha).verdicts  # what the family does not confirm reads UNKNOWN, as in --glm5-ab
    lines = [f"{base.name} -> {head.name}: {len(common)} series, alpha {alpha:g} (a config one test, Holm), tolerance "
             f"{tolerance * 100:g}%, SAME rules out {effect * 100:g}%"]
    for v in verdicts:
        answer = str(v.stat["answer"])
        bad = v.verdict == Kind.REGRESSION
        why = f": {v.note}" if answer == "UNKNOWN" and v.note else ""
        lines.append(f"{'REGRESSION ' if bad else ''}{v.config} {v.scenario} {v.metric}: {answer}: "
                     f"{v.stat['describe']}{why}")
    if unjudged:
        first = next(iter(unjudged.items()))
        lines.append(f"not judged, as the run that measured them did not judge them: {len(unjudged)} (e.g. "
                     f"{' '.join(first[0])}: {first[1][1]} in {first[1][0]})")
    missing = sorted(set(a) ^ set(b))
    if missing:
        lines.append(f"in one report only, not compared: {len(missing)} (e.g. {' '.join(missing[0])})")
    blind = [v for v in verdicts if math.isnan(float(v.stat.get("p_worse", 0.0)))]
    unknown = [v for v in verdicts if v.stat.get("answer") == "UNKNOWN" and v not in blind]
    if unknown:
        need = [launches_needed(float(v.stat["cv"]), effect, alpha, None, power=0.8) or 0 for v in unknown]
        lines.append(f"cannot decide {len(unknown)} series on these launches; reports of nights run with "
                     f"--glm5-launches {max(need)} would (80% power at the CV they show), or compare more nights")
    if blind:
        lines.append(f"cannot decide {len(blind)} series: one launch each and no reference launches in either report "
                     "to estimate the spread with; run the nights with --glm5-launches 3 (or record references with "
                     "--update-baselines --glm5-launches 5)")
    return Outcome(lines, len(common), verdicts)
