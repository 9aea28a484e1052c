"""The judging vocabulary: a bound, a verdict and its kinds, the statistical test behind it, a baseline change,
and their round trip through the run document (the --glm5-report file). Every wing speaks it; it imports
nothing of the project but the metric names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict, cast

from ..metrics import geometric_mean, unit_of


class Kind(StrEnum):
    """What a verdict says. A str, so documents and baselines keep the words they always had."""

    INVALID = "invalid"  # faster, but wrong: the launch's canary or the config's accuracy failed
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NEW = "new"
    WORKLOAD_CHANGED = "workload changed"
    WORKLOAD_DRIFT = "workload drift"  # the model's share of the workload moved (judge/held.py): reasoning length
    WORKLOAD_NOT_HELD = "workload not held"  # the shape asked was not the one served (judge/held.py): input length
    UNRESOLVED = "unresolved"  # the data rules out neither a drop beyond the tolerance nor its absence
    KNOWN_COST = "known cost"  # slower than its reference as the config says it must be
    EMULATOR_BOUND = "emulator-bound"  # the emulator fell behind its model: the host was measured
    CLIENT_BOUND = "client-bound"  # the load client's own delay is too large a share of the figure
    THROTTLED = "throttled"  # a GPU slowed for heat or a hardware power brake during the window: not comparable
    TOO_FEW = "too few requests"  # a percentile from fewer requests than it needs (a p99 of 8 is their maximum)
    SAME = "SAME"  # A/B: B is no worse than A beyond the tolerance
    DIFFERENT = "DIFFERENT"
    UNKNOWN = "UNKNOWN"


NOT_JUDGED = (Kind.EMULATOR_BOUND, Kind.CLIENT_BOUND, Kind.TOO_FEW, Kind.THROTTLED, Kind.WORKLOAD_DRIFT,
              Kind.WORKLOAD_NOT_HELD)
RENAMED = {"noisy": Kind.UNRESOLVED}  # what reports before issue 20 called a verdict, for history and compare


class Test(TypedDict, total=False):
    """The statistical test behind a verdict, as decide.py writes it and the reports show it."""

    against: str  # what the launches were compared with: `5 reference launches`, `build base (4 launches)`
    describe: str  # `-5.5% [-7.0%, -4.0%], p 5.9e-05, CV 0.9%, 3 vs 5 launches`
    test: str  # which test, at which alpha and look
    tolerance: float
    change: float  # relative change of the mean, + = higher
    gain: float  # relative change, + = better for the metric
    ci: list[float]  # the change's confidence interval
    p_worse: float
    p_better: float
    cv: float
    worst: float | None  # the worst change (a gain; negative: a drop) the data allow at 95%, one-sided
    detectable: float | None  # the drop this run finds with 95% power at its alpha (a fraction)
    n_new: int
    n_ref: int
    df: int  # the test's degrees of freedom
    alpha: float  # the level of this look
    look: int
    looks: int
    p_adj: float  # p on the scale of the run's alpha (one family decision covers every look)
    p_adj_better: float
    answer: str  # A/B: SAME / DIFFERENT/worse / ...; nightly: the verdict before the family decision
    build_a: str
    build_b: str
    launches_a: list[float]
    compare_to: str
    launches_ref: list[float]  # a config against its compare_to config: that config's launches tonight
    ci_level: float  # the confidence of `ci` where it is not 95% (an A/B shows the CI SAME is decided on)
    margin: float  # A/B: SAME's equivalence margin (+-), apart from the tolerance DIFFERENT needs
    to_add: int  # an unresolved nightly series: the launches its note says to add (the plan prices them)
    sample: dict[str, str]  # build, workload and reference digests: what tomorrow's launches must share to pool
    nights: int  # the nights its launches came from (judge/carry.py), tonight's included
    carried: int  # launches of earlier nights in the test
    suspect: bool  # one launch dropped beyond the tolerance: a second confirms or clears it
    drift_margin: float  # with a history: the drop beyond which a regression must also be (decide.DRIFT_MARGIN)
    futile: bool  # the looks left tonight cannot reach the launches it needs: no round is spent on it
    restart: bool  # an earlier sample spent its looks undecided: a new one starts with these launches
    pooled: dict[str, Any]  # what the series' family lent its variance (judge/variance.py Spread.to_dict)
    tested: list[float]  # the launches the test used where earlier nights' joined tonight's (judge/carry.py)
    grown: list[float]  # reference launches later nights of the reference's build added (judge/carry.py grown)
    box: dict[str, Any]  # the box's shift the reference was moved by (judge/box.py Shift.to_dict)
    reference: list[float]  # the reference launches the test used, where the box's shift moved them


@dataclass(frozen=True)
class Bound:
    """One metric's recorded bound."""

    metric: str
    kind: str  # "floor" or "ceiling"
    value: float
    tolerance: float
    measured: float | None = None
    source: str = ""
    slack: float = 0.0  # absolute allowance for ceilings, in the metric's unit (ms)
    workload: dict[str, Any] | None = None  # the load it was recorded under (None: not recorded)
    launches: tuple[float, ...] = ()  # reference values, one per server launch (< 2: provisional)
    target: float | None = None  # where the work is heading (shown, never judged)
    cdf: tuple[float, ...] = ()  # the recorded distribution (TTFT or ITL ms at 0, 5, ... 100%), drawn on the page
    power: dict[str, float] | None = None  # the GPUs' power regime when it was recorded (telemetry/energy.Window.power)
    build: str = ""  # the build it was recorded with (its provenance), where the file says
    # the session it was recorded in (its date and commit), where the file says: references recorded together read
    # the box of that day, so the box's shift since then is theirs alone (judge/box.py)
    recorded: str = ""

    @property
    def provisional(self) -> bool:
        """Recorded from fewer than two launches: no between-launch spread to test with."""
        return len(self.launches) < 2

    def threshold(self, level: float | None = None) -> float:
        """The practical threshold this bound holds a series to (the tolerance rule, `threshold` below), relative
        to `level`, else its reference launches' level, else its value."""
        ref = level if level is not None else (geometric_mean(self.launches) if self.launches else self.value)
        return threshold(self.tolerance, self.slack, ref)


