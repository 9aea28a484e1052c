"""What people read on the terminal: the header, live progress lines, the verdict table, the lists after it and
the run's Summary (the JSON report and the other files are report/outputs.py's)."""

from __future__ import annotations

import contextlib
import re
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import proxies
from ..judge.merge import Merged
from ..judge.verdicts import NO_BASELINES, Change, Kind, Verdict, fmt, times
from ..metrics import unit_of
from ..settings import Settings
from . import power
from .outcome import Outcome, series_total
from .outputs import Written
from .trends import target_line


class TerminalProgress:
    """One updating terminal line while a server starts: elapsed time and the newest log line."""

    def __init__(self, terminal: Any, quiet: bool = False) -> None:
        self.tr = terminal  # pytest's terminal reporter (write_line, rewrite, isatty), or None
        self.quiet = quiet
        self.tty = bool(self.tr and self.tr.isatty())
        self.last = 0.0
        self.shown = False

    def __call__(self, config: str, elapsed: float, line: str, doing: str = "starting") -> None:
        if self.quiet or self.tr is None:
            return
        now = time.monotonic()
        if doing not in ("starting", "measuring"):
            # Seldom (the lease book says it every 30 s) and worth a line of its own, in a log and on a terminal.
            self.done()
            self.tr.write_line(f"glm5: {config} {line.strip()} [{elapsed:.0f} s]")
            return
        if not self.last and not self.tty:
            self.last = now  # In logs, a line every 30 s; the first after 30 s.
        if now - self.last < (0.5 if self.tty else 30.0):
            return
        self.last = now
        text = f"glm5: {doing} {config} [{elapsed:5.0f} s] {line.strip()[:110]}"
        if self.tty:
            self.tr.rewrite(text, erase=True)
            self.shown = True
        else:
            self.tr.write_line(text)

    def done(self) -> None:
        if self.shown and self.tr is not None:
            self.tr.rewrite("", erase=True)
            self.shown = False


class WorkerLines:
    """A worker's progress lines (a wait for GPUs, a long start): xdist shows nothing a worker writes to its
    terminal, but the worker's stderr is the controller's."""

    def __init__(self, worker: str, capture: Any) -> None:
        self.worker = worker
        self.capture = capture  # pytest's capture manager: the line goes around the test's captured output

    def isatty(self) -> bool:
        return False

    def write_line(self, line: str, **markup: bool) -> None:
        with self.capture.global_and_fixture_disabled() if self.capture else contextlib.nullcontext():
            sys.stderr.write(f"[{self.worker}] {line}\n")
            sys.stderr.flush()

    def rewrite(self, line: str, erase: bool = False) -> None:
        pass


# The table's word for each kind: its own, except these three.
MARKS: dict[str, str] = {**{k: str(k) for k in Kind}, Kind.PASS: "ok", Kind.REGRESSION: "REGRESSION",
                         Kind.IMPROVEMENT: "improved"}


def _verdict_cell(v: Verdict) -> str:
    answer = v.stat.get("answer") if v.stat else None
    mark = MARKS[v.verdict]
    if answer:
        return answer if mark in ("ok", Kind.UNRESOLVED) else f"{answer} {mark}"
    return mark


def header_lines(s: Settings) -> list[str]:
    """Where a run's configs, baselines and hardware key come from, the emulator's scale, and the proxy a
    --sglang-url goes through (pytest's header)."""
    if s.sim:
        key = (f"glm5: emulator (--glm5-sim), time scale {s.sim_time_scale:g} ({s.source('glm5-sim-time-scale')}); "
               f"hardware key sim-<profile>-x{s.sim_time_scale:g}")
    elif s.hardware:
        key = f"glm5: hardware key {s.hardware} (--glm5-hardware)"
    elif s.sglang_url:
        key = f"glm5: external server {s.sglang_url} (--sglang-url); hardware key from --glm5-hardware or NVML"
    else:
        key = ""
    via = proxies.proxy_for(s.sglang_url) if s.sglang_url else None
    route = ("glm5: hardware key from NVML when a server is measured" if not s.sglang_url else
             f"glm5: requests to {s.sglang_url} go through the proxy {via} (the environment's proxy settings; add "
             "the host to no_proxy to go direct)" if via else
             f"glm5: requests to {s.sglang_url} go direct (no proxy applies)")
    return [f"glm5: configs {s.configs_path}; baselines {s.baselines_root}", *([key] if key else []), route]


