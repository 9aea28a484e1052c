"""`glm5 compare BASE.json HEAD.json`: two --glm5-report files made elsewhere, judged as the A/B gate judges
(HEAD against BASE per series, SAME / DIFFERENT / UNKNOWN, Benjamini-Hochberg over the series).

Each series needs launch-level values in both reports (`launches` of a verdict: run with --glm5-launches N, or
the arms of an A/B run); with one launch a side there is no spread to test with, and the answer says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .decide import AB_TOLERANCE, Look, ab, family
from .stats import DEFAULT_ALPHA, DEFAULT_EFFECT
from .verdicts import ReportError, read_report, same_machines

Series = tuple[str, str, str]


class CompareError(Exception):
    """A report that cannot be compared; the message names the file and what is wrong."""


@dataclass
class Outcome:
    """The lines to print and whether HEAD regressed."""

    lines: list[str]
    regressed: bool
    compared: int


def launch_values(path: Path, doc: dict[str, Any]) -> dict[Series, list[float]]:
    """Launch values per (config, scenario, metric) of a run document; CompareError when one is not a number."""
    out: dict[Series, list[float]] = {}
    for i, v in enumerate(doc["verdicts"]):
        try:
            key = (str(v["config"]), str(v["scenario"]), str(v["metric"]))
            values = v.get("launches") or [v["measured"]]
            floats = [float(x) for x in values]
        except (KeyError, TypeError, ValueError):
            raise CompareError(f"{path}: verdict {i} lacks config, scenario, metric or numeric values") from None
        if any(not x > 0 for x in floats):
            raise CompareError(f"{path}: verdict {i} ({' '.join(key)}) has a value <= 0")
        out[key] = floats
    return out


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
    common = [k for k in a if k in b]
    if not common:
        raise CompareError(f"{base} and {head} share no (config, scenario, metric) series")
    look = Look(alpha, 1, 1, effect)
    alone = [ab(*k, a[k], b[k], ("base", "head"), b[k], look, tolerance) for k in common]
    verdicts = family(alone, alpha).verdicts  # what Benjamini-Hochberg does not confirm reads UNKNOWN, as in --glm5-ab
    lines = [f"{base.name} -> {head.name}: {len(common)} series, alpha {alpha:g} (Benjamini-Hochberg), tolerance "
             f"{tolerance * 100:g}%, SAME rules out {effect * 100:g}%"]
    regressed = False
    for v in verdicts:
        answer = str(v.stat["answer"])
        bad = v.verdict == "regression"
        regressed = regressed or bad
        lines.append(f"{'REGRESSION ' if bad else ''}{v.config} {v.scenario} {v.metric}: {answer}: "
                     f"{v.stat['describe']}")
    missing = sorted(set(a) ^ set(b))
    if missing:
        lines.append(f"in one report only, not compared: {len(missing)} (e.g. {' '.join(missing[0])})")
    return Outcome(lines, regressed, len(common))
