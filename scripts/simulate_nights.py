#!/usr/bin/env python3
"""Nights, not a night: the real suite over 30 nights in the box's time, run through the plugin's own plan,
schedule and decision code, to measure what a history of nights does (issue 31; the table in docs/night.md).

What is the plugin's own: the configs and their launch prices (the plan `pytest -m sm120 --glm5-plan` prints for
the real box, collected in-process), tonight's pick and the cover (night/schedule.py), the budget that admits
first launches and rounds (night/plan.py Budget), each series' verdict with the evidence of earlier nights
(PerfGate.against_reference: judge/carry.py and judge/decide.py), whether a round is spent (PerfGate.undecided:
unresolved and not futile, or not confirmed by Benjamini-Hochberg as the run stands), the run's decision
(judge/merge.py decided: against the night's own spread, then Benjamini-Hochberg over every series and every
config against its reference), and the history line each night appends (report/history.py series_entry).

What is modelled: each config's gated series are those the rehearsal's baselines hold with reference launches
(baselines/sim-glm5-sm120-x0.01), held to the box's tolerance (5%). A launch draws every series of a config at
once: a factor shared by the launch (70% of the variance: a slow launch moves every metric of its config) and one
of each series, at the cell's launch-to-launch CV. Each config's reference is recorded before night 1 the way
`--update-baselines` records it (launches until decide.reference_short is satisfied, at most 12). A patch lands on
night 10: every config's build fingerprint changes (every sample starts anew) and one config, a different one in
each history, gets slower by the drop on every series (latencies longer by as much). Known-crash configs are
launched on their cadence and measure nothing. Launches take what the plan prices them (the box's real spread of
load times is not modelled).

    python scripts/simulate_nights.py                       # the table: CV 2, 5, 10%; 200 histories a cell
    python scripts/simulate_nights.py --cv 0.05 --histories 20 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomlkit

from pytest_glm5.configs import ServerConfig
from pytest_glm5.judge import decide, family, merge
from pytest_glm5.judge.baselines import BaselineStore, baseline_path
from pytest_glm5.judge.gate import Checked, PerfGate, Statistics, references_of, versus_all
from pytest_glm5.judge.provenance import Provenance
from pytest_glm5.judge.stats import benjamini_hochberg
from pytest_glm5.judge.variance import VarianceModel, nights_of
from pytest_glm5.judge.verdicts import Bound, Kind, Verdict, verdict_doc
from pytest_glm5.metrics import geometric_mean, higher_is_better
from pytest_glm5.night import schedule
from pytest_glm5.night.plan import ConfigCost
from pytest_glm5.night.plan import Night as NightPlan
from pytest_glm5.perf.fixture import RECORDING_CAP
from pytest_glm5.report.history import series_entry

ROOT = Path(__file__).resolve().parent.parent
HARDWARE = "8x-rtx-pro-6000-blackwell-sm120"
MODEL = "/models/GLM-5-NVFP4"
REHEARSAL = ROOT / "baselines" / "sim-glm5-sm120-x0.01" / "GLM-5-NVFP4.toml"
HEAVY_DROP = 0.15  # a bad launch (heavy-tailed noise): every series of its config this much slower
SHARED = 0.7  # the share of a series' launch-to-launch variance that the launch gives every series of its config
BASE = "base"  # the build the references were recorded with, and every night's until the patch
WORKLOAD = {"scenario": "simulated"}  # one workload for every night: nothing breaks a sample but the build


def suite() -> tuple[list[ConfigCost], dict[str, ServerConfig]]:
    """The real suite's configs with the launch prices its plan gives on the box (no history, no budget)."""
    import pytest

    from pytest_glm5.plugin import session_key

    got: dict[str, Any] = {}

    class Grab:
        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(self, config: pytest.Config) -> None:
            got["run"] = config.stash.get(session_key, None)

    os.chdir(ROOT)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            tempfile.TemporaryDirectory() as tmp:
        pytest.main(["-m", "sm120", "--glm5-plan", "--glm5-hardware", HARDWARE, f"--glm5-model-path={MODEL}", "-q",
                     "-p", "no:cacheprovider", f"--basetemp={tmp}/t"], plugins=[Grab()])
    run = got.get("run")
    if run is None or run.night.plan is None:
        raise SystemExit("simulate_nights: the suite's plan could not be collected (run from a checkout with the "
                         "plugin installed: pip install -e .)")
    return list(run.night.plan.costs), dict(run.configs)


