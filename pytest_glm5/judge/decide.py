"""Statistical verdicts of one series (config, scenario, metric): against its recorded reference launches, build B
against build A, a config against its reference config of the same run; and the run's family-wise correction.

Every verdict carries its test: the change with its 95% CI, p, the look's alpha, CV and the launches on each side.
A regression needs both: a drop beyond the tolerance (the practical threshold) and p below the look's alpha. A drop
beyond the tolerance that is not significant is "unresolved", with the launches that would decide it; the caller adds
launches while looks remain (alpha spending keeps the total false-alarm rate at alpha).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from ..metrics import ACCEPTANCE_METRICS, geometric_mean, higher_is_better, log_cv, summarize_repeats
from ..words import counted
from .carry import Prior
from .family import extra, reference, tested
from .looks import Look
from .stats import (
    Comparison,
    ab_decision,
    compare,
    cv_upper,
    detectable_drop,
    launches_needed,
    log_var,
    mean_log,
    welch,
)
from .suspects import drops
from .suspects import mark as _suspect
from .variance import NOISIER, Spread
from .verdicts import Bound, Kind, Test, Verdict, workload_differs

# "pass" means the data rules out a drop beyond the tolerance: the one-sided bound of the change at this confidence
# lies inside it (as the A/B gate's SAME already works). A drop of exactly the tolerance then reads "pass" in at most
# 5% of runs, whatever the CV; a run that cannot rule it out says "unresolved" and what would resolve it.
PASS_CONFIDENCE = 0.95
AB_TOLERANCE = 0.02  # the practical threshold of an A/B without baselines: a smaller change never fails
# A GLM-5 launch costs 10-50 minutes: past this many (about a night at 30 minutes each) advice to add launches
# cannot be followed, and the verdict says so.
AFFORDABLE_LAUNCHES = 16
# With a history, a regression must also be a drop beyond this at the look's alpha: the box moves between the nights
# that read its shift (judge/box.py, the last nights that ran a reference's build) and the nights a sample spans,
# and a sample of 20 launches re-tested nightly reads that movement as a drop. Measured (scripts/simulate_nights.py,
# the box 3% slower over nights 1-10, 30 histories): 1.33 false nights in 100 without it, 0.56 with it; a 10% drop
# at CV 10% confirmed within 5 nights in 83% of histories either way.
DRIFT_MARGIN = 0.01


def per_launch(values: Sequence[float], launches: Sequence[str]) -> list[float]:
    """One value per launch, in launch order: the geometric mean of that launch's repeats."""
    groups: dict[str, list[float]] = {}
    for value, launch in zip(values, launches, strict=True):
        groups.setdefault(launch, []).append(value)
    return [geometric_mean(v) for v in groups.values()]


def worst(c: Comparison) -> float:
    """The worst change (as a gain: negative is a drop) the data allow at PASS_CONFIDENCE, one-sided; -inf when
    there is no spread to bound it with."""
    return c.gain_bounds(2 * PASS_CONFIDENCE - 1)[0] if c.testable else -math.inf


def _stat(c: Comparison, against: str, test: str, tolerance: float, look: Look, n_ref: int | None,
          **extra: Any) -> Test:
    level = look.level
    p = c.p_worse
    out: dict[str, Any] = {"against": against, "describe": c.describe(), "test": test, "tolerance": tolerance,
            # What this run could see: the worst drop it cannot rule out, and the drop it finds with 95% power.
            "worst": worst(c) if c.testable else None,
            "detectable": detectable_drop(c.cv, c.n_new, look.alpha, n_ref) if c.testable else None,
            "change": c.change, "gain": c.gain, "ci": [c.ci_low, c.ci_high], "p_worse": c.p_worse,
            "p_better": c.p_better, "cv": c.cv, "n_new": c.n_new, "n_ref": c.n_ref, "df": c.df, "alpha": level,
            "look": look.look, "looks": look.looks,
            # On the scale of the run's alpha, so one family decision covers every look's level.
            "p_adj": min(1.0, p * look.alpha / level) if level > 0 and not math.isnan(p) else 1.0,
            "p_adj_better": min(1.0, c.p_better * look.alpha / level) if level > 0 and not math.isnan(c.p_better)
            else 1.0,
            **extra}
    return cast(Test, out)