def threshold(tolerance: float, slack: float, level: float) -> float:
    """The tolerance rule, once: the smallest change worth a verdict is the tolerance, widened for a ceiling by its
    slack in ms at this level (timer jitter of 2 ms on a 20 ms TTFT is no 10% regression)."""
    return max(tolerance, slack / level) if slack and level > 0 else tolerance


NO_BASELINES = "no baselines"  # Reason.kind of a config the baselines file holds nothing for (its verdicts read new)


@dataclass(frozen=True)
class Reason:
    """Why a verdict reads as it does beyond its kind, typed for the reports (which never take a note apart): the
    kind, the phrase the outcome line quotes, and what else the detail says (`the figure alone would read pass`)."""

    kind: str
    short: str
    detail: str = ""


@dataclass
class Verdict:
    """How one measured value stands against its bound."""

    config: str
    scenario: str
    metric: str
    measured: float
    bound: Bound | None
    verdict: str  # pass / regression / improvement / new / workload changed
    spread: dict[str, Any] = field(default_factory=dict)
    samples: list[float] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)  # concurrency, lengths, protocol of this measurement
    provenance: dict[str, Any] = field(default_factory=dict)  # who measured it: hardware, commit, engine, ...
    launches: list[float] = field(default_factory=list)  # this run's value per server launch
    stat: Test = field(default_factory=lambda: Test())  # the test behind a statistical verdict (see decide.py)
    note: str = ""
    test: str = ""  # the pytest node id that measured it
    model: str = ""  # the model path, with the hardware key naming the baselines file and the history store
    # Where the family decision changed it: its own test's verdict, note and answer.
    alone: tuple[str, str, str | None] | None = None
    cdf: list[float] = field(default_factory=list)  # TTFT or ITL (ms) at 0, 5, ... 100% over every launch, recorded
    reason: Reason | None = None  # invalid, another workload, no baselines: the cause as data

    def undecided(self) -> Verdict:
        """The verdict as its own test left it, before a family decision (itself when none changed it)."""
        if self.alone is None:
            return self
        verdict, note, answer = self.alone
        stat = cast(Test, dict(self.stat))
        if answer is not None:
            stat["answer"] = answer
        return replace(self, verdict=verdict, note=note, stat=stat, alone=None)

    @property
    def target(self) -> float | None:
        """The entry's target, where the baselines file sets one."""
        return self.bound.target if self.bound is not None else None

    def to_go(self) -> float | None:
        """How far today's value is from the target, as a factor (2.0: twice as far to go); None without one."""
        t = self.target
        if t is None or not self.measured or not t:
            return None
        return t / self.measured if self.bound is not None and self.bound.kind == "floor" else self.measured / t

    @property
    def delta(self) -> float | None:
        """Relative distance from the bound (+ is better for floors and for ceilings)."""
        if self.bound is None or not self.bound.value:
            return None
        d = (self.measured - self.bound.value) / self.bound.value
        return d if self.bound.kind == "floor" else -d

    def line(self) -> str:
        """`tp8 single-stream output_throughput 8.90 tok/s < floor 10.36 tok/s (-14.1%, tolerance 5%)`; a statistical
        verdict: `tp8 sweep-c256 total_throughput 117248.49 tok/s vs 5 reference launches: -5.5% [-7.0%, -4.0%],
        p 5.9e-05, CV 0.9%, 3 vs 5 launches (t-test at alpha 0.00084, look 3 of 5; tolerance 3%): regression`."""
        unit = unit_of(self.metric)
        head = f"{self.config} {self.scenario} {self.metric} {fmt(self.measured)}{unit}"
        if self.stat:
            st = self.stat
            tail = f": {self.note}" if self.note else ""
            # An A/B rule names its margin and its tolerance itself; a tolerance said again would be a second number.
            tol = "" if "margin" in st else f"; tolerance {st['tolerance'] * 100:.3g}%"
            # Launches of earlier nights in the test (judge/carry.py): the line says what it rests on.
            nights = f", new launches over {st['nights']} nights" if int(st.get("nights", 1)) > 1 and \
                st.get("carried") else ""
            return f"{head} vs {st['against']}: {st['describe']}{nights} ({st['test']}{tol}): " \
                   f"{st.get('answer') or self.verdict}{tail}"
        if self.bound is None:
            return f"{head} (new: no baseline yet)"
        if self.verdict == Kind.WORKLOAD_CHANGED:
            return (f"{head} (workload changed: baseline recorded with {describe_workload(self.bound.workload)}, "
                    f"measured with {describe_workload(self.workload)}; not compared, record it with "
                    "--update-baselines)")
        b = self.bound
        sign = "<" if self.measured < b.value else (">" if self.measured > b.value else "=")
        raw = (self.measured - b.value) / b.value * 100 if b.value else 0.0
        slack = f" or {b.slack:g}{unit}" if b.slack else ""
        prov = f"; provisional: recorded from {len(b.launches) or 1} launch" if b.provisional else ""
        note = f"; {self.note}" if self.note else ""
        return (f"{head} {sign} {b.kind} {fmt(b.value)}{unit} ({raw:+.1f}%, "
                f"tolerance {b.tolerance * 100:g}%{slack}{prov}{note})")


