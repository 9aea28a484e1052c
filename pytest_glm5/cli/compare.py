"""`glm5 compare`: two --glm5-report files judged as the A/B gate judges (SAME / DIFFERENT / UNKNOWN per
series), the outcome line last."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..settings import parse_alpha, parse_effect, parse_fraction
from .args import checked


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `compare` subcommand's options."""
    p = sub.add_parser("compare", help="judge HEAD against BASE from two --glm5-report files",
                       description="Per series: SAME / DIFFERENT / UNKNOWN with the change, its 95%% CI, p and CV. "
                                   "Exit 1 on a regression, 0 otherwise, 2 on bad input.")
    p.add_argument("base", type=Path, help="the reference report (--glm5-report of the base build)")
    p.add_argument("head", type=Path, help="the report to judge")
    p.add_argument("--alpha", type=checked(parse_alpha), default=0.01, help="false-alarm rate (default 0.01)")
    p.add_argument("--effect", type=checked(parse_effect), default=0.05,
                   help="SAME rules out a change this large (default 0.05)")
    p.add_argument("--tolerance", type=checked(parse_fraction), default=0.02,
                   help="a smaller change never fails (default 0.02)")
    p.add_argument("--mixed", action="store_true",
                   help="compare reports of different hardware or models anyway (refused by default)")


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 compare`; its last line is the outcome (as a run's): exit 1 on a regression, 2 on bad input."""
    from ..judge.compare import CompareError, compare_reports
    from ..report.outcome import Facts, decide

    try:
        compared = compare_reports(ns.base, ns.head, ns.alpha, ns.effect, ns.tolerance, ns.mixed)
    except CompareError as exc:
        print(f"glm5 compare: error: {exc}", file=sys.stderr)
        return 2
    outcome = decide(Facts(verdicts=compared.verdicts, regressed=compared.regressed))
    print("\n".join([*compared.lines, outcome.line]))
    return 1 if outcome.failed else 0