def to_resolve(cv: float, tolerance: float, n_ref: int | None) -> int | None:
    """New launches (per arm for an A/B) after which an unchanged series reads "pass" at this tolerance with 80%
    probability; None: the reference is too small for any count."""
    return launches_needed(cv, tolerance, 1 - PASS_CONFIDENCE, n_ref, power=0.8)


def reference_short(values: Sequence[float], tolerance: float, looks: int) -> bool:
    """Recording: whether these launch values (two or more) are still too few to be a reference that resolves
    `tolerance` within `looks` new launches. The spread counts at its 80% upper bound, not its estimate: two
    launches that agree by luck do not stop the recording."""
    n = to_resolve(cv_upper(log_cv(values), len(values)), tolerance, len(values))
    return n is None or n > looks


def _needed(c: Comparison, look: Look, n_ref: int | None, tolerance: float) -> tuple[str, int | None]:
    """What this run could see, and what resolving the series would take: advice a night can follow (one count:
    the launches still to add, returned beside the line for the plan to price), or the honest word that it cannot
    (None). The CV is in the line's test already."""
    launches = counted(c.n_new, "launch", "launches")
    if not c.testable:
        return f"{launches} and no spread to test with: nothing ruled out; add launches", None
    finds = detectable_drop(c.cv, c.n_new, look.alpha, n_ref)
    could = f"with {launches} this run rules out only a drop beyond {-worst(c) * 100:.1f}% " \
            f"(tolerance {tolerance * 100:g}%) and finds one of {finds * 100:.0f}% or more"
    n = to_resolve(c.cv, tolerance, n_ref)
    if n is None:
        return f"{could}; the {c.n_ref} reference launches cannot resolve " \
               f"{tolerance * 100:g}% at any count: record more (--update-baselines --glm5-launches 5)", None
    return f"{could}; {_more(n, c.n_new, tolerance, 'new launch')}", _to_add(n, c.n_new)


def futile(look: Look, to_add: int | None) -> bool:
    """Whether the looks left tonight cannot reach the launches a series needs: no round is spent on it (a history
    carries its launches to the next night, which goes on from here); at the last look nothing is left to spend."""
    return to_add is not None and 0 < look.left < to_add


def _to_add(n: int, have: int) -> int | None:
    """The launches still to add when `n` resolve a series and it has `have` (None: more than a night affords)."""
    return None if n > AFFORDABLE_LAUNCHES else max(1, n - have)


def _more(n: int, have: int, tolerance: float, side: str) -> str:
    """`about 4 more launches would resolve it (80% power)`: the one launch count an unresolved line gives."""
    more = _to_add(n, have)
    if more is None:
        return f"resolving {tolerance * 100:g}% would take about {n - have} more {side}es, more than a night " \
               f"affords: lower the launch-to-launch spread or judge a wider tolerance"
    if n <= have:
        return "another launch may resolve it (it has the launches that resolve such a series 4 times in 5)"
    return f"about {more} more {side}{'es' if more != 1 else ''} would resolve it (80% power)"


def _lent(spread: Spread | None) -> dict[str, Any]:
    """compare()'s arguments for what the family lends a series (nothing without a variance model)."""
    return {} if spread is None else {"lent": spread.lent, "pooled": spread.describe()}