WORKLOAD_KEYS = ("concurrency", "input_len", "output_len", "protocol", "range_ratio", "sampling", "thinking",
                 "prefix_len", "prefix_groups", "request_rate", "arrival", "burstiness", "trace", "duration_s", "turns",
                 "dataset")
# Keys a workload leaves out at these values (recorded files and carried samples stay as they were).
WORKLOAD_UNSET: dict[str, Any] = {"thinking": None, "prefix_len": 0, "prefix_groups": 1, "request_rate": None,
                                  "arrival": "poisson", "burstiness": 1.0, "trace": None, "duration_s": None,
                                  "turns": 1, "dataset": None}
# What a workload recorded before a key existed was measured with: fixed lengths, ids drawn one by one, no chat,
# no shared prefix.
WORKLOAD_LEGACY: dict[str, Any] = {"range_ratio": 1.0, "sampling": "uniform", **WORKLOAD_UNSET}


def workload_differs(recorded: dict[str, Any] | None, measured: dict[str, Any]) -> bool:
    """A bound recorded under another load than this measurement's (an unrecorded one never differs)."""
    if recorded is None:
        return False
    legacy = WORKLOAD_LEGACY
    return any(recorded.get(k, legacy.get(k)) != measured.get(k, legacy.get(k)) for k in WORKLOAD_KEYS)


