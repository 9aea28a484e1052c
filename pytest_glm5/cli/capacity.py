"""`glm5 capacity`: the largest concurrency within an SLO, bisected between two ladder points against a running
server, its price said first; `glm5 bench`'s workload and client."""

from __future__ import annotations

import argparse
import sys

from ..judge.capacity import Search, bisect, most_steps
from ..judge.slo import Attainment, Slo, attainment, needed, requests_of
from ..settings import parse_target
from .args import checked, int_at_least, int_list, positive_float
from .bench import client, guarded, raise_open_files_limit, whole_sessions, workload, workload_args


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `capacity` subcommand's options."""
    p = sub.add_parser("capacity", help="the largest concurrency within an SLO, bisected between two ladder points",
                       description="Bisect between LOW (within the SLO) and HIGH (not) against a running server: each "
                                   "middle point measured with enough requests to show the target; the price first.")
    p.add_argument("--concurrency", type=int_list, required=True, metavar="LOW,HIGH",
                   help="the ladder's bracket, e.g. 16,64 (the suite's capacity line names both)")
    p.add_argument("--num-prompts", type=int_at_least(1), default=None,
                   help="requests per point (default: two waves, at least what the target needs: 59 for 95%%)")
    p.add_argument("--resolution", type=int_at_least(1), default=None,
                   help="stop when the bracket is this wide (default: an eighth of LOW, at least 1)")
    p.add_argument("--ttft-ms", type=positive_float, default=None, help="SLO: time to first token, ms")
    p.add_argument("--tpot-ms", type=positive_float, default=None, help="SLO: time per output token, ms")
    p.add_argument("--e2e-ms", type=positive_float, default=None, help="SLO: request latency, ms")
    p.add_argument("--target", type=checked(parse_target), default=0.95,
                   help="SLO: the share of requests within it (default 0.95)")
    workload_args(p)


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 capacity`: the price, each point's attainment, then the bracket; exit 0 once it is found."""
    found, code = guarded("capacity", lambda: _search(ns))
    if found is None:
        return code
    print(found.line())
    return 1 if found.stopped else 0


def _search(ns: argparse.Namespace) -> Search:
    """glm5 capacity's bisection, its price said first; ValueError for a bracket or an SLO it cannot search."""
    if len(ns.concurrency) != 2:
        raise ValueError(f"--concurrency takes the bracket LOW,HIGH, got {len(ns.concurrency)} values")
    if ns.client != "glm5":
        raise ValueError("capacity judges each request against the SLO: --client glm5 keeps them")
    slo = Slo(ns.ttft_ms, ns.tpot_ms, ns.e2e_ms, ns.target)
    low, high = ns.concurrency
    if low >= high:
        raise ValueError(f"--concurrency LOW,HIGH: the lower first (LOW within the SLO), got {low},{high}")
    resolution = ns.resolution or max(1, low // 8)
    most = most_steps(low, high, resolution)
    prompts = ns.num_prompts or whole_sessions(max(needed(slo.target), 2 * high), ns.turns)
    print(f"glm5 capacity: [{low}, {high}] to {resolution} wide within {slo.describe()}: at most {most} points of "
          f"{prompts} requests ({most * prompts * ns.output_len:,} output tokens); {low} taken as within it and "
          f"{high} as not (the ladder's bracket)", file=sys.stderr)
    raise_open_files_limit(high)
    measure, by = client(ns)

    def point(c: int) -> Attainment:
        wl = workload(ns, c, prompts)
        print(f"glm5 capacity: {wl.label()}, {wl.num_prompts} prompts against {ns.url}{by} ...", file=sys.stderr)
        got = attainment(slo, requests_of(measure(wl).timings))
        print(f"  c{c}: {got.line()}", file=sys.stderr)
        return got

    return bisect(low, high, resolution, point)
