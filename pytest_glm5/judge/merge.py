"""Run documents joined into one: the verdicts of xdist workers and of shards read back, decided as one family,
and updated into the baselines once.

A worker ships its run document before the family decision, and a shard's verdicts keep what their own test said
(`alone`), so the family decision runs once, over every config of the run, exactly as in a run on one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import decide, family, suspects
from .baselines import BaselineError, baseline_path, select_updates, unfit_to_record, write_updates
from .stats import DEFAULT_ALPHA, detectable_drop
from .verdicts import Change, Kind, ReportError, Verdict, same_machines, verdict_from_doc


class MergeError(Exception):
    """Documents that cannot be joined; the message names which and why."""


@dataclass
class Merged:
    """A run's verdicts and config-vs-config verdicts as objects, with the rest of its documents joined."""

    verdicts: list[Verdict] = field(default_factory=list)
    versus: list[Verdict] = field(default_factory=list)
    servers: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    known_issues: dict[str, str] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    statistics: dict[str, Any] | None = None
    family_size: int = 0
    confirmed: list[Verdict] = field(default_factory=list)  # regressions the family decision confirmed


def join(docs: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> Merged:
    """Join run documents of one run (workers) or of its shards; a config measured in two of them, or documents
    of different hardware or models, are an error."""
    labels = list(names) if names is not None else [f"document {i + 1}" for i in range(len(docs))]
    try:
        same_machines(list(zip(labels, docs, strict=True)), "shard reports")
    except ReportError as exc:
        raise MergeError(str(exc)) from None
    m = Merged()
    seen: dict[tuple[str, str, str], int] = {}
    for i, doc in enumerate(docs):
        try:
            verdicts = [verdict_from_doc(d, labels[i]).undecided() for d in doc.get("verdicts", [])]
            versus = [verdict_from_doc(d, labels[i]).undecided() for d in doc.get("versus", [])]
        except ReportError as exc:
            raise MergeError(str(exc)) from None
        for v in verdicts:
            key = (v.config, v.scenario, v.metric)
            if key in seen:
                raise MergeError(f"{' '.join(key)} was measured in {labels[seen[key]]} and in {labels[i]}: each "
                                 "config must run in one place only")
            seen[key] = i
        m.verdicts += verdicts
        m.versus += versus
        m.servers.update(doc.get("servers") or {})
        m.problems.update(doc.get("problems") or {})
        m.known_issues.update(doc.get("known_issues") or {})
        m.results += list(doc.get("results") or [])
        m.events += [(str(c), str(msg)) for c, msg in doc.get("events") or []]
        stats = doc.get("statistics")
        if isinstance(stats, dict):  # the settings are one run's; each part's variance models join
            models = {**_models(m.statistics), **_models(stats)}
            m.statistics = {**(m.statistics or stats), "variance": models}
    return m


def _models(stats: dict[str, Any] | None) -> dict[str, Any]:
    models = (stats or {}).get("variance")
    return models if isinstance(models, dict) else {}


def coverage(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """MergeError unless the shards' reports cover each config of the split exactly once (each shard's report
    names its shard, its configs and every config of the split)."""
    owner: dict[str, str] = {}
    every: set[str] = set()
    for name, doc in zip(names, docs, strict=True):
        shard = (doc.get("run") or {}).get("shard")
        if not isinstance(shard, dict):
            continue  # a report of a run without --glm5-shard: nothing to check it against
        every |= set(shard.get("all_configs") or [])
        for config in shard.get("configs") or []:
            if config in owner:
                raise MergeError(f"config {config} ran in two shards ({owner[config]} and {name}): the shards split "
                                 "the configs differently; run every shard with the same configs file and options")
            owner[config] = name
    missing = sorted(every - set(owner))
    if missing:
        raise MergeError(f"config {missing[0]} was in no shard's report ({len(missing)} missing: "
                         f"{', '.join(missing)}): a shard's report is missing or a shard split the configs "
                         "differently")


def decided(m: Merged, alpha: float) -> Merged:
    """The run after its family decision (family.family: a config one test, Holm at alpha), each pass and
    regression first held against the run's own launch spread (decide.against_the_night); `m` is not changed."""
    fam = family.family(decide.against_the_night(m.verdicts, m.versus), alpha)
    n = len(m.verdicts)
    return replace(m, verdicts=suspects.as_config(fam.verdicts[:n]), versus=fam.verdicts[n:], family_size=fam.size,
                   confirmed=fam.confirmed)


def _one_launch_finds(cv: float, n_ref: int) -> float:
    """The drop one new launch finds against n_ref reference launches at this CV (95% power, alpha 0.01)."""
    return detectable_drop(cv, 1, DEFAULT_ALPHA, n_ref)


def update(root: Path, verdicts: Sequence[Verdict], mode: str) -> tuple[list[Change], list[str]]:
    """--update-baselines from joined verdicts: each into the file of its hardware and model."""
    by_file: dict[Path, list[Verdict]] = {}
    errors: list[str] = []
    chosen = select_updates(verdicts, mode)
    for v in chosen:
        why = unfit_to_record(v)
        if why is not None:
            errors.append(why)
            continue
        by_file.setdefault(baseline_path(root, str(v.provenance.get("hardware")), v.model), []).append(v)
    # Entries that stay may still lack their scenario's distribution (recorded before it was kept): a healthy
    # measurement of it (judged, not client- or emulator-bound) fills it in.
    drawn: dict[Path, list[Verdict]] = {}
    rewritten = {id(v) for v in chosen}
    for v in verdicts:
        healthy = v.verdict in (Kind.PASS, Kind.UNRESOLVED) and unfit_to_record(v) is None
        if v.cdf and id(v) not in rewritten and healthy:
            path = baseline_path(root, str(v.provenance.get("hardware")), v.model)
            drawn.setdefault(path, []).append(v)
            by_file.setdefault(path, [])
    changes: list[Change] = []
    for path, vs in by_file.items():
        try:
            changes += write_updates(path, vs, detectable=_one_launch_finds, distributions=drawn.get(path, []))
        except (OSError, BaselineError) as exc:
            errors.append(f"cannot update {path}: {getattr(exc, 'strerror', None) or exc}; the file is unchanged")
    return changes, errors