def describe_workload(workload: dict[str, Any] | None) -> str:
    """`c1 128/128 sglang`, or `an unrecorded workload`."""
    if not workload:
        return "an unrecorded workload"
    ratio = workload.get("range_ratio", 1.0)
    spread = f" range {ratio:g}" if ratio != 1.0 else ""
    sampling = workload.get("sampling", WORKLOAD_LEGACY["sampling"])
    thinking = workload.get("thinking")
    think = "" if thinking is None else " thinking" if thinking else " no-thinking"
    if workload.get("request_rate"):
        think += f", open loop {workload['request_rate']:g} req/s {workload.get('arrival', 'poisson')}"
    if workload.get("prefix_len"):
        think += f", {workload['prefix_len']}-token prefix in {workload.get('prefix_groups', 1)} groups"
    if workload.get("trace"):
        think += f", trace {workload['trace']}"
    if workload.get("turns", 1) != 1:
        think += f", {workload['turns']} turns"
    if workload.get("dataset"):
        think += f", prompts {workload['dataset']}"
    if workload.get("duration_s"):
        think += f", {workload['duration_s']:g} s"
    return (f"c{workload.get('concurrency', '?')} {workload.get('input_len', '?')}/{workload.get('output_len', '?')} "
            f"{workload.get('protocol', '?')}{think}{spread}, {sampling} ids")


def times(factor: float) -> str:
    """`9.7x` / `389x`: a distance to a target."""
    return f"{factor:.2g}x" if factor < 10 else f"{factor:,.0f}x"


def to_go_text(factor: float, up: bool) -> str:
    """How far a value is from its target (`factor`, as Verdict.to_go: 2.0 is twice as far), for a floor with the
    share of the target reached: `42% of it, 2.4x to go`, `2.4x to go` (a ceiling), `reached`."""
    if factor <= 1:
        return "reached"
    return (f"{100 / factor:.0f}% of it, " if up else "") + f"{times(factor)} to go"


def fmt(value: float) -> str:
    """Three significant decimals for small numbers, two for the rest."""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.2f}"


@dataclass
class Change:
    """One entry written by --update-baselines."""

    config: str
    scenario: str
    metric: str
    old: float | None
    new: float
    why: str

    def line(self) -> str:
        """`tp8 single-stream output_throughput: 10.36 -> 11.02 (improvement)`."""
        before = "new" if self.old is None else fmt(self.old)
        return f"{self.config} {self.scenario} {self.metric}: {before} -> {fmt(self.new)} ({self.why})"



def verdict_doc(v: Verdict) -> dict[str, Any]:
    """One verdict as the report holds it."""
    return {"config": v.config, "scenario": v.scenario, "metric": v.metric, "measured": v.measured,
            "unit": unit_of(v.metric).strip(), "verdict": str(v.verdict), "test_id": v.test, "model": v.model,
            "bound": None if v.bound is None else
            {"kind": v.bound.kind, "value": v.bound.value, "tolerance": v.bound.tolerance,
             "launches": list(v.bound.launches), "target": v.bound.target, "measured": v.bound.measured,
             "source": v.bound.source, "slack": v.bound.slack, "workload": v.bound.workload,
             "cdf": list(v.bound.cdf)},
            "delta": v.delta, "to_go": v.to_go(), "spread": v.spread, "samples": v.samples, "launches": v.launches,
            "test": v.stat or None, "note": v.note, "workload": v.workload, "provenance": v.provenance,
            "alone": None if v.alone is None else dict(zip(("verdict", "note", "answer"), v.alone, strict=True)),
            "cdf": v.cdf, "reason": None if v.reason is None else asdict(v.reason)}


class ReportError(Exception):
    """A run document that cannot be read back; the message names the file, the entry and the key."""


def _number(x: Any, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | str):
        raise ReportError(f"{where}: {x!r} is not a number")
    try:
        return float(x)
    except ValueError:
        raise ReportError(f"{where}: {x!r} is not a number") from None


def _test(d: Any) -> Test:
    return cast(Test, dict(d)) if isinstance(d, dict) else Test()


def _alone(d: Any) -> tuple[str, str, str | None] | None:
    return (str(d["verdict"]), str(d.get("note") or ""), d.get("answer")) if isinstance(d, dict) else None


def _reason(d: Any) -> Reason | None:
    if not isinstance(d, dict):
        return None  # a report of a version before reasons: its notes still say it, the outcome quotes them whole
    return Reason(str(d.get("kind") or ""), str(d.get("short") or ""), str(d.get("detail") or ""))