def against_reference(config: str, scenario: str, metric: str, samples: list[float], launches: list[float],
                      bound: Bound, workload: dict[str, Any], look: Look, pooled: Spread | None = None,
                      extra: float = 0.0) -> Verdict:
    """This run's launches against the bound's reference launches (pooled t-test on logs, one-sided; moderated by
    what the series' family lends where `pooled` is given; `extra`: the variance the reference's mean carries beyond
    its launches', stats.compare)."""
    spread = summarize_repeats(samples)
    measured = float(spread.pop("median"))
    v = Verdict(config, scenario, metric, measured, bound, Kind.PASS, spread, samples, dict(workload),
                launches=list(launches))
    if workload and workload_differs(bound.workload, workload):
        v.verdict = Kind.WORKLOAD_CHANGED
        return v
    c = compare(launches, list(bound.launches), higher_is_better(metric), extra=extra, **_lent(pooled))
    tolerance = bound.threshold()
    v.stat = _stat(c, f"{len(bound.launches)} reference launches", f"t-test at alpha {_a(look.level)}, look "
                   f"{look.look} of {look.looks}", tolerance, look, len(bound.launches))
    if pooled is not None:
        v.stat["pooled"] = pooled.to_dict()
    v.verdict = _nightly(c, tolerance, look.level)
    drift = ""  # why a drop beyond the tolerance is not confirmed: the box may have moved (DRIFT_MARGIN)
    if look.night is not None:
        v.stat["drift_margin"] = DRIFT_MARGIN
        if v.verdict == Kind.REGRESSION and (p := c.p_beyond(DRIFT_MARGIN)) >= look.level:
            v.verdict = Kind.UNRESOLVED
            drift = (f"a drop beyond the {DRIFT_MARGIN * 100:g}% the box may have moved since its shift was read is "
                     f"not yet significant (p {p:.2g}, alpha {_a(look.level)})")
    if v.verdict == Kind.UNRESOLVED:
        v.note, add = _needed(c, look, len(bound.launches), tolerance)
        v.note = f"{drift}; {v.note}" if drift else v.note
        if add is not None:
            v.stat["to_add"] = add  # the count the note states, for the plan to price without reading the note
        if c.testable and not look.last and -c.gain <= tolerance and (add is None or futile(look, add)):
            # A change within the tolerance that tonight's rounds cannot settle as a pass: no launch is spent on it
            # (the note says what would decide it). A drop beyond it keeps its rounds: another launch may confirm it.
            v.stat["futile"] = True
            v.note += (f"; the {look.left} looks left tonight cannot reach it" if add is not None else
                       "") + ": no round is spent on it"
    return v


def carried(alone: Verdict, prior: Prior, rejudge: Callable[[list[float], Look], Verdict], look: Look) -> Verdict:
    """Tonight's verdict of a series with what earlier nights of its sample left (judge/carry.py): a decided
    verdict stands while tonight's launches agree with it (a regression fails until the build changes or the
    baselines are updated, unless tonight shows no drop beyond the tolerance: then it is examined again from a new
    sample; a pass needs no more launches unless tonight drops), else tonight's launches join theirs in one
    sequential test whose looks count across the nights.
    `alone`: tonight's launches judged by themselves; `rejudge(launches, look)` judges a pooled sample."""
    tonight = list(alone.launches)
    dropped = drops(alone)
    if prior.decided == Kind.REGRESSION and alone.stat and dropped:
        stat = cast(Test, {**alone.stat, "p_adj": 0.0, "nights": prior.nights + 1})  # decided by its own night
        return replace(alone, verdict=Kind.REGRESSION, stat=stat,
                       note=f"confirmed on {prior.decided_on}, the build unchanged since, and tonight's launches "
                            "drop too: it fails until the build changes or the baselines are updated "
                            "(--update-baselines=all)")
    if prior.decided == Kind.REGRESSION and alone.stat:
        # As a pass stands only while tonight does not drop, a regression stands only while tonight does: an unchanged
        # build confirmed on one night's outlier launches (a host-bound millisecond, a slow launch) is examined again
        # from tonight's launches, a new sample (the history marks where), instead of failing every night after.
        v = _suspect(alone)
        v.stat["restart"] = True
        v.note = (f"confirmed a regression on {prior.decided_on} with this build, yet tonight's launches show "
                  f"{float(alone.stat.get('change', 0.0)) * 100:+.1f}%, within the "
                  f"{float(alone.stat.get('tolerance', 0.0)) * 100:g}% tolerance: examined again, a new sample starts "
                  "tonight" + (f"; {v.note}" if v.note else ""))
        return v
    if prior.decided == Kind.PASS and alone.stat and not dropped:
        return replace(alone, verdict=Kind.PASS, stat=cast(Test, {**alone.stat, "nights": prior.nights + 1}),
                       note=f"passed on {prior.decided_on}, the build unchanged since: no more launches until it "
                            "changes")
    if prior.decided == Kind.PASS:  # a pass, then a drop with a build the fingerprint calls the same: say so
        v = _suspect(alone)
        v.note = f"passed on {prior.decided_on} with this build, yet tonight's launch dropped: {v.note}"
        return v
    if not prior.launches or not alone.stat:
        v = _suspect(alone)
        if prior.broke and v.stat:  # the line says why tonight's launches stand alone
            v.note = f"{prior.broke}: a new sample starts tonight" + (f"; {v.note}" if v.note else "")
        return v
    n_prior = len(prior.launches)
    if n_prior >= look.looks:
        # A sequential test that spent its looks ends undecided; a new one starts with tonight's launches (its own
        # alpha, its own looks), so that a drop arriving later is still found, and the history marks where.
        v = _suspect(alone)
        v.stat["restart"] = True
        v.note = (f"its {look.looks} looks were spent over {prior.nights} nights since {prior.since} without a "
                  "decision (a larger reference resolves it sooner: --update-baselines --glm5-launches 5); a new "
                  f"sample starts tonight" + (f": {v.note}" if v.note else ""))
        return v
    at = replace(look, look=min(n_prior + look.look, look.looks))
    v = rejudge([*prior.launches, *tonight], at)
    v.launches = tonight  # the history keeps each night's own launches; the test used all of them
    v.stat["nights"], v.stat["carried"] = prior.nights + 1, n_prior
    v.stat["tested"] = [*prior.launches, *tonight]
    return _suspect(v)