WIDTH = 120  # the summary's lines, so that a CI log shows them unwrapped; details go to the report files
SIGN_CONVENTION = ("change: today's value vs the reference, + = higher (better for a throughput floor, worse for a "
                   "latency ceiling)")


def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%" if abs(x) >= 1 else f"{x * 100:+.1f}%"


def change_cell(v: Verdict) -> str:
    """The change of the value itself (+ = higher), with its CI where a test was made: `-2.8% (-7.8..+2.5)` (the
    table's header names the level)."""
    if v.stat and "change" in v.stat:
        ci = v.stat.get("ci")
        if ci:
            return f"{_pct(v.stat['change'])} ({_pct(ci[0])[:-1]}..{_pct(ci[1])})"
        return _pct(v.stat["change"])
    if v.bound is None or not v.bound.value:
        return "-"
    return _pct(v.measured / v.bound.value - 1)


def verdict_table(verdicts: Sequence[Verdict]) -> list[str]:
    """config, scenario, metric, measured, bound (>= a floor, <= a ceiling), change [95% CI], verdict, target: aligned
    columns of at most 120 characters; the tests behind each (p, CV, looks, spread) are in the report files."""
    levels = sorted({float(v.stat.get("ci_level", 0.95)) for v in verdicts if v.stat and v.stat.get("ci")})
    head = ["config", "scenario", "metric", "measured", "bound",
            f"change ({'/'.join(f'{x * 100:g}%' for x in levels) or '95%'} CI)", "verdict"]
    targets = any(v.target is not None for v in verdicts)
    if targets:
        head.append("target")
    rows = []
    for v in verdicts:
        unit = unit_of(v.metric).strip()
        bound = "-" if v.bound is None else f"{'>=' if v.bound.kind == 'floor' else '<='}{fmt(v.bound.value)}"
        if v.stat and "build_a" in v.stat:
            bound = f"build {v.stat['build_a']}"
        rows.append([v.config, v.scenario, v.metric, f"{fmt(v.measured)} {unit}".strip(), bound, change_cell(v),
                     _verdict_cell(v)])
        if targets:
            go = v.to_go()
            left = "" if go is None else "reached" if go <= 1 else f"{times(go)} to go"
            rows[-1].append("-" if v.target is None else f"{fmt(v.target)} ({left})")
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    out = [SIGN_CONVENTION, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return out


def wrapped(lines: Sequence[str], width: int = WIDTH) -> list[str]:
    """Lines longer than the width, broken at spaces with a hanging indent: a CI log shows them whole."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        # Paths and URLs stay whole (a long one overruns the width rather than breaking where it cannot be copied).
        out += textwrap.wrap(line, width, subsequent_indent=lead + "    ", break_long_words=False,
                             break_on_hyphens=False)
    return out


def grouped_reasons(verdicts: Sequence[Verdict]) -> list[str]:
    """One line per point (config, scenario) naming its metrics, and each reason once with how many points share it:
    a reason repeated for every metric of every point says nothing new after the first time."""
    points: dict[tuple[str, str], list[str]] = {}
    reasons: dict[str, list[tuple[str, str]]] = {}
    for v in verdicts:
        points.setdefault((v.config, v.scenario), []).append(v.metric)
        # The figures differ per point; the reason's wording around them is what repeats.
        key = re.sub(r"\d+(\.\d+)?", "#", v.note or "")
        if (v.config, v.scenario) not in reasons.setdefault(key, []):
            reasons[key].append((v.config, v.scenario))
    out = [f"  {c} {s}: {', '.join(ms)}" for (c, s), ms in points.items()]
    for key, where in reasons.items():
        first = next(v for v in verdicts
                     if (v.config, v.scenario) == where[0] and re.sub(r"\d+(\.\d+)?", "#", v.note or "") == key)
        n = len(where)
        out.append(f"  why ({n} point{'s' if n > 1 else ''}), e.g. {where[0][0]} {where[0][1]}: {first.note}")
    return out


def summary_lines(verdicts: Sequence[Verdict], changes: Sequence[Change], update_mode: str | None,
                  server_problems: dict[str, str], update_errors: Sequence[str], family_size: int = 0,
                  alpha: float = 0.0, not_run: Mapping[str, str] | None = None,
                  unfinished: Sequence[str] = ()) -> list[str]:
    """The run's one count of series, then regressions, improvements (with the hint), unresolved and not-judged
    series, new metrics, crashed, skipped and unfinished configs, baseline changes."""
    out: list[str] = []
    regs = [v for v in verdicts if v.verdict == Kind.REGRESSION]
    imps = [v for v in verdicts if v.verdict == Kind.IMPROVEMENT]
    new = [v for v in verdicts if v.verdict == Kind.NEW]
    if verdicts:
        held = (f"; any false alarm among them held to {alpha:g} (each config one test, Holm across the configs, "
                "alpha spending over added launches)") if family_size else ""
        out.append(f"{series_total(verdicts)}{held}")
    unguarded = {v.config: v.reason.short for v in new if v.reason is not None and v.reason.kind == NO_BASELINES}
    out += [f"{note}; record them with --update-baselines" for note in unguarded.values()]
    wrong = [v for v in verdicts if v.verdict == Kind.INVALID]
    if wrong:  # first: a figure of a build that answers wrong is no figure at all
        out.append(f"invalid, faster but wrong ({len(wrong)}; the answers below say where):")
        out += [f"  {v.config} {v.scenario} {v.metric} {fmt(v.measured)}{unit_of(v.metric)}"
                + (f" ({v.reason.detail})" if v.reason is not None and v.reason.detail else "") for v in wrong]
    if regs:
        out.append(f"regressions ({len(regs)}):")
        out += [f"  {v.line()}" for v in regs]
    suspects = [v for v in verdicts if v.verdict == Kind.UNRESOLVED and v.stat.get("suspect")]
    if suspects:  # one launch dropped beyond its tolerance: what confirms it, and when
        out.append(f"suspects ({len(suspects)}; one launch dropped beyond the tolerance, a second confirms or clears "
                   "it: a round tonight if the budget allows, else the config's next night):")
        out += [f"  {v.config} {v.scenario} {v.metric} {v.stat['change'] * 100:+.1f}% on one launch (p "
                f"{v.stat['p_worse']:.2g}, tolerance {v.stat['tolerance'] * 100:g}%)" for v in suspects]
    unresolved = [v for v in verdicts if v.verdict == Kind.UNRESOLVED and not v.stat.get("suspect")]
    if unresolved:
        out.append(f"unresolved ({len(unresolved)}; they fail only with --glm5-strict-baselines):")
        out += [f"  {v.line()}" for v in unresolved]
    for kind, title in ((Kind.EMULATOR_BOUND, "not judged, the emulator could not keep up with its model"),
                        (Kind.CLIENT_BOUND, "not judged, the load client measured its own delay (never a pass, never "
                                       "a regression)"),
                        (Kind.TOO_FEW, "not judged, a percentile from fewer requests than it needs"),
                        (Kind.THROTTLED, "not judged, a GPU slowed for heat or a hardware power brake (not "
                                         "comparable)")):
        bound = [v for v in verdicts if v.verdict == kind]
        if bound:
            out.append(f"{title} ({len(bound)}):")
            out += grouped_reasons(bound)
    if imps:
        out.append(f"improvements ({len(imps)}):")
        out += [f"  {v.line()}" for v in imps]
        if not update_mode:
            out.append("  record them with: pytest ... --update-baselines (then review `git diff baselines/`)")
    if new:
        out.append(f"new metrics without a baseline ({len(new)}):")
        out += [f"  {v.line()}" for v in new]
        if not update_mode:
            out.append("  record them with: pytest ... --update-baselines")
    moved = [v for v in verdicts if v.verdict == Kind.WORKLOAD_CHANGED]
    if moved:
        out.append(f"measured under another workload than their baseline, not compared ({len(moved)}):")
        out += [f"  {v.line()}" for v in moved]
    shared: dict[str, set[str]] = {}
    for v in verdicts:
        for mate in (v.provenance or {}).get("cotenants", []):
            # `tp4-b on GPUs 4-7 (server pid 1)` -> `tp4-b on GPUs 4-7`; `pid 9 (sleep) on GPU 1, 12 GB, ...` ->
            # `pid 9 (sleep) on GPU 1`
            shared.setdefault(v.config, set()).add(mate.split(",")[0] if mate.startswith("pid ") else
                                                   mate.split(" (")[0])
    if shared:
        n = len(shared)
        out.append(f"measured while other servers or processes used this machine's GPUs ({n} config"
                   f"{'s' if n > 1 else ''}; each verdict's provenance names them; --glm5-exclusive keeps other "
                   "glm5 servers away):")
        out += [f"  {cfg} beside {', '.join(sorted(mates))}" for cfg, mates in shared.items()]
    if server_problems:
        out.append("configs that crashed or could not run:")
        out += [f"  {name}: {why}" for name, why in server_problems.items()]
    if not_run:
        out.append(f"configs not run ({len(not_run)}):")
        out += [f"  {name}: {why}" for name, why in not_run.items()]
    if unfinished:
        out.append(f"never finished: a worker died before these tests ended ({len(unfinished)}; not passed):")
        out += [f"  {nodeid}" for nodeid in unfinished]
    if changes:
        out.append(f"baselines updated ({len(changes)}):")
        out += [f"  {c.line()}" for c in changes]
    out += update_errors
    return out


def recording_lines(verdicts: Sequence[Verdict], changes: Sequence[Change], costs: Mapping[str, str],
                    notes: Sequence[str] = ()) -> list[str]:
    """What --update-baselines wrote and what it left, per config: `tp8: wrote 3 (2 new, 1 reference of 6
    launches), launch cost (load 1,800 s, measuring 1,101 s over 7 tests); left 4 as they were (3 pass, 1
    unresolved)`, then why rounds were not spent."""
    written = {(c.config, c.scenario, c.metric) for c in changes}
    configs = list(dict.fromkeys([*(v.config for v in verdicts), *(c.config for c in changes), *costs]))
    if not configs:
        return []
    out = ["--update-baselines, per config (review with git diff baselines/):"]
    for config in configs:
        why: dict[str, int] = {}
        for c in changes:
            if c.config == config:
                key = "reference" if c.why.startswith("reference of") else c.why
                why[key] = why.get(key, 0) + 1
        left: dict[str, int] = {}
        for v in verdicts:
            if v.config == config and (v.config, v.scenario, v.metric) not in written:
                left[str(v.verdict)] = left.get(str(v.verdict), 0) + 1
        parts = []
        n = sum(why.values())
        parts.append(f"wrote {n}" + (f" ({', '.join(f'{k} {w}' for w, k in why.items())})" if n else ""))
        if config in costs:
            parts.append(f"launch cost ({costs[config]})")
        m = sum(left.values())
        if m:
            parts.append(f"left {m} as they were ({', '.join(f'{k} {w}' for w, k in left.items())})")
        out.append(f"  {config}: {'; '.join(parts)}")
    out += [f"  {note}" for note in notes]
    return out


def box_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """The box's shifts the references were moved by (judge/box.py), a line per hardware naming each series kind: a
    box that reads its references' own builds faster or slower is news, whatever the verdicts.

        >>> def v(scenario, metric, shift, recorded=""):
        ...     return Verdict("a", scenario, metric, 1.0, None, "pass", provenance={"hardware": "hw"}, stat={"box": {
        ...         "shift": shift, "launches": 10, "configs": 2, "nights": 5, "recorded": recorded}})
        >>> [line] = box_lines([v("s", "output_throughput", -0.0301), v("s", "median_ttft_ms", 0.218),
        ...                     v("s", "output_throughput", -0.0301), v("s", "median_ttft_ms", -0.05, "12-06 c7e")])
        >>> line.startswith("the box (hw) reads the references' own builds on its last 5 nights: ")
        True
        >>> print(line.split("nights: ")[1].split(": every")[0].replace("), ", "),\\n"))
        s output_throughput -3.0% (10 launches of 2 configs),
        s median_ttft_ms +21.8% (10 launches of 2 configs),
        s median_ttft_ms -5.0% (10 launches of 2 configs, references recorded 12-06 c7e)
    """
    kinds: dict[str, dict[tuple[str, str, str], dict[str, Any]]] = {}
    for v in verdicts:
        b = v.stat.get("box") if v.stat else None
        if isinstance(b, dict) and b.get("beyond", True):  # a shift within chance moved it too, but is no news
            kind = (v.scenario, v.metric, str(b.get("recorded") or ""))
            kinds.setdefault(str(v.provenance.get("hardware", "")), {}).setdefault(kind, b)
    out = []
    for hw, moved in kinds.items():
        nights = max(int(b["nights"]) for b in moved.values())
        said = ", ".join(f"{sc} {m} {float(b['shift']) * 100:+.1f}% ({b['launches']} launches of {b['configs']} "
                         f"configs{f', references recorded {rec}' if rec else ''})"
                         for (sc, m, rec), b in moved.items())
        out.append(f"the box ({hw}) reads the references' own builds on its last {nights} nights: {said}: every "
                   "reference of those kinds was moved by it before judging (a drifting box is not a build's "
                   "regression; where it stays, record the baselines again)")
    return out


def target_lines(verdicts: Sequence[Verdict], drift: dict[tuple[str, str, str], float | None] | None = None
                 ) -> list[str]:
    """Where the baselines set a target: today's value against the floor and the target, and the trend towards it
    from the history (`--glm5-history`); a target never fails a run."""
    have = [v for v in verdicts if v.target is not None]
    if not have:
        return []
    out = [f"targets ({len(have)}; never fail a run):"]
    for v in have:
        d = (drift or {}).get((v.config, v.scenario, v.metric))
        bound = f", {v.bound.kind} {fmt(v.bound.value)}" if v.bound is not None else ""
        out.append(f"  {v.config} {v.scenario} {v.metric} {fmt(v.measured)}{unit_of(v.metric)}{bound}: "
                   f"{target_line(v.measured, v.target, v.metric, d)}")
    return out


def campaign_lines(versus: Sequence[Verdict]) -> list[str]:
    """The campaign view: each config against its reference config, one line each, as the campaign reported its
    experiments: `allreduce-fusion vs tp8: sweep-c10 output_throughput -87.4% [-88.0%, -86.8%] (known cost), ...`."""
    if not versus:
        return []
    by_config: dict[str, list[Verdict]] = {}
    for v in versus:
        by_config.setdefault(v.config, []).append(v)
    out = ["configs against their reference (same run; compare_to in the configs file):"]
    for config, vs in by_config.items():
        ref = vs[0].stat["against"]
        parts = []
        for v in vs:
            lo, hi = v.stat["ci"]
            marks: dict[str, str] = {Kind.REGRESSION: " REGRESSION", Kind.KNOWN_COST: " (known cost)",
                                     Kind.UNRESOLVED: " (unresolved)", Kind.IMPROVEMENT: " (better)"}
            mark = marks.get(v.verdict, "")
            parts.append(f"{v.scenario} {v.metric} {v.stat['change'] * 100:+.1f}% [{lo * 100:+.1f}%, "
                         f"{hi * 100:+.1f}%]{mark}")
        out.append(f"  {config} vs {ref}: " + ", ".join(parts))
    return out


def telemetry_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """One line per measured scenario with GPU telemetry (the run document's `results`): power, memory,
    utilisation, clock, across GPUs; and a line of the energy it cost where NVML counted it (report/power.py)."""
    out = []
    for entry in results:
        tel = next((r["telemetry"] for r in reversed(entry.get("runs") or []) if r.get("telemetry")), None)
        if tel is None or not tel.get("samples"):
            out += [f"{config} {scenario}: {text}" for config, scenario, text in power.lines([entry])]
            continue
        s = list(tel["summary"].values())
        n = len(s)
        mean_w = sum(g["power_w"]["mean"] for g in s) / n
        power_max = max(g["power_w"]["max"] for g in s)
        mem = max(g["memory_used_gb"]["max"] for g in s)
        util = sum(g["util_pct"]["mean"] for g in s) / n
        clock = sum(g["sm_clock_mhz"]["mean"] for g in s) / n
        out.append(f"{entry['config']} {entry['scenario']}: {n} GPU, power mean {mean_w:.0f} W (max "
                   f"{power_max:.0f} W), memory max {mem:.1f} GB, utilisation {util:.0f}%, SM clock {clock:.0f} MHz, "
                   f"{len(tel['samples'])} samples")
        out += [f"{config} {scenario}: {text}" for config, scenario, text in power.lines([entry])]
    return out


def result_notes(results: Sequence[dict[str, Any]]) -> list[str]:
    """Per scenario (the run document's `results`): approximate lengths, a cache that could not be flushed,
    pauses that were not hangs, the server's count differing from the client's."""
    out: list[str] = []
    for entry in results:
        runs = entry.get("runs") or []
        where = f"{entry['config']} {entry['scenario']}"
        shape = runs[0].get("request_shape") or {} if runs else {}
        if runs and not shape.get("exact_lengths", True):
            out.append(f"{where}: lengths approximate: {shape.get('described')}")
        notes = sorted({r["cache_note"] for r in runs if r.get("cache_note")})
        notes += [f"paused, not hung: {p}" for r in runs for p in r.get("pauses") or []]
        notes += sorted({r["server_note"] for r in runs if r.get("server_note")})
        out += [f"{where}: {note}" for note in notes]
    return out


@dataclass
class Summary:
    """The run's summary as pytest's terminal shows it, after the tests: what the servers did, the verdict table,
    the lists that need a look, what was recorded and written, the launches, and the outcome last (the line the exit
    status agrees with). Values in; `display(tr)` writes them (pytest-benchmark's TableResults)."""

    view: Merged
    outcome: Outcome
    changes: Sequence[Change]
    errors: Sequence[str]
    update_mode: str | None
    alpha: float
    show: bool = False  # the run had config or gated tests: say something even when nothing was measured
    not_run: Mapping[str, str] = field(default_factory=dict)
    unfinished: Sequence[str] = ()
    written: Written | None = None
    costs_written: Mapping[str, str] = field(default_factory=dict)
    said: Sequence[str] = ()  # why rounds were not spent
    spent: Sequence[str] = ()  # the launches against the plan
    gpus: str = ""  # NVML's GPUs in words, where no telemetry came
    answers: Sequence[str] = ()  # what the launches answered: the canary, the accuracy set (perf/answering.py)

    def display(self, tr: Any) -> None:
        """Write the summary to pytest's terminal reporter (section, write_line with markup)."""
        view = self.view
        if view.events:
            tr.section("glm5 servers")
            for line in wrapped([f"{name}: {message}" for name, message in view.events]):
                tr.write_line(line)
        if not (view.verdicts or view.problems or self.errors or self.show):
            return
        tr.section("glm5 performance")
        if view.verdicts:
            for line in verdict_table(view.verdicts):
                tr.write_line(line)
        for line in wrapped(summary_lines(view.verdicts, self.changes, self.update_mode, view.problems, self.errors,
                                          view.family_size, self.alpha if view.family_size else 0.0, self.not_run,
                                          self.unfinished)):
            tr.write_line(line, red=line.startswith(("invalid", "regressions", "cannot", "NO BASELINES",
                                                     "never finished")))
        if self.answers:
            tr.write_line("answers (checked before each launch's load):")
            for line in wrapped([f"  {line}" for line in self.answers]):
                tr.write_line(line, red=" failed" in line or ": a drop" in line)
        drift = {(a.series.config, a.series.scenario, a.series.metric): a.drift
                 for a in (self.written.analyses if self.written else [])}
        for line in wrapped([*box_lines(view.verdicts), *target_lines(view.verdicts, drift),
                             *campaign_lines(view.versus)]):
            tr.write_line(line, red=" REGRESSION" in line)
        if self.update_mode:
            for line in wrapped(recording_lines(view.verdicts, self.changes, self.costs_written, self.said)):
                tr.write_line(line)
        for line in wrapped(result_notes(view.results)):
            tr.write_line(line, yellow=True)
        tel = telemetry_lines(view.results)
        if tel:
            tr.write_line("GPU telemetry during the runs (NVML):")
            for line in wrapped([f"  {line}" for line in tel]):
                tr.write_line(line)
        elif view.results:
            tr.write_line(f"GPU telemetry: none ({self.gpus})")
        for line in wrapped([*(f"glm5 {line}" for line in (self.written.lines if self.written else [])),
                             *self.spent]):
            tr.write_line(line)
        for line in wrapped([self.outcome.line]):
            tr.write_line(line, red=self.outcome.failed, green=self.outcome.status == "PASSED",
                          yellow=self.outcome.status == "SKIPPED", bold=True)
