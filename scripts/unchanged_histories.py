#!/usr/bin/env python3
"""Unchanged builds over nights, through pytest itself: the check of issue 39 that no carried evidence turns an
unchanged build into a confirmed regression. For each noise, --histories histories of --nights nights of the
rehearsal (`pytest -m sm120 --glm5-sim`, the repository's baselines, nothing updated), each history against one
--glm5-history directory of its own, every night on the same code; then every confirmed regression is named.

    python scripts/unchanged_histories.py                            # 5 histories x 3 nights at noise 0.02 and 0.05
    python scripts/unchanged_histories.py --noise 0.05 --histories 1 --nights 2 -k "tp8 and single"

With --slowdown the nights from --slow-from on run a slower emulator (--glm5-sim-slowdown): the drop must be
confirmed by night --confirm-by and nothing before the slowdown; issue 39's check of a real drop, the 4 nights of

    python scripts/unchanged_histories.py --noise 0.05 --histories 1 --nights 4 --budget 75m --slowdown 0.9 \
        -k "tp8 and (single or dual) and not trtllm and not cutedsl and not decode4"

Each night's exit status, run document (--glm5-report) and output are kept under --out (a new temporary directory
unless given). Exit 0 when no night confirmed a regression and every night ran; 1 otherwise, with the lines that say
where.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The selection: every config's single and dual-stream tests, the series where unchanged builds were confirmed
# as regressions (a host-bound millisecond, one slow launch). No budget by default: with -k the schedule does not pick
# (a selection by hand), so a budget would run the same first configs every night and never the rest.
SELECTION = "single or dual"


@dataclass
class Night:
    """What one night of a history did."""

    status: int
    confirmed: list[str] = field(default_factory=list)  # "config scenario metric: the line" per confirmed regression
    judged: int = 0  # series the night decided or left unresolved
    configs: list[str] = field(default_factory=list)
    outcome: str = ""
    seconds: float = 0.0


def night(out: Path, history: Path, noise: float, selection: str, budget: str, extra: Sequence[str],
          slowdown: float | None = None) -> Night:
    """One `pytest -m sm120 --glm5-sim` night against `history`; its report and output are kept under `out`."""
    report = out / "report.json"
    argv = [sys.executable, "-m", "pytest", "-m", "sm120", "--glm5-sim", "-k", selection, "-p", "no:cacheprovider",
            f"--glm5-history={history}", f"--glm5-sim-noise={noise}", f"--glm5-report={report}", "-q",
            *([f"--glm5-budget={budget}"] if budget else []),
            *([f"--glm5-sim-slowdown={slowdown}"] if slowdown else []), *extra]
    start = time.monotonic()
    with open(out / "output.txt", "w", encoding="utf-8") as log:
        status = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    n = Night(status, seconds=time.monotonic() - start)
    if not report.exists():
        n.outcome = f"no report written (exit {status}): see {out / 'output.txt'}"
        return n
    doc = json.loads(report.read_text(encoding="utf-8"))
    n.outcome = str((doc.get("outcome") or {}).get("line", ""))
    verdicts = [v for v in doc.get("verdicts", []) + doc.get("versus", []) if v.get("test")]
    n.judged = len(verdicts)
    n.configs = sorted({str(v["config"]) for v in verdicts})
    n.confirmed = [f"{v['config']} {v['scenario']} {v['metric']}: {v.get('note') or v['test'].get('describe')}"
                   for v in verdicts if v.get("verdict") == "regression"]
    return n


def main(argv: Sequence[str] | None = None) -> int:
    """Run the histories and say what each night confirmed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--noise", type=float, nargs="+", default=[0.02, 0.05], help="--glm5-sim-noise of each set")
    ap.add_argument("--histories", type=int, default=5, help="histories per noise (default 5)")
    ap.add_argument("--nights", type=int, default=3, help="nights per history (default 3)")
    ap.add_argument("-k", dest="selection", default=SELECTION, help=f"the tests (default {SELECTION!r})")
    ap.add_argument("--budget", default="", help="--glm5-budget of each night, in the box's time (default none)")
    ap.add_argument("--out", type=Path, default=None, help="where each night's report and output are kept")
    ap.add_argument("--slowdown", type=float, default=None, help="the emulator's speed from --slow-from on (0.9: "
                    "10%% slower): the drop must be confirmed by --confirm-by, nothing before it")
    ap.add_argument("--slow-from", type=int, default=2, help="the first slower night (default 2)")
    ap.add_argument("--confirm-by", type=int, default=3, help="the night the drop must be confirmed by (default 3)")
    args, extra = ap.parse_known_args(argv)
    if args.histories < 1 or args.nights < 1 or any(not 0 <= x < 1 for x in args.noise):
        ap.error("--histories and --nights must be at least 1, --noise each in [0, 1)")
    if args.slowdown is not None and not (0 < args.slowdown < 1 and 1 <= args.slow_from <= args.confirm_by
                                          <= args.nights):
        ap.error("--slowdown must be in (0, 1), and --slow-from <= --confirm-by <= --nights")
    out = args.out or Path(tempfile.mkdtemp(prefix="glm5-histories-"))
    print(f"unchanged_histories: {len(args.noise)} x {args.histories} histories of {args.nights} nights "
          f"(-k {args.selection!r}, budget {args.budget or 'none'}); reports under {out}", flush=True)
    false = broken = missed = 0
    for noise in args.noise:
        for h in range(1, args.histories + 1):
            history = out / f"noise{noise:g}-h{h}" / "history"
            history.mkdir(parents=True, exist_ok=True)
            found: int | None = None  # the night the slowdown was first confirmed
            for k in range(1, args.nights + 1):
                where = history.parent / f"night{k}"
                where.mkdir(exist_ok=True)
                slow = args.slowdown if args.slowdown is not None and k >= args.slow_from else None
                n = night(where, history, noise, args.selection, args.budget, extra, slow)
                if slow is None:
                    false += len(n.confirmed)
                elif n.confirmed and found is None:
                    found = k
                broken += n.status not in (0, 1) or not n.outcome or n.outcome.startswith("no report")
                print(f"noise {noise:g} history {h} night {k}{f' (slowdown {slow:g})' if slow else ''}: exit "
                      f"{n.status}, {len(n.configs)} configs, {n.judged} series, {len(n.confirmed)} confirmed "
                      f"regressions, {n.seconds:.0f} s: {n.outcome}", flush=True)
                for line in n.confirmed:
                    print(f"    CONFIRMED {line}", flush=True)
            if args.slowdown is not None:
                missed += found is None or found > args.confirm_by
                print(f"noise {noise:g} history {h}: the slowdown from night {args.slow_from} was "
                      + (f"confirmed on night {found}" if found else "never confirmed"), flush=True)
    print(f"unchanged_histories: {false} confirmed regressions on unchanged builds"
          + (f", {missed} slowdowns not confirmed by night {args.confirm_by}" if args.slowdown is not None else "")
          + (f", {broken} night{'s' if broken != 1 else ''} that did not run to an outcome" if broken else ""))
    return 1 if false or broken or missed else 0


if __name__ == "__main__":
    sys.exit(main())