def wants_launch(v: Verdict, carries: bool) -> bool:
    """Whether another launch tonight may decide this verdict: a regression seen on one launch, or a series left
    unresolved that tonight's looks can still settle (a futile one's note says what would). With a history
    (`carries`) only a drop beyond the tolerance: a series within it waits for its config's next night (that launch
    comes anyway), a drop is confirmed or cleared tonight while the budget allows."""
    if not v.stat:
        return False
    if v.verdict == Kind.REGRESSION:
        return int(v.stat.get("n_new", len(v.launches))) < 2
    if v.verdict != Kind.UNRESOLVED or v.stat.get("futile"):
        return False
    return not carries or drops(v)


def _nightly(c: Comparison, tolerance: float, level: float) -> str:
    if -c.gain > tolerance:
        return Kind.REGRESSION if c.p_worse < level else Kind.UNRESOLVED
    if c.gain > tolerance and c.p_better < level:
        return Kind.IMPROVEMENT
    return Kind.PASS if worst(c) >= -tolerance else Kind.UNRESOLVED


def _a(alpha: float) -> str:
    return f"{alpha:.2g}"


def ab(config: str, scenario: str, metric: str, a: list[float], b: list[float], names: tuple[str, str],
       samples_b: list[float], look: Look, tolerance: float = AB_TOLERANCE,
       prior: Sequence[Sequence[float]] = (), pooled: Spread | None = None) -> Verdict:
    """Build B against build A: SAME / DIFFERENT / UNKNOWN; DIFFERENT and worse beyond the tolerance is a
    regression, UNKNOWN is unresolved. Its line names both of the rule's thresholds once each (SAME's margin on its
    own CI level, DIFFERENT's tolerance at the look's alpha) and the interval it shows is the one SAME is decided on.
    `prior`: other launch groups of the same spread (recorded references) where a side has one launch; `pooled`:
    what the series' family lends (judge/variance.py)."""
    c = compare(b, a, higher_is_better(metric), prior=prior, **_lent(pooled))
    answer = ab_decision(c, tolerance, look.level, look.effect, look.alpha)
    spread = summarize_repeats(samples_b)
    measured = float(spread.pop("median"))
    direction = ""
    if answer == "DIFFERENT":
        direction = "/worse" if c.gain < 0 else "/better"
    level = 1 - 2 * look.alpha  # SAME: two one-sided tests at the run's alpha
    lo, hi = c.change_bounds(level) if c.testable else (c.change, c.change)
    v = Verdict(config, scenario, metric, measured, None, Kind.PASS, spread, samples_b, launches=list(b))
    rule = (f"{names[1]} vs {names[0]}, look {look.look} of {look.looks}: SAME if the {level * 100:g}% CI lies inside "
            f"+-{look.effect * 100:g}%, DIFFERENT if p < {_a(look.level)} and the change is beyond "
            f"{tolerance * 100:g}%")
    v.stat = _stat(c, f"build {names[0]} ({len(a)} launches)", rule, tolerance, look, None, answer=answer + direction,
                   build_a=names[0], build_b=names[1], launches_a=list(a), ci_level=level, margin=look.effect)
    v.stat["ci"] = [lo, hi]
    v.stat["describe"] = c.describe(level) if c.testable else c.describe()
    if answer == "DIFFERENT":
        beyond = abs(c.gain) > tolerance
        v.verdict = (Kind.REGRESSION if c.gain < 0 else Kind.IMPROVEMENT) if beyond else Kind.PASS
    elif answer == "UNKNOWN":
        v.verdict = Kind.UNRESOLVED
        v.note = _unknown(c, look, tolerance, level, (lo, hi))
    return v