def series_of(configs: Sequence[str], path: Path = REHEARSAL) -> dict[str, list[tuple[str, str]]]:
    """Each config's statistically gated series: those the rehearsal's baselines hold reference launches for."""
    store = BaselineStore(path)
    out: dict[str, list[tuple[str, str]]] = {c: [] for c in configs}
    for config, scenario, metric, _ in store.entries():
        bound = store.bound(config, scenario, metric)
        if config in out and bound is not None and len(bound.launches) >= 2:
            out[config].append((scenario, metric))
    return out


@dataclass
class Box:
    """The simulated box of one history: the configs' true speed and the launch-to-launch noise."""

    cv: float
    rng: random.Random
    slow: dict[str, float] = field(default_factory=dict)  # config -> its drop since the patch
    dropped: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # config -> the series that drop
    heavy: float = 0.0  # the share of launches that are slow by HEAVY_DROP on every series (a bad launch)
    drift: float = 0.0  # the box's slowdown so far (every config, every series): not a build's regression
    factors: tuple[float, ...] = ()  # real launches' log factors (--bootstrap): each launch's shared part

    def launch(self, config: str, series: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """One launch of a config: every series' value (1.0 is its true speed before the patch)."""
        shared = self.rng.gauss(0.0, 1.0)
        real = self.rng.choice(self.factors) if self.factors else 0.0  # a real launch's own factor, whatever its tail
        bad = HEAVY_DROP if self.heavy and self.rng.random() < self.heavy else 0.0
        out = {}
        for scenario, metric in series:
            own = math.sqrt(1 - SHARED) * self.rng.gauss(0.0, 1.0)
            z = own + (real / self.cv if self.factors else math.sqrt(SHARED) * shared)
            hit = config in self.slow and (scenario, metric) in self.dropped.get(config, set(series))
            slower = math.log1p(-self.slow[config]) if hit else 0.0
            slower += math.log1p(-bad) + math.log1p(-self.drift)
            level = slower if higher_is_better(metric) else -slower
            out[(scenario, metric)] = math.exp(level + self.cv * z)
        return out


def record(box: Box, config: str, series: Sequence[tuple[str, str]], tolerance: float, looks: int,
           launches: int | None = None) -> dict[tuple[str, str], Bound]:
    """The config's reference as --update-baselines records it: launches until each series' reference can resolve
    the tolerance within a night's looks (decide.reference_short), at most RECORDING_CAP; or exactly `launches`."""
    values: dict[tuple[str, str], list[float]] = {s: [] for s in series}
    for _ in range(launches or RECORDING_CAP):
        for s, x in box.launch(config, series).items():
            values[s].append(x)
        if launches is None and all(len(v) >= 2 and not decide.reference_short(v, tolerance, looks)
                                    for v in values.values()):
            break
    return {s: Bound(s[1], "floor" if higher_is_better(s[1]) else "ceiling", geometric_mean(v), tolerance,
                     launches=tuple(v), build=BASE) for s, v in values.items()}


@dataclass
class Night:
    """What one night did and decided."""

    ran: list[str]
    launches: int
    charged_s: float
    verdicts: dict[tuple[str, str, str], str]  # (config, scenario, metric) -> the run's verdict
    rounds: int = 0


def series_family(verdicts: Sequence[Verdict], q: float) -> family.Family:
    """The family decision before issue 39 (--series-bh): Benjamini-Hochberg at q over every series of the run, each
    series its own hypothesis; kept here to measure the config-level decision against (not what the plugin does)."""
    alone = [v.undecided() for v in verdicts]
    tested = [i for i, v in enumerate(alone) if v.stat]
    worse = benjamini_hochberg([alone[i].stat["p_adj"] for i in tested], q)
    better = benjamini_hochberg([alone[i].stat["p_adj_better"] for i in tested], q)
    out = list(alone)
    for i, w, b in zip(tested, worse, better, strict=True):
        v = alone[i]
        if (v.verdict in (Kind.REGRESSION, Kind.KNOWN_COST) and not w) or (v.verdict == Kind.IMPROVEMENT and not b):
            out[i] = replace(v, verdict=Kind.UNRESOLVED if v.verdict != Kind.IMPROVEMENT else Kind.PASS,
                             note="not significant across the run's series (Benjamini-Hochberg)",
                             alone=(v.verdict, v.note, v.stat.get("answer")))
    return family.Family(len(tested), out)


def pooled(refs: Mapping[str, dict[tuple[str, str], Bound]], runs: Sequence[dict[str, Any]]) -> VarianceModel:
    """The variance model the gate fits from a baselines file and the history, fitted from the simulated references
    and the nights so far."""
    return VarianceModel.fit({**{(sc, m, config): b.launches for config, bs in refs.items() for (sc, m), b in
                                 bs.items()}, **nights_of(runs)})


class RecordedStore(BaselineStore):
    """The simulated references as the gate's baselines store holds them, without a file: the gate's reference book
    reads them where it reads every reference (the box's shift: judge/box.py)."""

    def __init__(self, refs: Mapping[str, dict[tuple[str, str], Bound]]) -> None:
        self.path = baseline_path(ROOT, HARDWARE, MODEL)
        self.doc = tomlkit.document()
        self.refs = refs

    def bound(self, config: str, scenario: str, metric: str) -> Bound | None:
        """The recorded reference of a series (None: not recorded)."""
        return self.refs.get(config, {}).get((scenario, metric))


def night(box: Box, costs: Sequence[ConfigCost], configs: Mapping[str, ServerConfig],
          series: Mapping[str, list[tuple[str, str]]], refs: Mapping[str, dict[tuple[str, str], Bound]],
          runs: list[dict[str, Any]], today: dt.date, build: str, budget_s: float, alpha: float,
          alone: bool = False, model: VarianceModel | None = None) -> Night:
    """One night of the suite, as the session runs it: tonight's pick, each config's first launch and its rounds
    while a series is undecided and the budget allows, the run's decision, and the history line it appends."""
    tonight = schedule.for_suite(costs, budget_s, runs, 1, configs, today)
    plan = NightPlan(budget_s, planned=1, rounds=4, history="simulated")
    plan.make_plan(list(costs))
    plan.tonight(tonight, {})
    gate = PerfGate(ROOT, statistics=Statistics(alpha=alpha), history=lambda hw, model: runs)
    gate.book.variance[baseline_path(ROOT, HARDWARE, MODEL)] = pooled(refs, runs) if model else \
        VarianceModel({}, {}, None)
    gate.book.stores[baseline_path(ROOT, HARDWARE, MODEL)] = RecordedStore(refs)
    launches = rounds = 0
    by_name = {c.config: c for c in costs}
    for cost in (by_name[n] for n in tonight.order(list(by_name))):
        name = cost.config
        if name not in tonight.run or plan.begin(name, 0.0) is not None:
            continue
        launches += 1
        if configs[name].known_issue or not series[name]:
            continue  # a known crash: the launch is paid for and measures nothing
        values: dict[tuple[str, str], list[float]] = {s: [] for s in series[name]}
        look = 1
        while True:
            for s, x in box.launch(name, series[name]).items():
                values[s].append(x)
            at = gate.look(look)
            prov = Provenance(HARDWARE, MODEL, "", "sglang", "", build=build, workload=WORKLOAD)
            out = [gate.against_reference(name, sc, m, v, list(v), refs[name][(sc, m)], prov, at)
                   for (sc, m), v in values.items()]
            undecided = gate.undecided(out, at)
            for scenario in dict.fromkeys(v.scenario for v in out):  # as the session keeps them: a scenario each
                mine = Checked([v for v in out if v.scenario == scenario], [], undecided)
                if look == 1:
                    gate.record(name, scenario, [], mine)
                else:
                    gate.replace(name, scenario, [], mine, "")
            if not undecided or look >= gate.per_night() \
                    or plan.round_allowed(name, cost.launch_s, True, gate.pressing(name)) is not None:
                break
            look += 1
            launches += 1
            rounds += 1
    references = references_of(configs)
    run = merge.Merged(gate.verdicts, versus_all(gate.verdicts, references, gate.statistics))
    # Each series alone (--alone): the run's decision without Benjamini-Hochberg, to show what the family costs.
    decided = replace(run, verdicts=decide.against_the_night(run.verdicts)) if alone else merge.decided(run, alpha)
    line = {"time": today.isoformat(), "build": build, "hardware": HARDWARE, "model": MODEL,
            # What the session's history line keeps (night/plan.py meta): the configs whose launch the budget began,
            # not the configs picked (one whose time tonight's rounds took did not run, and is due again).
            "launched": sorted(plan.tests_run),
            "series": [series_entry(verdict_doc(v)) for v in decided.verdicts]}
    runs.append(line)
    return Night(sorted(plan.tests_run), launches, plan.budget.charged if plan.budget else 0.0,
                 {**{(v.config, v.scenario, v.metric): str(v.verdict) for v in decided.verdicts},
                  **{(v.config, v.scenario, f"{v.metric} vs {v.stat.get('compare_to')}"): str(v.verdict)
                     for v in decided.versus}},
                 rounds)


@dataclass
class History:
    """One history's measures."""

    nights: list[Night]
    dropped: str
    drop_night: int
    over_budget: int = 0
    longest_gap: int = 0
    false_regressions: int = 0  # series newly confirmed a regression that did not regress
    false_nights: int = 0  # nights that newly confirmed any such series (the family decision's error rate)
    to_confirm: int | None = None  # nights from the drop's arrival to its confirmed regression (1: that night)
    passed_within: list[bool] = field(default_factory=list)  # per unchanged series and sample: pass within 3 nights
    passed_within_7: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class Variant:
    """What a cell changes besides the CV: which series of the slowed config drop, a heavy tail, a drift, a quieter
    reference session, and whether the variance model is used."""

    which: str = "all"  # all / one / half of the slowed config's series drop
    heavy: float = 0.0
    drift: float = 0.0  # the box's slowdown over DRIFT_NIGHTS nights from the first, on every config
    ref_cv: float | None = None  # the CV of the session that recorded the references (default: the nights')
    pool: bool = True
    factors: tuple[float, ...] = ()  # --bootstrap: real launches' log factors, resampled as each launch's shared part


DRIFT_NIGHTS = 10


def history(seed: int, cv: float, drop: float, costs: Sequence[ConfigCost], configs: Mapping[str, ServerConfig],
            series: Mapping[str, list[tuple[str, str]]], n_nights: int, drop_night: int, budget_s: float,
            alpha: float, tolerance: float, reference: int | None = None, alone: bool = False,
            variant: Variant = Variant()) -> History:
    """One history of `n_nights` nights with the patch on `drop_night` slowing one config by `drop`."""
    rng = random.Random(seed)
    box = Box(variant.ref_cv if variant.ref_cv is not None else cv, rng, heavy=variant.heavy, factors=variant.factors)
    looks = PerfGate(ROOT).per_night()
    refs = {name: record(box, name, s, tolerance, looks, reference) for name, s in series.items() if s}
    box.cv = cv
    model = pooled(refs, []) if variant.pool else None
    # The drop lands in a config judged against a reference config, not in a reference (those run every night).
    candidates = [c.config for c in costs if series[c.config] and not configs[c.config].known_issue
                  and c.config not in {r.config for r in references_of(configs).values()}]
    dropped = candidates[seed % len(candidates)]
    mine = list(series[dropped])
    count = {"all": len(mine), "half": max(1, len(mine) // 2), "one": 1}[variant.which]
    box.dropped[dropped] = set(rng.sample(mine, count))
    runs: list[dict[str, Any]] = []
    start = dt.date(2027, 1, 1)
    nights: list[Night] = []
    for k in range(1, n_nights + 1):
        if k == drop_night:
            box.slow[dropped] = drop
        box.drift = variant.drift * min(k, DRIFT_NIGHTS) / DRIFT_NIGHTS
        build = "patched" if k >= drop_night else BASE
        nights.append(night(box, costs, configs, series, refs, runs, start + dt.timedelta(days=k), build,
                            budget_s, alpha, alone, model))
    out = History(nights, dropped, drop_night)
    out.over_budget = sum(n.charged_s > budget_s for n in nights)
    judged = [c.config for c in costs if not configs[c.config].known_issue]
    for name in judged:
        on = [k for k, n in enumerate(nights, 1) if name in n.ran]
        gaps = [b - a for a, b in zip([0, *on], [*on, n_nights + 1], strict=True)]
        out.longest_gap = max(out.longest_gap, max(gaps) if on else n_nights)
    seen_false: set[tuple[str, str, str]] = set()
    truly_dropped = {(dropped, sc, m) for sc, m in box.dropped[dropped]}
    for k, n in enumerate(nights, 1):
        before = out.false_regressions
        for key, verdict in n.verdicts.items():
            truly = (key[0], key[1], key[2].split(" vs ")[0]) in truly_dropped and k >= drop_night
            if verdict == Kind.REGRESSION and not truly and key not in seen_false:
                seen_false.add(key)  # counted once: a confirmed regression stands until the build changes
                out.false_regressions += 1
            if verdict != Kind.REGRESSION:
                seen_false.discard(key)
        out.false_nights += out.false_regressions > before
    confirmed = [k for k, n in enumerate(nights, 1) if k >= drop_night and any(
        v == Kind.REGRESSION for (c, sc, m), v in n.verdicts.items() if (c, sc, m.split(" vs ")[0]) in truly_dropped)]
    out.to_confirm = confirmed[0] - drop_night + 1 if confirmed else None
    for first in (1, drop_night):  # each sample of an unchanged series: pass within its first 3 and 7 nights
        for name, ss in series.items():
            if name == dropped and first == drop_night:
                continue
            for sc, m in ss:
                out.passed_within.append(any(n.verdicts.get((name, sc, m)) == Kind.PASS
                                             for n in nights[first - 1:first + 2]))
                out.passed_within_7.append(any(n.verdicts.get((name, sc, m)) == Kind.PASS
                                               for n in nights[first - 1:first + 6]))
    return out


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def cell(cv: float, args: argparse.Namespace, costs: Sequence[ConfigCost], configs: Mapping[str, ServerConfig],
         series: Mapping[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """Every history of one CV, and the table row they make."""
    variant = Variant(args.which, args.heavy, args.drift, args.ref_cv, not args.no_pool, args.factors)
    work = [(args.seed + i, cv, args.drop, costs, configs, series, args.nights, args.drop_night, args.budget * 3600,
             args.alpha, args.tolerance, args.reference, args.alone, variant) for i in range(args.histories)]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        hs = pool.starmap(history, work, chunksize=max(1, len(work) // (4 * args.jobs)))
    waits = [h.to_confirm for h in hs if h.to_confirm is not None]
    nights = len(hs) * args.nights
    within = 2 if cv < 0.05 else 3 if cv < 0.1 else 5
    passed = [x for h in hs for x in h.passed_within]
    passed7 = [x for h in hs for x in h.passed_within_7]
    return {"cv": cv, "histories": len(hs), "nights_over_budget": sum(h.over_budget for h in hs),
            "longest_gap": max(h.longest_gap for h in hs),
            "false_regressions_per_100_nights": round(100 * sum(h.false_regressions for h in hs) / nights, 2),
            "nights_with_a_false_regression_per_100": round(100 * sum(h.false_nights for h in hs) / nights, 2),
            "confirmed": len(waits), "confirm_median": statistics.median(waits) if waits else None,
            "confirm_p90": quantile([w if w is not None else math.inf for w in
                                     (h.to_confirm for h in hs)], 0.9) if hs else None,
            "confirmed_within": within,
            "confirmed_within_share": round(sum(w <= within for w in waits) / len(hs), 3),
            "unchanged_pass_within_3": round(sum(passed) / max(1, len(passed)), 3),
            "unchanged_pass_within_7": round(sum(passed7) / max(1, len(passed7)), 3),
            "launches_per_night": round(sum(n.launches for h in hs for n in h.nights) / nights, 1),
            "rounds_per_night": round(sum(n.rounds for h in hs for n in h.nights) / nights, 2)}


def table(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown table docs/night.md keeps."""
    head = ("| launch CV | nights over budget | longest gap | false regressions / 100 nights (series; nights) | "
            "drop confirmed (median, p90 nights) | confirmed in time | unchanged pass within 3 / 7 nights | "
            "launches / night |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        p90 = "never" if r["confirm_p90"] == math.inf else f"{r['confirm_p90']:g}"
        lines.append(f"| {r['cv'] * 100:g}% | {r['nights_over_budget']} | {r['longest_gap']} | "
                     f"{r['false_regressions_per_100_nights']:g}; {r['nights_with_a_false_regression_per_100']:g} | "
                     f"{r['confirm_median']}, {p90} | "
                     f"{r['confirmed_within_share'] * 100:.0f}% within {r['confirmed_within']} | "
                     f"{r['unchanged_pass_within_3'] * 100:.0f}% / {r['unchanged_pass_within_7'] * 100:.0f}% | "
                     f"{r['launches_per_night']:g} |")
    ref = f"{args.reference} reference launches" if args.reference else "references as --update-baselines records"
    ref += "; EACH SERIES ALONE (no family decision)" if args.alone else ""
    ref += "; each series' own variance (no variance model)" if args.no_pool else ""
    ref += "; Benjamini-Hochberg over every series (the decision before issue 39)" if args.series_bh else ""
    ref += "; no outlier-launch rule" if args.no_outlier else ""
    ref += f"; {args.which} of the config's series drop" if args.which != "all" else ""
    ref += f"; 1 launch in {1 / args.heavy:g} {HEAVY_DROP * 100:g}% slow" if args.heavy else ""
    ref += f"; the box drifts {args.drift * 100:g}% slower over {DRIFT_NIGHTS} nights" if args.drift else ""
    ref += f"; references recorded at CV {args.ref_cv * 100:g}%" if args.ref_cv is not None else ""
    files = ", ".join(map(str, args.bootstrap or ()))
    ref += f"; each launch's shared factor resampled from {len(args.factors)} real launches ({files})" \
        if args.factors else ""
    lines.append(f"\n{rows[0]['histories']} histories of {args.nights} nights a cell; a {args.drop * 100:g}% drop in "
                 f"one config on night {args.drop_night}; budget {args.budget:g} h; tolerance "
                 f"{args.tolerance * 100:g}%; alpha {args.alpha:g}; {ref}")
    return "\n".join(lines)


def real_factors(paths: Sequence[Path]) -> tuple[float, ...]:
    """Each base-build launch of gpu_gate launches.json files as a log factor about the mean of its machine's (a
    warmup launch and a failed one left out, as the gate left them out): the spread of real launches of one build,
    with whatever tail they have. Each file, and each GPU within it, is centred alone: two GPUs' speeds are not a
    launch's noise."""
    factors: list[float] = []
    for path in paths:
        doc = json.loads(path.read_text(encoding="utf-8"))
        point = next(iter(doc["points"]))
        machines: dict[str, list[float]] = {}
        for x in doc["launches"]:
            if x.get("build") == "base" and not x.get("warmup") and x.get("role") != "warmup" and "error" not in x:
                machines.setdefault(str(x.get("gpu", "")), []).append(math.log(statistics.geometric_mean(x[point])))
        if not machines:
            raise SystemExit(f"{path}: 0 base launches; a bootstrap needs 3 or more")
        for gpu, logs in machines.items():
            if len(logs) < 3:
                raise SystemExit(f"{path}: {len(logs)} base launches{f' on {gpu}' if gpu else ''}; a bootstrap "
                                 "needs 3 or more of each machine")
            mean = statistics.fmean(logs)
            factors += [x - mean for x in logs]
    return tuple(factors)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cells and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cv", type=float, action="append", help="launch-to-launch CV (repeat; default 0.02 0.05 0.1)")
    ap.add_argument("--histories", type=int, default=200)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--drop", type=float, default=0.10)
    ap.add_argument("--drop-night", type=int, default=10)
    ap.add_argument("--budget", type=float, default=8.0, help="hours a night")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--reference", type=int, help="reference launches a series records (default: as "
                    "--update-baselines records them, at most 12)")
    ap.add_argument("--alone", action="store_true", help="each series judged alone: no Benjamini-Hochberg over the "
                    "run (to measure what the family decision costs; not what the plugin does)")
    ap.add_argument("--which", choices=("all", "half", "one"), default="all",
                    help="which series of the slowed config drop")
    ap.add_argument("--heavy", type=float, default=0.0, help=f"share of launches {HEAVY_DROP * 100:g}%% slow on "
                    "every series (heavy-tailed launch noise), e.g. 0.05")
    ap.add_argument("--drift", type=float, default=0.0, help=f"the box's slowdown over {DRIFT_NIGHTS} nights on "
                    "every config (not a build's regression), e.g. 0.03")
    ap.add_argument("--ref-cv", type=float, help="the CV of the session that recorded the references")
    ap.add_argument("--no-pool", action="store_true", help="each series' own variance: no variance model (to "
                    "measure what it gives; not what the plugin does)")
    ap.add_argument("--series-bh", action="store_true", help="the family decision before issue 39: "
                    "Benjamini-Hochberg over every series (to measure the config-level decision; not what the "
                    "plugin does)")
    ap.add_argument("--no-outlier", action="store_true", help="no outlier-launch rule (judge/family.py outlier): "
                    "a config's p with every launch, as before it")
    ap.add_argument("--bootstrap", type=Path, action="append", help="real launches (a scripts/gpu_gate.py "
                    "launches.json, e.g. docs/gpu_gate_live.json; repeat to pool files, each about its own mean): "
                    "each simulated launch's shared factor is one of their base build's "
                    "launches, resampled (their own tail, not a normal's); the series' own part as modelled, at "
                    "the real launches' CV")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (histories are independent)")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args(argv)
    if args.series_bh:
        family.family = series_family  # the gate and merge look it up at call time
    if args.no_outlier:
        family.OUTLIER = math.inf
    args.factors = real_factors(args.bootstrap) if args.bootstrap else ()
    cvs = args.cv or ([statistics.stdev(args.factors) / math.sqrt(SHARED)] if args.factors else [0.02, 0.05, 0.10])
    costs, configs = suite()
    series = series_of([c.config for c in costs])
    rows = []
    for cv in cvs:
        t0 = time.monotonic()
        rows.append(cell(cv, args, costs, configs, series))
        print(f"CV {cv * 100:g}%: {json.dumps(rows[-1])} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    print(table(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
