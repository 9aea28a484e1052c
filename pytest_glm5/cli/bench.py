"""`glm5 bench`: one closed- or open-loop measurement of a running server outside pytest, by our client or SGLang's
bench_serving on the same requests. What it sends (`workload_args`) and how it measures (`client`) are shared with
`glm5 capacity`."""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..load import datasets, trace
from ..load.client import run_workload
from ..load.types import ARRIVALS, PROTOCOLS, SAMPLINGS, BenchError, Workload
from ..metrics import RequestTiming
from .args import int_at_least, int_list, positive_float, ratio, url

T = TypeVar("T")

TABLE_COLUMNS = (
    ("conc", "concurrency", "{:.0f}"),
    ("done", "completed", "{:.0f}"),
    ("fail", "failed", "{:.0f}"),
    ("out tok/s", "output_throughput", "{:.2f}"),
    ("total tok/s", "total_throughput", "{:.2f}"),
    ("req/s", "request_throughput", "{:.3f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:.1f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:.2f}"),
    ("ITL p99 ms", "p99_itl_ms", "{:.2f}"),
    ("E2E p50 ms", "median_e2e_latency_ms", "{:.1f}"),
)
# Shown where a row has them (chat runs): the answer's first token after the thinking, and the thinking's length.
CHAT_COLUMNS = (
    ("TTFO p50 ms", "median_ttfo_ms", "{:.1f}"),
    ("think tok", "mean_reasoning_tokens", "{:.1f}"),
    ("in tok", "mean_input_tokens", "{:.1f}"),
    # Speculative decoding: tokens a verify pass yields (SGLang's spec_accept_length) and drafts accepted.
    ("accept len", "spec_accept_length", "{:.2f}"),
    ("accept rate", "spec_accept_rate", "{:.3f}"),
)


# Sockets beside the streams: stdio, the event loop, DNS, the server_info and flush calls.
FD_MARGIN = 64


def raise_open_files_limit(concurrency: int) -> None:
    """Make room for one socket per stream, as bench_serving does (it raises the soft limit to the hard one);
    ValueError when even the hard limit is too low, with the fix."""
    need = concurrency + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise ValueError(f"concurrency {concurrency} needs about {need} open files, but the limit is {hard} "
                             f"(hard); raise it (ulimit -n {need}, or nofile in /etc/security/limits.conf) or "
                             "lower the concurrency")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else need, hard))


def format_table(results: list[tuple[int, dict[str, float]]]) -> str:
    """(concurrency limit, metrics) rows as an aligned text table, one row per concurrency."""
    columns = TABLE_COLUMNS + tuple(c for c in CHAT_COLUMNS if any(c[1] in m for _, m in results))
    head = ["limit"] + [c[0] for c in columns]
    rows = [[str(limit)] + [fmt.format(float(metrics.get(key) or 0.0)) for _, key, fmt in columns]
            for limit, metrics in results]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `bench` subcommand's options."""
    p = sub.add_parser("bench", help="closed-loop streaming measurement of a running server",
                       description="Closed-loop streaming load at each concurrency; metrics by SGLang "
                                   "bench_serving's formulas.")
    p.add_argument("--concurrency", type=int_list, default=[1], help="comma-separated, e.g. 1,2,256")
    p.add_argument("--num-prompts", type=int_at_least(1), default=None,
                   help="requests per concurrency (default: 4 x concurrency, at least 8)")
    workload_args(p)


