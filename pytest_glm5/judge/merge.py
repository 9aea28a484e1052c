"""Run documents joined into one: the verdicts of xdist workers (and, later, of shards) read back, decided as one
family, and updated into the baselines once.

A worker ships its run document before the family decision (`decided: false`), so Benjamini-Hochberg runs once,
over every series of the run, exactly as in a run on one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import decide
from .baselines import BaselineError, Bound, Change, Verdict, baseline_path, select_updates, write_updates
from .stats import DEFAULT_ALPHA, DEFAULT_EFFECT


class MergeError(Exception):
    """Documents that cannot be joined; the message names which and why."""


def verdict_from_doc(d: dict[str, Any]) -> Verdict:
    """A verdict as report.verdict_doc wrote it."""
    b = d.get("bound")
    bound = None if b is None else Bound(
        d["metric"], b["kind"], float(b["value"]), float(b["tolerance"]), b.get("measured"), b.get("source") or "",
        float(b.get("slack") or 0.0), b.get("workload"), tuple(float(x) for x in b.get("launches") or ()),
        b.get("target"))
    return Verdict(d["config"], d["scenario"], d["metric"], float(d["measured"]), bound, d["verdict"],
                   dict(d.get("spread") or {}), list(d.get("samples") or []), dict(d.get("workload") or {}),
                   dict(d.get("provenance") or {}), list(d.get("launches") or []), dict(d.get("test") or {}),
                   d.get("note") or "", d.get("test_id") or "", d.get("model") or "")


@dataclass
class Merged:
    """The joined run: verdicts and config-vs-config verdicts as objects, the rest of the documents joined."""

    verdicts: list[Verdict] = field(default_factory=list)
    versus: list[Verdict] = field(default_factory=list)
    servers: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    known_issues: dict[str, str] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    statistics: dict[str, Any] | None = None
    family_size: int = 0


def join(docs: Sequence[dict[str, Any]]) -> Merged:
    """Join run documents of one run (workers) or of its shards; a config measured in two of them is an error."""
    m = Merged()
    seen: dict[tuple[str, str, str], int] = {}
    for i, doc in enumerate(docs):
        for d in doc.get("verdicts", []):
            key = (d["config"], d["scenario"], d["metric"])
            if key in seen:
                raise MergeError(f"{' '.join(key)} was measured in document {seen[key] + 1} and in document "
                                 f"{i + 1}: each config must run in one place only")
            seen[key] = i
            m.verdicts.append(decide.before_family(verdict_from_doc(d)))
        m.versus += [decide.before_family(verdict_from_doc(d)) for d in doc.get("versus", [])]
        m.servers.update(doc.get("servers") or {})
        m.problems.update(doc.get("problems") or {})
        m.known_issues.update(doc.get("known_issues") or {})
        m.results += list(doc.get("results") or [])
        m.events += [(str(c), str(msg)) for c, msg in doc.get("events") or []]
        m.statistics = m.statistics or doc.get("statistics")
    return m


def decide_family(m: Merged, alpha: float) -> list[Verdict]:
    """Benjamini-Hochberg over every statistical series; returns the confirmed regressions (they fail the run)."""
    m.family_size, confirmed = decide.confirm([*m.verdicts, *m.versus], alpha)
    return confirmed


def update(root: Path, verdicts: Sequence[Verdict], mode: str) -> tuple[list[Change], list[str]]:
    """--update-baselines from joined verdicts: each into the file of its hardware and model."""
    by_file: dict[Path, list[Verdict]] = {}
    for v in select_updates(verdicts, mode):
        by_file.setdefault(baseline_path(root, str(v.provenance.get("hardware")), v.model), []).append(v)
    changes: list[Change] = []
    errors: list[str] = []
    for path, vs in by_file.items():
        try:
            changes += write_updates(path, vs)
        except (OSError, BaselineError) as exc:
            errors.append(f"cannot update {path}: {getattr(exc, 'strerror', None) or exc}; the file is unchanged")
    return changes, errors


def merged_doc(m: Merged, changes: Sequence[Change], run: dict[str, Any]) -> dict[str, Any]:
    """The joined run as one run document (report.json_report's shape), after the family decision."""
    from ..report.terminal import document

    return document(m.servers, m.verdicts, changes, m.results, m.versus, m.statistics, run, m.problems,
                    m.known_issues, m.events)


@dataclass
class MergeRun:
    """What `glm5 merge` decided and printed."""

    lines: list[str]
    regressed: bool
    errors: list[str]


def merge_reports(paths: Sequence[Path], configs_path: Path | None, alpha: float | None, update_mode: str | None,
                  baselines: Path, outputs: Any) -> MergeRun:
    """`glm5 merge`: shard reports joined, decided as one run, written once."""
    import datetime as dt
    import json

    from ..configs import ConfigError, load_configs
    from ..report.outputs import write_all
    from ..report.terminal import campaign_lines, summary_lines, verdict_table
    from .gate import Statistics, versus_all

    docs = []
    for p in paths:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MergeError(f"{p}: no such file (give the shards' --glm5-report files)") from None
        except (OSError, UnicodeError, ValueError) as exc:
            raise MergeError(f"{p}: not a --glm5-report file: {exc}") from None
        if not isinstance(doc, dict) or "verdicts" not in doc:
            raise MergeError(f"{p}: not a --glm5-report file (no verdicts)")
        docs.append(doc)
    m = join(docs)
    stats = m.statistics or {}
    a = alpha if alpha is not None else float(stats.get("alpha") or DEFAULT_ALPHA)
    if configs_path is not None:
        try:
            configs = load_configs(configs_path)
        except ConfigError as exc:
            raise MergeError(str(exc)) from None
        m.versus = versus_all(m.verdicts, configs, Statistics(alpha=a, effect=float(stats.get("effect")
                                                                                        or DEFAULT_EFFECT)))
    confirmed = decide_family(m, a)
    changes, errors = update(baselines, m.verdicts, update_mode) if update_mode else ([], [])
    first = docs[0].get("run") or {} if docs else {}
    run = {**first, "time": first.get("time") or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "merged_from": [str(p) for p in paths]}
    written = write_all(merged_doc(m, changes, run), outputs)
    lines = [*verdict_table(m.verdicts),
             *summary_lines(m.verdicts, changes, update_mode, m.problems, [*errors, *written.errors], m.family_size,
                            a),
             *campaign_lines(m.versus), *(f"glm5 {line}" for line in written.lines)]
    return MergeRun(lines, bool(confirmed), [*errors, *written.errors])