def _unknown(c: Comparison, look: Look, tolerance: float, level: float, ci: tuple[float, float]) -> str:
    """Why an A/B series is neither SAME nor DIFFERENT, on the rule's own interval, and what would decide it."""
    if not c.testable:
        return f"{c.n_new} launches per arm and no spread to test with: nothing ruled out; add launches"
    p = c.p_worse if c.gain < 0 else c.p_better
    why_not = (f"p {p:.2g} is not below {_a(look.level)}" if abs(c.gain) > tolerance else
               f"the change is within the {tolerance * 100:g}% tolerance")
    n = launches_needed(c.cv, look.effect, look.alpha, None, power=0.8)
    return (f"not SAME (the {level * 100:g}% CI {ci[0] * 100:+.1f}%..{ci[1] * 100:+.1f}% is not "
            f"inside +-{look.effect * 100:g}%) and not DIFFERENT ({why_not}); "
            f"{_more(n or AFFORDABLE_LAUNCHES + 1, c.n_new, look.effect, 'per-arm launch')}")


def against_config(config: str, scenario: str, metric: str, new: list[float], ref: list[float], ref_name: str,
                   prior: Sequence[Sequence[float]], tolerance: float, look: Look, expected_slower: bool,
                   pooled: Spread | None = None) -> Verdict:
    """A config against its reference config's launches of this same run. One launch each has no spread, so the
    between-launch variance also comes from the recorded references of both (`prior`) and what the family lends."""
    c = compare(new, ref, higher_is_better(metric), prior=prior, **_lent(pooled))
    v = Verdict(config, scenario, metric, geometric_mean(new), None, Kind.PASS, launches=list(new))
    v.stat = _stat(c, ref_name, f"t-test at alpha {_a(look.level)}", tolerance, look, len(ref), compare_to=ref_name,
                   launches_ref=list(ref))
    v.verdict = _nightly(c, tolerance, look.level)
    if v.verdict == Kind.REGRESSION and expected_slower:
        v.verdict = Kind.KNOWN_COST
        v.note = "declared expected_slower: only a drop against its own floors fails"
    elif v.verdict == Kind.REGRESSION and len(new) < 2:
        # As for a series against its own reference: one launch of a config can be a slow launch (a 2.5-sigma launch
        # factor moved every metric of one config by -5% in a rehearsal of unchanged code), so it is not confirmed.
        v.verdict = Kind.UNRESOLVED
        v.note = "seen on one launch of this config; --glm5-launches 2 confirms or clears it"
    return v