def workload_args(p: argparse.ArgumentParser) -> None:
    """What `glm5 bench` and `glm5 capacity` send: server, lengths, protocol, shape, client."""
    p.add_argument("--url", required=True, type=url, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--input-len", type=int_at_least(1), default=128)
    p.add_argument("--output-len", type=int_at_least(1), default=128)
    p.add_argument("--protocol", choices=PROTOCOLS, default="sglang",
                   help="sglang: native /generate; openai: /v1/completions; chat: /v1/chat/completions (the "
                        "chat template counts in --input-len, as the server's usage.prompt_tokens does)")
    p.add_argument("--thinking", choices=("on", "off"), default=None,
                   help="chat: the model thinks before it answers, or not (required with --protocol chat: the "
                        "server's default is not a workload)")
    p.add_argument("--warmup", type=int_at_least(0), default=None,
                   help="warmup requests, excluded (default: concurrency)")
    p.add_argument("--request-rate", type=positive_float, default=None,
                   help="open loop: requests a second, never more than --concurrency in flight, each timed from its "
                        "scheduled send (default: closed loop)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="open loop or trace: send only what is scheduled within S seconds (--num-prompts bounds it)")
    p.add_argument("--trace", default=None, metavar="JSONL",
                   help="replay a Mooncake trace (timestamp, input_length, output_length, hash_ids): its rows at "
                        "their timestamps (at --request-rate a second where given), lengths and shared blocks; "
                        "--num-prompts rows (default: all)")
    p.add_argument("--dataset", default=None, metavar="NAME|JSONL",
                   help="prompts of natural text sent as text (what speculative decoding is judged on): the bundled "
                        "`natural` set, or a JSONL file in ShareGPT, MT-Bench or {\"prompt\": ...} shape; "
                        "--input-len is then the set's own")
    p.add_argument("--turns", type=int_at_least(1), default=1,
                   help="multi-turn sessions: --num-prompts / N conversations of N turns, each prompt the "
                        "conversation so far plus --input-len new tokens (default: 1, single-turn)")
    p.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                   help="open loop: poisson, or gamma with --burstiness (bench_serving's)")
    p.add_argument("--burstiness", type=positive_float, default=1.0,
                   help="gamma arrivals' shape: their CV is 1/sqrt(it) (default 1)")
    p.add_argument("--range-ratio", type=ratio, default=1.0,
                   help="bench_serving's --random-range-ratio: lengths uniform in [L*r, L] (default 1: fixed)")
    p.add_argument("--sampling", choices=SAMPLINGS, default="random-ids",
                   help="prompt ids: random-ids (bench_serving's offline random dataset, the default) or uniform")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", type=Path, default=None, help="write one record per concurrency (JSON list)")
    p.add_argument("--details", action="store_true", help="include per-request records in --json")
    p.add_argument("--client", choices=("glm5", "bench_serving"), default="glm5",
                   help="bench_serving: SGLang's own client, with the same requests, as a cross-check (needs sglang "
                        "installed, or its wheel via --sglang-wheel)")
    p.add_argument("--sglang-wheel", type=Path, default=None,
                   help="where sglang is not installed: the wheel bench_serving is read from "
                        "(pip download --no-deps sglang==0.5.23; or GLM5_SGLANG_WHEEL)")


def run(ns: argparse.Namespace) -> int:
    """Run `glm5 bench`; one-line errors, non-zero exit on failure."""
    def measure_all() -> list[tuple[int, Measured]]:
        raise_open_files_limit(max(ns.concurrency))
        measure, by = client(ns)
        rows = []
        for wl in _workloads(ns):
            print(f"glm5 bench: {wl.label()}, {wl.num_prompts} prompts{_replay(wl)} against {ns.url}{by} ...",
                  file=sys.stderr)
            rows.append((wl.concurrency, measure(wl)))
        return rows

    rows, code = guarded("bench", measure_all)
    if rows is None:
        return code
    print(format_table([(limit, m.metrics) for limit, m in rows]))
    for limit, m in rows:
        for err in m.errors:
            print(f"c{limit}: {err}", file=sys.stderr)
    if ns.json:
        try:
            ns.json.write_text(json.dumps([m.record for _, m in rows], indent=2))
        except OSError as exc:
            print(f"glm5 bench: error: cannot write {ns.json}: {exc.strerror}", file=sys.stderr)
            return 2
    return 1 if any(m.metrics.get("failed") for _, m in rows) else 0


def guarded(cmd: str, run: Callable[[], T]) -> tuple[T | None, int]:
    """(what `run` returned, 0), or (None, the exit status) after one line: 2 for bad input or a measurement that
    cannot go on, 130 for Ctrl-C."""
    try:
        return run(), 0
    except (BenchError, ValueError) as exc:
        print(f"glm5 {cmd}: error: {exc}", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt:
        print(f"glm5 {cmd}: interrupted", file=sys.stderr)
        return None, 130


@dataclass(frozen=True)
class Measured:
    """One concurrency's figures, its requests' distinct errors and its --json record, whichever client ran it."""

    metrics: dict[str, float]
    errors: list[str]
    record: dict[str, Any]
    timings: list[RequestTiming] = field(default_factory=list)  # each request's, where the client keeps them


def client(ns: argparse.Namespace) -> tuple[Callable[[Workload], Measured], str]:
    """The chosen client as a function of a Workload, and how the progress line names it."""
    if ns.client == "glm5":
        def ours(wl: Workload) -> Measured:
            r = run_workload(ns.url, wl)
            return Measured(r.metrics, r.errors, r.to_dict(details=ns.details), r.records)

        return ours, ""
    from ..load import benchserving

    source = benchserving.load(ns.sglang_wheel)

    def theirs(wl: Workload) -> Measured:
        result = benchserving.run(ns.url, wl, source)
        record = benchserving.record(result, wl, source, ns.details)
        return Measured(record["metrics"], record["errors"], record)

    return theirs, f" by {source.described}"


def _replay(wl: Workload) -> str:
    """`, sent over 41 s` for a trace (TraceError, a ValueError, for one that would replay for hours)."""
    if wl.trace is None:
        return ""
    span = trace.replay_s(trace.load(wl.trace)[:wl.num_prompts], wl.request_rate, wl.duration_s)
    return f", sent over {span:.0f} s"


def _workloads(ns: argparse.Namespace) -> list[Workload]:
    rows = len(trace.load(ns.trace)) if ns.trace and not ns.num_prompts else 0
    if ns.dataset is not None:
        datasets.load(ns.dataset)  # a prompt set that cannot be used says so before any server is asked
    # Four waves, at least eight requests, in whole sessions; a trace's rows where it gives none.
    return [workload(ns, c, ns.num_prompts or rows or whole_sessions(max(8, 4 * c), ns.turns))
            for c in ns.concurrency]


def workload(ns: argparse.Namespace, concurrency: int, num_prompts: int) -> Workload:
    return Workload(concurrency=concurrency, num_prompts=num_prompts, input_len=ns.input_len,
                    output_len=ns.output_len, protocol=ns.protocol,
                    warmup=concurrency if ns.warmup is None else ns.warmup, seed=ns.seed, range_ratio=ns.range_ratio,
                    sampling=ns.sampling, thinking=None if ns.thinking is None else ns.thinking == "on",
                    request_rate=ns.request_rate, arrival=ns.arrival, burstiness=ns.burstiness, trace=ns.trace,
                    duration_s=ns.duration, turns=ns.turns, dataset=ns.dataset)


def whole_sessions(requests: int, turns: int) -> int:
    """`requests` rounded up to whole sessions of `turns` turns."""
    return -(-requests // turns) * turns
