"""`glm5 plan`: what resolving a series costs on this box, in launches and hours."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..settings import parse_duration, parse_effect, parse_fraction
from .args import checked


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `plan` subcommand's options."""
    p = sub.add_parser("plan", help="what resolving a series costs on this box, in launches and hours",
                       description="From a --glm5-report (its unresolved series), a baselines file (each reference), "
                                   "or --cv and --tolerance: the launches that resolve the tolerance (the 95%% bound "
                                   "of the change inside it, 80%% power) and their time at --load-time plus "
                                   "--measure-time a launch (else the report's loads or the file's [costs]). Exit 0, "
                                   "or 2 on bad input.")
    p.add_argument("source", type=Path, nargs="?", help="a --glm5-report JSON or a baselines TOML")
    p.add_argument("--cv", type=checked(parse_fraction), help="launch-to-launch CV, e.g. 0.05")
    p.add_argument("--tolerance", type=checked(parse_effect), help="the change to resolve (default: each entry's, "
                                                                      "else 0.05)")
    p.add_argument("--reference", type=int, default=5, help="reference launches (with --cv; 0: an A/B)")
    p.add_argument("--load-time", type=checked(parse_duration), help="one load on this box, e.g. 30m")
    p.add_argument("--measure-time", type=checked(parse_duration), default=0.0,
                   help="measuring on one launch, e.g. 15m (default 0)")


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 plan`; exit 2 on bad input."""
    from ..judge.baselines import BaselineError
    from ..judge.verdicts import ReportError
    from ..night.plan import from_baselines, from_report, price

    launch = ns.load_time + ns.measure_time if ns.load_time is not None else None
    try:
        if ns.source is None:
            if ns.cv is None or launch is None:
                print("glm5 plan: error: give a report or baselines file, or --cv and --load-time", file=sys.stderr)
                return 2
            lines = [price(ns.cv, ns.tolerance or 0.05, ns.reference or None, launch)]
        elif ns.source.suffix == ".toml":
            lines = from_baselines(ns.source, launch, ns.tolerance)
        else:
            lines = from_report(ns.source, launch)
    except (BaselineError, ReportError) as exc:
        print(f"glm5 plan: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
