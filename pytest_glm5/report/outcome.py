"""The run's outcome: one value, computed once, that the last terminal line, the exit status, the JSON report and
the markdown summary all say. A run fails for any of: confirmed regressions, configs that crashed or could not run
(known issues aside), tests pytest itself failed, outputs or baselines it was asked for and could not write, tests
a dead xdist worker never finished, and a required night that measured nothing.

    FAILED: 2 regressions (tp8 single-stream output_throughput -11.9%, ...); 46 series: 40 decided, 6 not
    FAILED: nothing measured: 89 sm120 tests skipped (needs compute capability 12.0 GPUs; found no NVML ...)
    SKIPPED: nothing measured: 89 sm120 tests skipped (...); CI=true or --glm5-require-baselines fails such a run
    PASSED: no regression; 46 series: 40 decided (38 pass, 2 improvement), 6 not (6 unresolved)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..judge.verdicts import NO_BASELINES, Kind, Verdict
from ..words import counted

DECIDED = (Kind.PASS, Kind.REGRESSION, Kind.IMPROVEMENT, Kind.KNOWN_COST)


def series_total(verdicts: Sequence[Verdict]) -> str:
    """The run's one count of series: `46 series: 40 decided (38 pass, 2 improvement), 6 not (6 unresolved)`.
    Decided means the data settled it (pass, regression, improvement, known cost); everything else (unresolved,
    client- or emulator-bound, too few requests, new, workload changed) was not decided."""
    by: dict[str, int] = {}
    for v in verdicts:
        by[str(v.verdict)] = by.get(str(v.verdict), 0) + 1
    done = {k: n for k, n in by.items() if k in DECIDED}
    left = {k: n for k, n in by.items() if k not in DECIDED}

    def parts(d: Mapping[str, int]) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))

    text = f"{len(verdicts)} series: {sum(done.values())} decided" + (f" ({parts(done)})" if done else "")
    return text + (f", {sum(left.values())} not ({parts(left)})" if left else "")


@dataclass(frozen=True)
class Outcome:
    """What the run amounts to; `line` is its last word and `failed` its exit status."""

    status: str  # PASSED, FAILED or SKIPPED (nothing measured, not required)
    line: str

    @property
    def failed(self) -> bool:
        """Whether the run must exit non-zero."""
        return self.status == "FAILED"

    def to_dict(self) -> dict[str, Any]:
        """As the run document holds it."""
        return {"status": self.status, "line": self.line, "exit_status": 1 if self.failed else 0}


@dataclass
class Facts:
    """What the outcome is decided from: every way a run can go, as plain values."""

    verdicts: Sequence[Verdict] = ()
    regressed: Sequence[Verdict] = ()  # confirmed and provisional regressions (the gate's failed items)
    problems: Mapping[str, str] = field(default_factory=dict)  # config -> why it crashed or could not run
    known: frozenset[str] = frozenset()  # configs whose crash is a known issue
    failed_tests: int = 0  # what pytest counted as failed (gate items aside)
    errors: Sequence[str] = ()  # outputs, baselines or costs asked for and not written
    not_run: Mapping[str, str] = field(default_factory=dict)  # config -> why it was not run (--glm5-budget)
    unfinished: Sequence[str] = ()  # tests a dead worker never finished
    nothing_measured: str | None = None  # why nothing was measured, where the run measured nothing
    require: bool = False  # a run that measured nothing fails (CI=true, --glm5-require-baselines)
    interrupted: bool = False
    unchecked: Mapping[str, str] = field(default_factory=dict)  # config -> why no check held its answers tonight
    coverage: str | None = None  # `correctness: canary only` where a check was turned off


@dataclass
class Tally:
    """Which of the run's config tests ran: a night whose tests all skipped measured nothing, and must not read
    green. The session counts into it; under xdist the controller adds each worker's (`join`)."""

    watched: set[str] = field(default_factory=set)  # tests of a server config or a gated marker kept after deselection
    config_tests: int = 0
    ran: int = 0  # how many got to run (a call phase): none is a night that measured nothing
    gpu_skipped: dict[str, str] = field(default_factory=dict)  # test -> why this machine's GPUs cannot run it
    unfinished: list[str] = field(default_factory=list)  # tests a dead xdist worker never finished

    def watch(self, tests: set[str]) -> None:
        """The run's config tests (again after a shard kept some)."""
        self.watched, self.config_tests = tests, len(tests)

    def reported(self, nodeid: str, when: str, skipped: bool) -> None:
        """A test's phase ended: a watched test whose call phase was not skipped ran (it measured, or tried to)."""
        if when == "call" and not skipped and nodeid in self.watched:
            self.ran += 1

    def join(self, told: Mapping[str, Any]) -> None:
        """An xdist worker's counts (the `run` section of its document)."""
        self.config_tests += int(told.get("config_tests") or 0)
        self.ran += int(told.get("ran") or 0)
        self.gpu_skipped.update(told.get("gpu_skipped") or {})

    def to_dict(self) -> dict[str, Any]:
        """As the run document keeps it."""
        return {"config_tests": self.config_tests, "ran": self.ran, "gpu_skipped": self.gpu_skipped,
                "unfinished": self.unfinished}