def _night_groups(verdicts: Sequence[Verdict]) -> dict[str, Verdict]:
    """Per config, its throughput series with the most launches this run (one per config, since a config's series
    share its launches): what the run says of the night's launch-to-launch spread."""
    best: dict[str, Verdict] = {}
    for v in verdicts:
        if not v.stat or "answer" in v.stat or "compare_to" in v.stat or not v.launches or v.bound is None \
                or not higher_is_better(v.metric):
            continue
        if v.config not in best or len(v.launches) > len(best[v.config].launches):
            best[v.config] = v
    return best


# The fewest degrees of freedom of tonight's spread that may replace the test's: on one (a config alone, its two
# launches) the F test fires 1 time in 20 on an unchanged night and Welch's test on one degree of freedom then
# rules out only a drop beyond 23% (a fresh-clone CI met it: -18.4% at p 5e-10 read unresolved).
NIGHT_DF = 3


def _night_spread(new: Sequence[float], others: Sequence[Verdict], var_r: float, df_r: float
                  ) -> tuple[float, int] | None:
    """Tonight's launch-to-launch variance of log values and its degrees of freedom, where it is wider than `var_r`
    (the spread the test used, on `df_r` degrees of freedom) beyond chance: a one-sided F test at NOISIER. None
    where it is not (or cannot say): a reference recorded in one quiet session does not set the spread of a noisy
    night's launches.

    Tonight's spread: the series' own launches about their mean, and each other config's (`others`, one series a
    config) launches about their mean and their mean's change from its reference about the other configs' mean
    change (less what the references' own means err by): every config judged tonight adds a degree of freedom, a
    first launch too. About their mean, not about none: a build that slows every config (a kernel all of them run)
    moves them together and is not spread; a config that alone regressed widens it, which only makes the test more
    careful."""
    from scipy import stats as sps
    if not (var_r > 0 and df_r > 0):
        return None
    ss, df_n = 0.0, 0
    shifts: list[tuple[int, float, int]] = []  # per other config: its launches, its mean's change, its reference's
    for xs, rs in ((new, ()), *((tested(o), reference(o)) for o in others)):
        logs = [math.log(x) for x in xs if x > 0]
        if not logs:
            continue
        m = sum(logs) / len(logs)
        ss += sum((x - m) ** 2 for x in logs)
        df_n += len(logs) - 1
        if len(rs) >= 2 and math.isfinite(dev := m - mean_log(rs)):
            shifts.append((len(logs), dev, len(rs)))
    if len(shifts) >= 2:
        centre = sum(n * d for n, d, _ in shifts) / sum(n for n, _, _ in shifts)
        ss += max(0.0, sum(n * ((d - centre) ** 2 - var_r / m) for n, d, m in shifts))
        df_n += len(shifts) - 1
    if df_n < NIGHT_DF or ss / df_n / var_r <= float(sps.f.ppf(1 - NOISIER, df_n, df_r)):
        return None
    return ss / df_n, df_n


def _noisier(v: Verdict, others: Sequence[Verdict], lent: Spread | None) -> Comparison | None:
    """The verdict's test again at tonight's spread where tonight's launches spread wider than the test's (see
    _night_spread): a series against its reference with each side's own spread (stats.welch: tonight's for its
    launches, the family's for the reference); a config against its compare_to config, both sides tonight's."""
    up, st = higher_is_better(v.metric), v.stat
    if "compare_to" in st:
        new, ref = list(v.launches), [float(x) for x in st.get("launches_ref") or []]
        var_r = lent.var if lent is not None else float(st.get("cv", 0.0)) ** 2
        df_r = float(lent.df) if lent is not None else float(st.get("df") or len(new) + len(ref) - 2)
        night = _night_spread(new, others, var_r, df_r) if ref else None
        return compare(new, ref, up, lent=night) if night is not None else None
    new, ref = tested(v), reference(v)
    own = log_var(ref)
    if lent is not None and math.isfinite(lent.var) and lent.df > 0:
        var_r, df_r = lent.var, float(lent.df)
    elif own is not None:
        var_r, df_r = own[0], float(own[1])
    else:
        return None
    night = _night_spread(new, others, var_r, df_r)
    has_ref = any(x > 0 for x in ref)
    return welch(new, ref, up, night, (var_r, df_r), "tonight's spread", extra(v)) \
        if night is not None and has_ref else None


