"""The tails of a scenario's latency distributions: each percentile verdict held to the requests it needs (a p99 of
8 requests is their maximum, a figure of the count), carrying the count and the order-statistics CI it came from,
and each TTFT and ITL verdict the distribution it was taken from (recorded with the baselines, drawn on the page).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..load.types import BenchResult
from ..metrics import cdf_points, latency_family, percentile, quantile_of, request_ms, requests_needed
from .stats import order_ci
from .verdicts import NOT_JUDGED, Kind, Verdict


def judge_tails(verdicts: Sequence[Verdict], results: Sequence[BenchResult]) -> None:
    """A percentile judged from fewer requests per launch than it needs is not judged (it would be a figure of the
    count: a p99 of 8 requests is their maximum); every other one (judged or not) carries the count it came from and
    its order-statistics CI in its spread. Every TTFT and ITL verdict carries the distribution it was taken from
    (recorded with the baselines, drawn on the page)."""
    pooled: dict[str, list[float]] = {}  # each family's values over every launch, gathered and sorted once

    def values(family: str) -> list[float]:
        if family not in pooled:
            pooled[family] = sorted(x for r in results for x in request_ms(r.records, family))
        return pooled[family]

    for v in verdicts:
        family = v.metric.split("_")[1] if "_" in v.metric else ""
        if latency_family(v.metric):
            v.cdf = cdf_points(values(family))
        q = quantile_of(v.metric)
        if q is None or v.verdict == Kind.TOO_FEW:
            continue
        # What the percentile is taken over: a request each for TTFT and latency, every gap between tokens for ITL.
        itl = family == "itl"
        per_launch: dict[str, int] = {}
        for r in results:
            n = sum(len(x.itl) if itl else 1 for x in r.records if x.success)
            per_launch[r.launch or "0"] = per_launch.get(r.launch or "0", 0) + n
        fewest = min(per_launch.values(), default=0)
        need = requests_needed(q)
        if fewest < need and v.verdict not in NOT_JUDGED:
            lower = next((f"p{p}" for p in (95, 90) if p / 100 < q and requests_needed(p / 100) <= fewest),
                         "median" if fewest >= 2 else None)
            head = v.metric.split("_", 1)[0]
            hint = f" or judge {v.metric.replace(head, lower, 1)}" if lower else ""
            v.verdict = Kind.TOO_FEW
            what = "inter-token gaps" if itl else "requests"
            v.note = (f"{v.metric} from {fewest} {what} per launch: a {head} needs {need} (one expected above it), "
                      f"else it is a figure of the count; not judged: raise num_prompts to {need}{hint}")
            continue
        pool = values(family)
        if not pool:
            continue  # a percentile of a family without per-request values here (TPOT): no count to claim
        ci = order_ci(pool, q)
        # The count always; the CI where the count allows one (a p99 of 128 has no upper rank to bound it with),
        # beside the figure it brackets: the percentile of every launch's values pooled, which is not the measured
        # value (a geometric mean of each launch's own percentile) and may lie outside that value's reach.
        v.spread = {**v.spread, ("gaps" if itl else "requests"): len(pool),
                    **({"pooled": round(percentile(pool, q * 100), 4),
                        "order_ci95": [round(ci[0], 4), round(ci[1], 4)]} if ci is not None else {})}
