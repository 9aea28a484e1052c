"""`glm5 merge`: shard reports joined into one run, decided as one, baselines updated and every output written
once."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings import parse_alpha
from .args import checked

if TYPE_CHECKING:
    from ..judge.merge import Merged
    from ..judge.verdicts import Change, Verdict
    from ..report.outcome import Facts, Outcome
    from ..report.outputs import Outputs


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `merge` subcommand's options."""
    p = sub.add_parser("merge", help="join shard reports (--glm5-report of each --glm5-shard I/N) into one run",
                       description="The shards' verdicts decided as one run (compare_to across shards, one "
                                   "config-level family), baselines updated once, every report written once. "
                                   "Exit 1 on a regression, 2 on bad input.")
    p.add_argument("reports", type=Path, nargs="+", help="the shards' --glm5-report files")
    p.add_argument("--configs", type=Path, help="the configs file (for compare_to across shards)")
    p.add_argument("--alpha", type=checked(parse_alpha), help="false-alarm rate (default: the shards')")
    p.add_argument("--update-baselines", nargs="?", const="new", choices=("new", "all"),
                   help="record new and improved bounds once (=all: regressions too)")
    p.add_argument("--baselines", type=Path, default=Path("baselines"), help="baselines directory (default baselines)")
    p.add_argument("--report", type=Path, help="write the joined JSON report here")
    p.add_argument("--html", type=Path, help="write the joined HTML page here")
    p.add_argument("--markdown", type=Path, help="write the joined markdown summary here")
    p.add_argument("--history", type=Path, help="append the joined run to this history directory")


@dataclass
class MergeOutcome:
    """What `glm5 merge` decided and printed."""

    lines: list[str]
    failed: bool  # the outcome's: regressions, crashes or outputs not written
    errors: list[str]


def merge_reports(paths: Sequence[Path], configs_path: Path | None, alpha: float | None, update_mode: str | None,
                  baselines: Path, outputs: Outputs) -> MergeOutcome:
    """`glm5 merge`: shard reports joined (the same hardware and model, each config covered exactly once), decided
    as one run, baselines updated once, every output written once. ReportError or ConfigError says what is wrong."""
    from ..configs import load_configs
    from ..judge.gate import Statistics, references_of, versus_all
    from ..judge.merge import MergeError, coverage, join, update
    from ..judge.verdicts import ReportError, read_report, run_document
    from ..report.finish import finish
    from ..report.history import run_ids
    from ..report.outcome import Facts
    from ..report.terminal import campaign_lines, summary_lines, verdict_table

    docs = [read_report(p) for p in paths]
    names = [str(p) for p in paths]
    try:
        coverage(docs, names)
        view = join(docs, names)
    except MergeError as exc:
        raise ReportError(str(exc)) from None
    stats = view.statistics or {}
    a = alpha if alpha is not None else float(stats.get("alpha") or 0.01)
    if configs_path is not None:
        configs = load_configs(configs_path)
        statistics = Statistics(alpha=a, effect=float(stats.get("effect") or 0.05))
        view.versus = versus_all(view.verdicts, references_of(configs), statistics)
    first = docs[0].get("run") or {} if docs else {}
    run = {**first, "time": first.get("time") or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "merged_from": names, "run_ids": [i for d in docs for i in run_ids(d.get("run") or {})]}
    run.pop("shard", None)

    def facts(v: Merged, regressed: list[Verdict], errs: list[str]) -> Facts:
        return Facts(verdicts=v.verdicts, regressed=regressed, problems=v.problems, known=frozenset(v.known_issues),
                     errors=errs)

    def document(v: Merged, changes: Sequence[Change], outcome: Outcome) -> dict[str, Any]:
        return {**run_document(v.servers, v.verdicts, changes, v.results, v.versus, v.statistics, run, v.problems,
                               v.known_issues, v.events), "outcome": outcome.to_dict()}

    done = finish(view, a, facts, document, outputs,
                  record=(lambda vs: update(baselines, vs, update_mode)) if update_mode else None)
    view = done.view
    lines = [*verdict_table(view.verdicts),
             *summary_lines(view.verdicts, done.changes, update_mode, view.problems, done.errors,
                            view.family_size, a),
             *campaign_lines(view.versus), *(f"glm5 {line}" for line in (done.written.lines if done.written else [])),
             done.outcome.line]
    return MergeOutcome(lines, done.outcome.failed, done.errors)


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 merge`; exit 1 on a regression or a failed write, 2 on bad input."""
    from ..configs import ConfigError
    from ..judge.verdicts import ReportError
    from ..report.outputs import Outputs

    out = Outputs(report=ns.report, html=ns.html, markdown=ns.markdown, history=ns.history)
    try:
        run = merge_reports(ns.reports, ns.configs, ns.alpha, ns.update_baselines, ns.baselines, out)
    except (ReportError, ConfigError) as exc:
        print(f"glm5 merge: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(run.lines))
    return 1 if run.failed else 0