def verdict_from_doc(d: dict[str, Any], where: str = "report") -> Verdict:
    """A verdict as verdict_doc wrote it; ReportError names the entry and key that are not what they must be."""
    try:
        at = f"{where}: verdict {d.get('config')} {d.get('scenario')} {d.get('metric')}"
        b = d.get("bound")
        bound = None if b is None else Bound(
            d["metric"], b["kind"], _number(b["value"], f"{at} bound value"),
            _number(b["tolerance"], f"{at} bound tolerance"), b.get("measured"), b.get("source") or "",
            _number(b.get("slack") or 0.0, f"{at} bound slack"), b.get("workload"),
            tuple(_number(x, f"{at} bound launches") for x in b.get("launches") or ()), b.get("target"),
            tuple(_number(x, f"{at} bound cdf") for x in b.get("cdf") or ()))
        return Verdict(d["config"], d["scenario"], d["metric"], _number(d["measured"], f"{at} measured"), bound,
                       RENAMED.get(d["verdict"], d["verdict"]), dict(d.get("spread") or {}),
                       [_number(x, f"{at} samples") for x in d.get("samples") or []],
                       dict(d.get("workload") or {}), dict(d.get("provenance") or {}),
                       [_number(x, f"{at} launches") for x in d.get("launches") or []],
                       _test(d.get("test")), d.get("note") or "", d.get("test_id") or "", d.get("model") or "",
                       _alone(d.get("alone")), [_number(x, f"{at} cdf") for x in d.get("cdf") or []],
                       _reason(d.get("reason")))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportError(f"{where}: a verdict entry lacks or mangles {exc}: not a --glm5-report file of this "
                          "version") from None


REPORT_FORMAT = "pytest-glm5 report 2"


def run_document(servers: dict[str, Any], verdicts: Sequence[Verdict], changes: Sequence[Change],
                 results: list[dict[str, Any]], versus: Sequence[Verdict], statistics: dict[str, Any] | None,
                 run: dict[str, Any], problems: dict[str, str], known_issues: dict[str, str] | None = None,
                 events: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The run document, one shape for one process, xdist's controller and `glm5 merge`: every other output
    (page, summary, exports, history) is rendered from it."""
    return {
        "format": REPORT_FORMAT, "run": run, "statistics": statistics, "servers": servers,
        "problems": problems, "known_issues": known_issues or {}, "results": results,
        "verdicts": [verdict_doc(v) for v in verdicts], "versus": [verdict_doc(v) for v in versus],
        "baseline_changes": [c.__dict__ for c in changes], "events": list(events),
    }


def read_report(path: Path) -> dict[str, Any]:
    """A --glm5-report file as its run document; ReportError says why it is not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file (give --glm5-report files)") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); give a --glm5-report file") from None
    except (OSError, UnicodeError) as exc:
        raise ReportError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("verdicts"), list):
        raise ReportError(f"{path}: not a --glm5-report file (no verdicts)")
    for key in ("run", "servers", "problems", "known_issues", "statistics"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise ReportError(f"{path}: not a --glm5-report file ({key} is a {type(doc[key]).__name__}, not an "
                              "object)")
    return doc


def verdicts_of(doc: dict[str, Any], where: str) -> list[Verdict]:
    """The document's verdicts as objects."""
    return [verdict_from_doc(d, where) for d in doc.get("verdicts", [])]


def machines(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """The (hardware key, model) pairs a document's verdicts were measured on."""
    return {(str(d.get("provenance", {}).get("hardware") or "?"), str(d.get("model") or "?"))
            for d in doc.get("verdicts", []) if isinstance(d, dict) and d.get("provenance", {}).get("hardware")}


def same_machines(named: Sequence[tuple[str, dict[str, Any]]], what: str) -> None:
    """ReportError when documents were measured on different hardware or models: their numbers are not
    comparable, and a join of them would judge one machine's launches against another's."""
    seen: dict[tuple[str, str], str] = {}
    for name, doc in named:
        for m in machines(doc):
            seen.setdefault(m, name)
    if len(seen) > 1:
        parts = "; ".join(f"{src}: {hw}, model {model}" for (hw, model), src in seen.items())
        raise ReportError(f"{what} of different hardware or models ({parts}): their numbers are not comparable")
