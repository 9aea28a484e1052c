"""`glm5 history`: trends and change points of a --glm5-history directory, series by series."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `history` subcommand's options."""
    p = sub.add_parser("history", help="trends and change points of a --glm5-history directory",
                       description="Per series: runs, last value, trend, change points (first bad run, its commit "
                                   "and build, the step with its 95%% CI) and the distance to a target. Exit 0, or 2 "
                                   "on bad input.")
    p.add_argument("dir", type=Path, help="the --glm5-history directory")
    p.add_argument("--config", help="only this config")
    p.add_argument("--metric", help="only this metric, e.g. output_throughput")
    p.add_argument("--scenario", help="only this scenario")


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 history`; exit 2 on bad input."""
    from ..report.history import HistoryError, load_dir, series_of
    from ..report.trends import analyse, lines

    try:
        runs, notes = load_dir(ns.dir)
    except HistoryError as exc:
        print(f"glm5 history: error: {exc}", file=sys.stderr)
        return 2
    series = series_of(runs, ns.config, ns.metric, ns.scenario)
    for n in notes:
        print(f"glm5 history: {n}", file=sys.stderr)
    if not series:
        known = sorted({(s.config, s.metric) for s in series_of(runs)})
        asked = " ".join(f"--{k} {v}" for k, v in (("config", ns.config), ("metric", ns.metric),
                                                     ("scenario", ns.scenario)) if v is not None)
        held = (f"it holds {len(known)} (config, metric) pairs, e.g. " + ", ".join(f"{c} {m}" for c, m in known[:6])
                if known else f"it holds no readable run ({len(notes)} lines skipped, named above)")
        print(f"glm5 history: error: no series matches {asked or 'anything'} in {ns.dir}; {held}", file=sys.stderr)
        return 2
    print("\n".join(lines(analyse(series))))
    return 0