def nothing_measured(config_tests: int, gpu_skipped: Mapping[str, str], not_run: Mapping[str, str],
                     markers: Sequence[str]) -> str | None:
    """Why a run that measured nothing did so, the most common reason first: `all 89 sm120 tests skipped (sm120:
    needs compute capability 12.0 GPUs; found no NVML ...)`; None for a run without config or gated tests."""
    if not config_tests:
        return None
    reasons: dict[str, int] = {}
    for why in gpu_skipped.values():
        reasons[why] = reasons.get(why, 0) + 1
    for config, why in not_run.items():
        reasons[f"{config}: {why}"] = reasons.get(f"{config}: {why}", 0) + 1
    kind = "/".join(markers) or "config"
    skipped = len(gpu_skipped)
    head = (f"all {skipped} {kind} tests skipped" if skipped == config_tests else
            f"{skipped} of {config_tests} {kind} tests skipped") if skipped else \
        f"none of {config_tests} config tests measured"
    common = max(reasons, key=lambda r: reasons[r]) if reasons else "every config test was skipped"
    return f"{head} ({common})"


def _failures(f: Facts) -> list[str]:
    """What fails the run, worst first: wrong answers, another workload, regressions, crashes, failed tests."""
    reasons: list[str] = []
    wrong = {v.config: _short(v) for v in f.verdicts if v.verdict == Kind.INVALID}
    if wrong:  # first: a figure of a build that answers wrong is no figure at all
        named = "; ".join(f"{c}: {why}" for c, why in list(wrong.items())[:2])
        reasons.append(f"faster, but wrong: {counted(len(wrong), 'config')} answered wrong ({named}"
                       f"{', and more' if len(wrong) > 2 else ''})")
    for kind in (Kind.WORKLOAD_DRIFT, Kind.WORKLOAD_NOT_HELD):
        # Another workload than the one asked or recorded: tonight's figures say nothing of speed, and a model
        # that thinks less or a cache that stops hitting is the team's to look at before any figure.
        missed = [v for v in f.verdicts if v.verdict == kind]
        if missed:
            points = list(dict.fromkeys(f"{v.config} {v.scenario}" for v in missed))
            reasons.append(f"{kind}: {', '.join(points[:3])}{', and more' if len(points) > 3 else ''} "
                           f"({_short(missed[0])})")
    if f.regressed:
        named = ", ".join(f"{v.config} {v.scenario} {v.metric} {_change(v)}" for v in f.regressed[:3])
        more = f", and {len(f.regressed) - 3} more" if len(f.regressed) > 3 else ""
        n = len(f.regressed)
        reasons.append(f"{counted(n, Kind.REGRESSION)} ({named}{more})")
    crashed = [n for n in f.problems if n not in f.known]
    if crashed:
        reasons.append(f"{counted(len(crashed), 'config')} crashed or could not run ({', '.join(crashed)})")
    if f.failed_tests:
        reasons.append(f"{counted(f.failed_tests, 'test')} failed")
    if f.unfinished:
        reasons.append(f"{counted(len(f.unfinished), 'test')} never finished (a worker died): "
                       f"{', '.join(f.unfinished[:3])}{', ...' if len(f.unfinished) > 3 else ''}")
    if f.errors:
        reasons.append(f"{counted(len(f.errors), 'file')} not written ({f.errors[0]})")  # outputs, baselines, costs
    if f.interrupted:
        reasons.append("interrupted")
    return reasons


def _notes(f: Facts, reasons: list[str]) -> list[str]:
    """What the outcome line says beside its verdict (a blind config is a failure where baselines are required)."""
    notes: list[str] = []
    expected = [n for n in f.problems if n in f.known]
    if expected:
        notes.append(f"{counted(len(expected), 'known issue')} crashed as expected")
    bare = sorted({v.config for v in f.verdicts if v.reason is not None and v.reason.kind == NO_BASELINES})
    if bare:
        notes.append(f"NO BASELINES for {', '.join(bare)} (nothing gated there)")
    # Figures held to baselines while nothing held the answers: a build fast and wrong would read PASSED.
    blind = {c: why for c, why in f.unchecked.items() if c not in bare}
    if blind:
        said = (f"NO REFERENCE ANSWERS for {', '.join(sorted(blind))} (correctness not checked: "
                f"{next(iter(blind.values()))})")
        (reasons if f.require else notes).append(said)
    if f.not_run:
        notes.append(f"{counted(len(f.not_run), 'config')} not run ({', '.join(f.not_run)}: "
                     f"{next(iter(f.not_run.values()))})")
    if f.verdicts:
        notes.append(series_total(f.verdicts))
    if f.coverage and f.verdicts:
        notes.append(f.coverage)
    return notes


def decide(f: Facts) -> Outcome:
    """The run's outcome from its facts (value in, value out)."""
    reasons = _failures(f)
    notes = _notes(f, reasons)
    if f.nothing_measured is not None and not f.verdicts:
        head = f"nothing measured: {f.nothing_measured}"
        if f.require or reasons:
            return Outcome("FAILED", "; ".join(["FAILED: " + head, *reasons, *notes]))
        return Outcome("SKIPPED", "; ".join([f"SKIPPED: {head}", *notes,
                                             "CI=true or --glm5-require-baselines fails such a run"]))
    if reasons:
        return Outcome("FAILED", "FAILED: " + "; ".join([*reasons, *notes]))
    return Outcome("PASSED", "; ".join(["PASSED: no regression", *notes]))


def _short(v: Verdict) -> str:
    """A verdict's cause in a phrase, as the judge typed it (a report of a version before reasons: its note)."""
    return v.reason.short if v.reason is not None else v.note


def _change(v: Verdict) -> str:
    if v.stat and "change" in v.stat:
        x = float(v.stat["change"])
    elif v.bound is not None and v.bound.value:
        x = v.measured / v.bound.value - 1
    else:
        return ""
    return f"{x * 100:+.0f}%" if abs(x) >= 1 else f"{x * 100:+.1f}%"
