"""Was the workload the one intended? Held before any verdict: a figure of another workload is neither faster nor
slower, so a miss replaces the verdict with its one named reason.

What a run observes of its own workload (`observed`, the mean over its launches) is kept with each verdict's
workload and recorded with the bound, so tomorrow's night is held to what the reference served:

- **input length**: the prompt as the server counted it (a chat prompt with its template) within 2% of the asked
  `input_len` (AIPerf compensates the template the same way; a template that grew is a workload that changed);
- **prefix hit**: in a shared-prefix shape, the share of prompt tokens the server's cache served over the window
  (its own per-request counts) within 2 points of what the shape implies (Workload.ideal_prefix_hit): a cache that
  stops hitting is "workload not held", not a latency regression;
- **arrivals**: in an open loop, the rate and the CV of the sends the client made each within 10% of those of the
  gaps it drew: an in-flight cap that throttles sends, or a client too busy to send on time, holds them back;
- **reasoning**: with thinking on, the mean reasoning tokens a request within 10% of the reference's, as MLPerf
  bounds a reasoning model's tokens per sample to 0.9-1.1x of the reference: shorter thinking buys throughput no
  user asked for, so outside it the point is "workload drift", never faster or slower.

    >>> asked = {"input_len": 128, "thinking": True}
    >>> check(asked, {"input_tokens": 128.0, "reasoning_tokens": 960.0}, {"reasoning_tokens": 1200.0})[:2]
    ('workload drift', 'workload drift: 960 reasoning tokens a request where the reference thought 1200 (-20.0%, \
held to 10%): shorter or longer thinking is another workload, neither faster nor slower')
    >>> check(asked, {"input_tokens": 131.0}, None)[1]
    'workload not held: the server counted 131 prompt tokens a request where 128 were asked (+2.3%, held to 2%)'
    >>> check(asked, {"input_tokens": 128.0, "reasoning_tokens": 1150.0}, {"reasoning_tokens": 1200.0}) is None
    True
    >>> check({"input_len": 1024}, {"prefix_hit": 0.41, "prefix_ideal": 0.86}, None)[1]
    'workload not held: prefix hit 41% where the shape implies 86% (held to 2 points): a cache that does not serve \
the shape is no latency of it'

A trace's rows (or a range's draws) ask their own lengths: the client says their mean, and that is the target.
    >>> check({"input_len": 128, "trace": "t.jsonl"}, {"input_tokens": 4685.5, "input_tokens_asked": 4685.5}, None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

INPUT_TOLERANCE = 0.02
REASONING_TOLERANCE = 0.10
DRIFT = "workload drift"  # the model's own share of the workload moved (Kind.WORKLOAD_DRIFT)
NOT_HELD = "workload not held"  # the shape asked for was not the one served (Kind.WORKLOAD_NOT_HELD)
# metric of a run -> the name its observed mean is kept under
OBSERVED = {"mean_input_tokens": "input_tokens", "mean_input_tokens_asked": "input_tokens_asked",
            "mean_reasoning_tokens": "reasoning_tokens", "prefix_hit": "prefix_hit",
            "prefix_hit_ideal": "prefix_ideal", "arrival_cv": "arrival_cv", "arrival_cv_asked": "arrival_cv_asked",
            "arrival_rate": "arrival_rate", "arrival_rate_asked": "arrival_rate_asked"}
# What a busy host can hold back: an open loop's arrivals (the client sends late), named from OBSERVED's names.
HOST_HELD = frozenset({"arrival_cv", "arrival_cv_asked", "arrival_rate", "arrival_rate_asked"})
ARRIVAL_TOLERANCE = 0.10  # an open loop's arrival CV within 10% of the CV of the gaps it drew
PREFIX_POINTS = 0.02  # the hit rate a prefix cache achieves, within 2 points of what the shape implies


def beyond_the_host(seen: Mapping[str, float]) -> dict[str, float]:
    """What was observed less what a busy host can hold back (an open loop's arrivals): a prompt counted otherwise,
    a cache that stopped hitting or thinking that drifted is the server's whatever the client's CPU did."""
    return {k: x for k, x in seen.items() if k not in HOST_HELD}


def observed(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean over launches of what each launch observed of its workload (empty where nothing was)."""
    out: dict[str, float] = {}
    for metric, name in OBSERVED.items():
        values = [float(m[metric]) for m in runs if metric in m]
        if values:
            out[name] = round(sum(values) / len(values), 2)
    return out


def check(asked: Mapping[str, Any], seen: Mapping[str, float], reference: Mapping[str, Any] | None
          ) -> tuple[str, str, str] | None:
    """Why tonight's workload was not the one to judge: (kind, note, the note's cause in a phrase), or None when it
    held."""
    miss = _missed(asked, seen, reference)
    if miss is None:
        return None
    kind, short, why = miss
    return kind, f"{kind}: {short}" + (f": {why}" if why else ""), short


def _missed(asked: Mapping[str, Any], seen: Mapping[str, float], reference: Mapping[str, Any] | None
            ) -> tuple[str, str, str] | None:
    # The mean the client asked of the prompts it sent where it says one (a trace's rows, a range's draws), else
    # the fixed input_len.
    target = seen.get("input_tokens_asked") or (asked.get("input_len") if asked.get("range_ratio", 1.0) == 1.0
                                                  else None)
    got = seen.get("input_tokens")
    if got is not None and target:
        off = got / float(target) - 1
        if abs(off) > INPUT_TOLERANCE:
            return NOT_HELD, (f"the server counted {got:g} prompt tokens a request where {target:g} were asked "
                              f"({off * 100:+.1f}%, held to {INPUT_TOLERANCE * 100:g}%)"), ""
    hit, ideal = seen.get("prefix_hit"), seen.get("prefix_ideal")
    if hit is not None and ideal is not None and abs(hit - ideal) > PREFIX_POINTS:
        return NOT_HELD, (f"prefix hit {hit * 100:.0f}% where the shape implies {ideal * 100:.0f}% (held to "
                          f"{PREFIX_POINTS * 100:g} points)"), ("a cache that does not serve the shape is no latency "
                                                                 "of it")
    rate, asked_rate = seen.get("arrival_rate"), seen.get("arrival_rate_asked")
    if rate is not None and asked_rate and abs(rate / asked_rate - 1) > ARRIVAL_TOLERANCE:
        return NOT_HELD, (f"{rate:.3g} requests a second sent where the drawn gaps make {asked_rate:.3g} (held to "
                          f"{ARRIVAL_TOLERANCE * 100:g}%)"), ("the in-flight cap or a busy client held them back, so "
                                                               "this was not the open loop asked")
    cv, drawn = seen.get("arrival_cv"), seen.get("arrival_cv_asked")
    if cv is not None and drawn and abs(cv / drawn - 1) > ARRIVAL_TOLERANCE:
        return NOT_HELD, (f"arrivals CV {cv:.2f} where the drawn gaps' is {drawn:.2f} (held to "
                          f"{ARRIVAL_TOLERANCE * 100:g}%)"), ("the in-flight cap or a busy client bunched the sends, "
                                                               "so this was not the open loop asked")
    thought, then = seen.get("reasoning_tokens"), (reference or {}).get("reasoning_tokens")
    if asked.get("thinking") and thought is not None and then:
        off = thought / float(then) - 1
        if abs(off) > REASONING_TOLERANCE:
            return DRIFT, (f"{thought:g} reasoning tokens a request where the reference thought {then:g} "
                           f"({off * 100:+.1f}%, held to {REASONING_TOLERANCE * 100:g}%)"), \
                "shorter or longer thinking is another workload, neither faster nor slower"
    return None
