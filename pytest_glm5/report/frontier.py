"""The serving frontier, as InferenceX and vLLM's sweep draw it: each measured point of each config as output tok/s
per GPU (what the box earns) against tok/s per user (1000 / mean TPOT: what one user feels), and the points no other
point beats on both. Speculative and plain configs on one chart: drafts buy a user speed a full batch pays for.

    >>> run = {"config": "tp8", "scenario": "c1", "runs": [{"workload": {"concurrency": 1}, "server_info":
    ...        {"tp_size": 8}, "metrics": {"output_throughput": 80.0, "mean_tpot_ms": 100.0}}]}
    >>> wide = {"config": "tp8", "scenario": "c64", "runs": [{"workload": {"concurrency": 64}, "server_info":
    ...         {"tp_size": 8}, "metrics": {"output_throughput": 1600.0, "mean_tpot_ms": 400.0}}]}
    >>> pts = points([run, wide])
    >>> [(p.config, p.workload, p.concurrency, p.per_gpu, p.per_user) for p in pts]
    [('tp8', '?/? sglang', 1, 10.0, 10.0), ('tp8', '?/? sglang', 64, 200.0, 2.5)]
    >>> [p.concurrency for p in frontier(pts)]
    [64, 1]
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..spec.sglang import gpus_needed


@dataclass(frozen=True)
class Point:
    """One config's point: the medians over its launches."""

    config: str
    scenario: str
    workload: str  # points are compared only within one workload (`128/128 sglang`, `natural/128 sglang`)
    concurrency: int
    per_gpu: float  # output tok/s per GPU
    per_user: float  # tok/s one stream sees (1000 / mean TPOT)
    speculative: bool

    def to_dict(self) -> dict[str, Any]:
        """For the page."""
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _gpus(info: Mapping[str, Any]) -> int:
    sim = info.get("sim")
    if isinstance(sim, Mapping) and isinstance(sim.get("gpus"), int):
        return max(1, int(sim["gpus"]))
    try:
        return max(1, gpus_needed(dict(info)).count)
    except (TypeError, ValueError):
        return 1


def points(results: Sequence[Mapping[str, Any]]) -> list[Point]:
    """Every closed-loop point of the run (a scenario of one concurrency with a TPOT), config by config, by
    concurrency; the median over its launches."""
    out: list[Point] = []
    for r in results:
        runs = [x for x in r.get("runs") or [] if (x.get("metrics") or {}).get("mean_tpot_ms")]
        if not runs:
            continue
        wl = runs[-1].get("workload") or {}
        if wl.get("request_rate") or wl.get("trace") or not isinstance(wl.get("concurrency"), int):
            continue  # an open loop's point is its rate's, not its concurrency's
        info = runs[-1].get("server_info") or {}
        gpus = _gpus(info)
        tput = statistics.median(float(x["metrics"].get("output_throughput", 0.0)) for x in runs)
        tpot = statistics.median(float(x["metrics"]["mean_tpot_ms"]) for x in runs)
        out.append(Point(str(r["config"]), str(r["scenario"]), _workload(wl), int(wl["concurrency"]), tput / gpus,
                         1000.0 / tpot, bool(info.get("speculative_algorithm"))))
    order = {c: i for i, c in enumerate(dict.fromkeys(str(r["config"]) for r in results))}  # the run's own order
    return sorted(out, key=lambda p: (p.workload, order[p.config], p.concurrency, p.scenario))


def _workload(wl: Mapping[str, Any]) -> str:
    """What a point's requests were, without its concurrency: `128/128 sglang`, `natural/128 chat no-thinking`."""
    prompts = str(wl["dataset"]).rsplit("/", 1)[-1].removesuffix(".jsonl") if wl.get("dataset") else \
        wl.get("input_len", "?")
    extra = [f"{wl['prefix_len']}-token prefix" if wl.get("prefix_len") else "",
             f"{wl['turns']} turns" if (wl.get("turns") or 1) > 1 else "",
             "" if wl.get("thinking") is None else "thinking" if wl["thinking"] else "no-thinking"]
    return " ".join([f"{prompts}/{wl.get('output_len', '?')} {wl.get('protocol', 'sglang')}", *filter(None, extra)])


def frontier(pts: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both axes, from the most per GPU to the most per user."""
    best: list[Point] = []
    for p in sorted(pts, key=lambda p: (-p.per_gpu, -p.per_user)):
        if not best or p.per_user > best[-1].per_user:
            best.append(p)
    return best


def page(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the page draws: a chart a workload that two configs or more measured, its points and its frontier; the
    workload with the most points first."""
    out = []
    pts = points(results)
    for workload in dict.fromkeys(p.workload for p in pts):
        mine = [p for p in pts if p.workload == workload]
        if len({p.config for p in mine}) >= 2:
            out.append({"workload": workload, "points": [p.to_dict() for p in mine],
                        "frontier": [p.to_dict() for p in frontier(mine)]})
    return sorted(out, key=lambda c: -len(c["points"]))