def _rescaled(st: Test, adj: str, raw: str, p: float) -> float:
    """A p of the night's test on the run's scale, as the verdict's own p was put on it (p_adj = p x alpha / level)."""
    d = cast(dict[str, Any], st)
    was, base = float(d.get(adj, 1.0)), float(d.get(raw, math.nan))
    if not base > 0 or was >= 1.0:
        return max(was, min(1.0, p))
    return max(was, min(1.0, p * was / base))


def against_the_night(verdicts: Sequence[Verdict], versus: Sequence[Verdict] = ()) -> list[Verdict]:
    """A pass or regression decided against its reference's spread is tested again with this run's own launch-to-
    launch spread (the other configs' launches) where that is wider: a night noisier than the reference's (a
    neighbour on the box, clocks) must not let one lucky launch pass, nor one slow one confirm. Only ever turns a
    verdict unresolved; copies, the given verdicts are not changed. `versus`: the run's configs against their
    compare_to configs, held to the same night's spread (returned after `verdicts`, in order)."""
    groups = _night_groups(verdicts)
    out: list[Verdict] = []
    for v in [*verdicts, *versus]:
        st = v.stat
        others = [g for config, g in groups.items() if config != v.config]
        prior = [list(g.launches) for g in others if len(g.launches) >= 2]
        paired = bool(st) and "compare_to" in st
        # Drafts accepted are the text's and the build's, not the box's speed: the night's spread is not theirs.
        unreferenced = (v.bound is None and not paired) or (v.bound is not None and len(v.bound.launches) < 1)
        if not st or "answer" in st or v.metric in ACCEPTANCE_METRICS or unreferenced \
                or v.verdict not in (Kind.PASS, Kind.REGRESSION) or not v.launches:
            out.append(v)
            continue
        # Like with like: the launches and the reference the test used (earlier nights' carried, later nights'
        # grown), and what the family lent it, with tonight's other configs added to the spread.
        lent = Spread.from_dict(st["pooled"]) if isinstance(st.get("pooled"), dict) else None
        noisier = _noisier(v, others, lent)
        if noisier is not None:
            # The night's spread is the test's now: its p is what the family decision weighs.
            stat = cast(Test, {**st, "p_worse": noisier.p_worse, "p_better": noisier.p_better,
                               "p_adj": _rescaled(st, "p_adj", "p_worse", noisier.p_worse),
                               "p_adj_better": _rescaled(st, "p_adj_better", "p_better", noisier.p_better),
                               "night_cv": noisier.cv, "worst": worst(noisier)})
            if _nightly(noisier, st["tolerance"], st["alpha"]) != Kind.UNRESOLVED:
                out.append(replace(v, stat=stat))
                continue
            c = noisier
        elif paired:
            out.append(v)
            continue
        else:
            c = compare(tested(v), reference(v), higher_is_better(v.metric), prior=prior, extra=extra(v), **_lent(lent))
            if c.cv <= st["cv"] or _nightly(c, st["tolerance"], st["alpha"]) != Kind.UNRESOLVED:
                out.append(v)
                continue
            stat = cast(Test, {**st, "worst": worst(c), "night_cv": c.cv})
        others_n = len(others) if noisier is not None else len(prior)
        note = (f"this run's launches spread wider than the test saw (CV {c.cv * 100:.1f}% with {others_n} other "
                f"configs' launches, against {st['cv'] * 100:.1f}%): it rules out only a drop beyond "
                f"{-worst(c) * 100:.1f}% (tolerance {st['tolerance'] * 100:g}%); was {v.verdict}")
        out.append(replace(v, verdict=Kind.UNRESOLVED, note=note, stat=stat))
    return out
