"""The `glm5` command: `sim` (the SGLang emulator), `bench` (one measurement outside pytest) and `compare` (two
reports judged as the A/B gate judges), `history` (trends and change points of a --glm5-history directory)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .judge.bisect import Search, bisect, most_steps
from .judge.slo import Attainment, Slo, attainment, needed, requests_of
from .load import trace
from .load.client import run_workload
from .load.types import ARRIVALS, PROTOCOLS, SAMPLINGS, BenchError, Workload
from .metrics import RequestTiming

if TYPE_CHECKING:
    from .report.outputs import Outputs
from .settings import (
    parse_alpha,
    parse_duration,
    parse_effect,
    parse_fraction,
    parse_ratio,
    parse_target,
    parse_url,
)

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
)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _url(text: str) -> str:
    try:
        return parse_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= low, else argparse's one-line error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value

    return parse


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


def _bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="closed-loop streaming measurement of a running server",
                       description="Closed-loop streaming load at each concurrency; metrics by SGLang "
                                   "bench_serving's formulas.")
    p.add_argument("--concurrency", type=_int_list, default=[1], help="comma-separated, e.g. 1,2,256")
    p.add_argument("--num-prompts", type=_int_at_least(1), default=None,
                   help="requests per concurrency (default: 4 x concurrency, at least 8)")
    _workload_args(p)
    p = sub.add_parser("capacity", help="the largest concurrency within an SLO, bisected between two ladder points",
                       description="Bisect between LOW (within the SLO) and HIGH (not) against a running server: each "
                                   "middle point measured with enough requests to show the target; the price first.")
    p.add_argument("--concurrency", type=_int_list, required=True, metavar="LOW,HIGH",
                   help="the ladder's bracket, e.g. 16,64 (the suite's capacity line names both)")
    p.add_argument("--num-prompts", type=_int_at_least(1), default=None,
                   help="requests per point (default: two waves, at least what the target needs: 59 for 95%%)")
    p.add_argument("--resolution", type=_int_at_least(1), default=None,
                   help="stop when the bracket is this wide (default: an eighth of LOW, at least 1)")
    p.add_argument("--ttft-ms", type=_positive_float, default=None, help="SLO: time to first token, ms")
    p.add_argument("--tpot-ms", type=_positive_float, default=None, help="SLO: time per output token, ms")
    p.add_argument("--e2e-ms", type=_positive_float, default=None, help="SLO: request latency, ms")
    p.add_argument("--target", type=_checked(parse_target), default=0.95,
                   help="SLO: the share of requests within it (default 0.95)")
    _workload_args(p)


def _workload_args(p: argparse.ArgumentParser) -> None:
    """What `glm5 bench` and `glm5 capacity` send: server, lengths, protocol, shape, client."""
    p.add_argument("--url", required=True, type=_url, help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--input-len", type=_int_at_least(1), default=128)
    p.add_argument("--output-len", type=_int_at_least(1), default=128)
    p.add_argument("--protocol", choices=PROTOCOLS, default="sglang",
                   help="sglang: native /generate; openai: /v1/completions; chat: /v1/chat/completions (the "
                        "chat template counts in --input-len, as the server's usage.prompt_tokens does)")
    p.add_argument("--thinking", choices=("on", "off"), default=None,
                   help="chat: the model thinks before it answers, or not (required with --protocol chat: the "
                        "server's default is not a workload)")
    p.add_argument("--warmup", type=_int_at_least(0), default=None,
                   help="warmup requests, excluded (default: concurrency)")
    p.add_argument("--request-rate", type=_positive_float, default=None,
                   help="open loop: requests a second, never more than --concurrency in flight, each timed from its "
                        "scheduled send (default: closed loop)")
    p.add_argument("--duration", type=_positive_float, default=None, metavar="S",
                   help="open loop or trace: send only what is scheduled within S seconds (--num-prompts bounds it)")
    p.add_argument("--trace", default=None, metavar="JSONL",
                   help="replay a Mooncake trace (timestamp, input_length, output_length, hash_ids): its rows at "
                        "their timestamps (at --request-rate a second where given), lengths and shared blocks; "
                        "--num-prompts rows (default: all)")
    p.add_argument("--turns", type=_int_at_least(1), default=1,
                   help="multi-turn sessions: --num-prompts / N conversations of N turns, each prompt the "
                        "conversation so far plus --input-len new tokens (default: 1, single-turn)")
    p.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                   help="open loop: poisson, or gamma with --burstiness (bench_serving's)")
    p.add_argument("--burstiness", type=_positive_float, default=1.0,
                   help="gamma arrivals' shape: their CV is 1/sqrt(it) (default 1)")
    p.add_argument("--range-ratio", type=_ratio, default=1.0,
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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _ratio(text: str) -> float:
    try:
        return parse_ratio(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None


def cmd_bench(ns: argparse.Namespace) -> int:
    """Run `glm5 bench`; one-line errors, non-zero exit on failure."""
    def measure_all() -> list[tuple[int, Measured]]:
        raise_open_files_limit(max(ns.concurrency))
        measure, by = _client(ns)
        rows = []
        for wl in _workloads(ns):
            print(f"glm5 bench: {wl.label()}, {wl.num_prompts} prompts{_replay(wl)} against {ns.url}{by} ...",
                  file=sys.stderr)
            rows.append((wl.concurrency, measure(wl)))
        return rows

    rows, code = _guarded("bench", measure_all)
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


def cmd_capacity(ns: argparse.Namespace) -> int:
    """Run `glm5 capacity`: the price, each point's attainment, then the bracket; exit 0 once it is found."""
    found, code = _guarded("capacity", lambda: _search(ns))
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
    prompts = ns.num_prompts or _whole_sessions(max(needed(slo.target), 2 * high), ns.turns)
    print(f"glm5 capacity: [{low}, {high}] to {resolution} wide within {slo.describe()}: at most {most} points of "
          f"{prompts} requests ({most * prompts * ns.output_len:,} output tokens); {low} taken as within it and "
          f"{high} as not (the ladder's bracket)", file=sys.stderr)
    raise_open_files_limit(high)
    measure, by = _client(ns)

    def point(c: int) -> Attainment:
        wl = _workload(ns, c, prompts)
        print(f"glm5 capacity: {wl.label()}, {wl.num_prompts} prompts against {ns.url}{by} ...", file=sys.stderr)
        got = attainment(slo, requests_of(measure(wl).timings))
        print(f"  c{c}: {got.line()}", file=sys.stderr)
        return got

    return bisect(low, high, resolution, point)


def _guarded(cmd: str, run: Callable[[], T]) -> tuple[T | None, int]:
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


def _client(ns: argparse.Namespace) -> tuple[Callable[[Workload], Measured], str]:
    """The chosen client as a function of a Workload, and how the progress line names it."""
    if ns.client == "glm5":
        def ours(wl: Workload) -> Measured:
            r = run_workload(ns.url, wl)
            return Measured(r.metrics, r.errors, r.to_dict(details=ns.details), r.records)

        return ours, ""
    from .load import benchserving

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
    # Four waves, at least eight requests, in whole sessions; a trace's rows where it gives none.
    return [_workload(ns, c, ns.num_prompts or rows or _whole_sessions(max(8, 4 * c), ns.turns))
            for c in ns.concurrency]


def _workload(ns: argparse.Namespace, concurrency: int, num_prompts: int) -> Workload:
    return Workload(concurrency=concurrency, num_prompts=num_prompts, input_len=ns.input_len,
                    output_len=ns.output_len, protocol=ns.protocol,
                    warmup=concurrency if ns.warmup is None else ns.warmup, seed=ns.seed, range_ratio=ns.range_ratio,
                    sampling=ns.sampling, thinking=None if ns.thinking is None else ns.thinking == "on",
                    request_rate=ns.request_rate, arrival=ns.arrival, burstiness=ns.burstiness, trace=ns.trace,
                    duration_s=ns.duration, turns=ns.turns)


def _whole_sessions(requests: int, turns: int) -> int:
    """`requests` rounded up to whole sessions of `turns` turns."""
    return -(-requests // turns) * turns


def _checked(parse: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type from a settings check: its ValueError becomes argparse's one-line error."""

    def run(text: str) -> float:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None

    return run


def _compare_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compare", help="judge HEAD against BASE from two --glm5-report files",
                       description="Per series: SAME / DIFFERENT / UNKNOWN with the change, its 95%% CI, p and CV. "
                                   "Exit 1 on a regression, 0 otherwise, 2 on bad input.")
    p.add_argument("base", type=Path, help="the reference report (--glm5-report of the base build)")
    p.add_argument("head", type=Path, help="the report to judge")
    p.add_argument("--alpha", type=_checked(parse_alpha), default=0.01, help="false-alarm rate (default 0.01)")
    p.add_argument("--effect", type=_checked(parse_effect), default=0.05,
                   help="SAME rules out a change this large (default 0.05)")
    p.add_argument("--tolerance", type=_checked(parse_fraction), default=0.02,
                   help="a smaller change never fails (default 0.02)")
    p.add_argument("--mixed", action="store_true",
                   help="compare reports of different hardware or models anyway (refused by default)")


def cmd_compare(ns: argparse.Namespace) -> int:
    """Run `glm5 compare`; its last line is the outcome (as a run's): exit 1 on a regression, 2 on bad input."""
    from .judge.compare import CompareError, compare_reports
    from .report.outcome import Facts, decide

    try:
        compared = compare_reports(ns.base, ns.head, ns.alpha, ns.effect, ns.tolerance, ns.mixed)
    except CompareError as exc:
        print(f"glm5 compare: error: {exc}", file=sys.stderr)
        return 2
    outcome = decide(Facts(verdicts=compared.verdicts, regressed=compared.regressed))
    print("\n".join([*compared.lines, outcome.line]))
    return 1 if outcome.failed else 0


def _history_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("history", help="trends and change points of a --glm5-history directory",
                       description="Per series: runs, last value, trend, change points (first bad run, its commit "
                                   "and build, the step with its 95%% CI) and the distance to a target. Exit 0, or 2 "
                                   "on bad input.")
    p.add_argument("dir", type=Path, help="the --glm5-history directory")
    p.add_argument("--config", help="only this config")
    p.add_argument("--metric", help="only this metric, e.g. output_throughput")
    p.add_argument("--scenario", help="only this scenario")


def cmd_history(ns: argparse.Namespace) -> int:
    """Run `glm5 history`; exit 2 on bad input."""
    from .report.history import HistoryError, load_dir, series_of
    from .report.trends import analyse, lines

    try:
        runs, notes = load_dir(ns.dir)
    except HistoryError as exc:
        print(f"glm5 history: error: {exc}", file=sys.stderr)
        return 2
    series = series_of(runs, ns.config, ns.metric, ns.scenario)
    for n in notes:
        print(f"glm5 history: {n}", file=sys.stderr)
    if not series:
        known = sorted({(s.config, s.metric) for s in series_of(runs)})
        asked = " ".join(f"--{k} {v}" for k, v in (("config", ns.config), ("metric", ns.metric),
                                                     ("scenario", ns.scenario)) if v is not None)
        held = (f"it holds {len(known)} (config, metric) pairs, e.g. " + ", ".join(f"{c} {m}" for c, m in known[:6])
                if known else f"it holds no readable run ({len(notes)} lines skipped, named above)")
        print(f"glm5 history: error: no series matches {asked or 'anything'} in {ns.dir}; {held}", file=sys.stderr)
        return 2
    print("\n".join(lines(analyse(series))))
    return 0


def _merge_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("merge", help="join shard reports (--glm5-report of each --glm5-shard I/N) into one run",
                       description="The shards' verdicts decided as one run (compare_to across shards, one "
                                   "Benjamini-Hochberg family), baselines updated once, every report written once. "
                                   "Exit 1 on a regression, 2 on bad input.")
    p.add_argument("reports", type=Path, nargs="+", help="the shards' --glm5-report files")
    p.add_argument("--configs", type=Path, help="the configs file (for compare_to across shards)")
    p.add_argument("--alpha", type=_checked(parse_alpha), help="false-alarm rate (default: the shards')")
    p.add_argument("--update-baselines", nargs="?", const="new", choices=("new", "all"),
                   help="record new and improved bounds once (=all: regressions too)")
    p.add_argument("--baselines", type=Path, default=Path("baselines"), help="baselines directory (default baselines)")
    p.add_argument("--report", type=Path, help="write the joined JSON report here")
    p.add_argument("--html", type=Path, help="write the joined HTML page here")
    p.add_argument("--markdown", type=Path, help="write the joined markdown summary here")
    p.add_argument("--history", type=Path, help="append the joined run to this history directory")


@dataclass
class MergeOutcome:
    """What `glm5 merge` decided and printed."""

    lines: list[str]
    failed: bool  # the outcome's: regressions, crashes or outputs not written
    errors: list[str]


def merge_reports(paths: Sequence[Path], configs_path: Path | None, alpha: float | None, update_mode: str | None,
                  baselines: Path, outputs: Outputs) -> MergeOutcome:
    """`glm5 merge`: shard reports joined (the same hardware and model, each config covered exactly once), decided
    as one run, baselines updated once, every output written once. ReportError or ConfigError says what is wrong."""
    from .configs import load_configs
    from .judge.gate import Statistics, references_of, versus_all
    from .judge.merge import MergeError, coverage, decided, join, update
    from .judge.verdicts import ReportError, read_report, run_document
    from .report import gateitems
    from .report.history import run_ids
    from .report.outcome import Facts, decide
    from .report.outputs import write_all
    from .report.terminal import campaign_lines, summary_lines, verdict_table

    docs = [read_report(p) for p in paths]
    names = [str(p) for p in paths]
    try:
        coverage(docs, names)
        view = join(docs, names)
    except MergeError as exc:
        raise ReportError(str(exc)) from None
    stats = view.statistics or {}
    a = alpha if alpha is not None else float(stats.get("alpha") or 0.01)
    if configs_path is not None:
        configs = load_configs(configs_path)
        statistics = Statistics(alpha=a, effect=float(stats.get("effect") or 0.05))
        view.versus = versus_all(view.verdicts, references_of(configs), statistics)
    view = decided(view, a)
    changes, errors = update(baselines, view.verdicts, update_mode) if update_mode else ([], [])
    first = docs[0].get("run") or {} if docs else {}
    run = {**first, "time": first.get("time") or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "merged_from": names, "run_ids": [i for d in docs for i in run_ids(d.get("run") or {})]}
    run.pop("shard", None)
    doc = run_document(view.servers, view.verdicts, changes, view.results, view.versus, view.statistics, run,
                       view.problems, view.known_issues, view.events)
    outcome = decide(Facts(verdicts=view.verdicts, regressed=gateitems.regressions(view.verdicts, view.confirmed),
                           problems=view.problems, known=frozenset(view.known_issues), errors=errors))
    doc["outcome"] = outcome.to_dict()
    written = write_all(doc, outputs)
    if written.errors:
        outcome = decide(Facts(verdicts=view.verdicts, regressed=gateitems.regressions(view.verdicts, view.confirmed),
                               problems=view.problems, known=frozenset(view.known_issues),
                               errors=[*errors, *written.errors]))
    lines = [*verdict_table(view.verdicts),
             *summary_lines(view.verdicts, changes, update_mode, view.problems, [*errors, *written.errors],
                            view.family_size, a),
             *campaign_lines(view.versus), *(f"glm5 {line}" for line in written.lines), outcome.line]
    return MergeOutcome(lines, outcome.failed, [*errors, *written.errors])


def cmd_merge(ns: argparse.Namespace) -> int:
    """Run `glm5 merge`; exit 1 on a regression or a failed write, 2 on bad input."""
    from .configs import ConfigError
    from .judge.verdicts import ReportError
    from .report.outputs import Outputs

    out = Outputs(report=ns.report, html=ns.html, markdown=ns.markdown, history=ns.history)
    try:
        run = merge_reports(ns.reports, ns.configs, ns.alpha, ns.update_baselines, ns.baselines, out)
    except (ReportError, ConfigError) as exc:
        print(f"glm5 merge: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(run.lines))
    return 1 if run.failed else 0


def build_parser() -> argparse.ArgumentParser:
    """The `glm5` command's parser (`sim` takes SGLang's own flags, parsed by the emulator)."""
    parser = argparse.ArgumentParser(prog="glm5", description="pytest-glm5 command line")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sim", help="run the SGLang 0.5.23 emulator (takes `sglang serve` flags and --sim-*)",
                   add_help=False)
    _bench_parser(sub)
    _compare_parser(sub)
    _history_parser(sub)
    _merge_parser(sub)
    _plan_parser(sub)
    return parser


def _plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="what resolving a series costs on this box, in launches and hours",
                       description="From a --glm5-report (its unresolved series), a baselines file (each reference), "
                                   "or --cv and --tolerance: the launches that resolve the tolerance (the 95%% bound "
                                   "of the change inside it, 80%% power) and their time at --load-time plus "
                                   "--measure-time a launch (else the report's loads or the file's [costs]). Exit 0, "
                                   "or 2 on bad input.")
    p.add_argument("source", type=Path, nargs="?", help="a --glm5-report JSON or a baselines TOML")
    p.add_argument("--cv", type=_checked(parse_fraction), help="launch-to-launch CV, e.g. 0.05")
    p.add_argument("--tolerance", type=_checked(parse_effect), help="the change to resolve (default: each entry's, "
                                                                      "else 0.05)")
    p.add_argument("--reference", type=int, default=5, help="reference launches (with --cv; 0: an A/B)")
    p.add_argument("--load-time", type=_checked(parse_duration), help="one load on this box, e.g. 30m")
    p.add_argument("--measure-time", type=_checked(parse_duration), default=0.0,
                   help="measuring on one launch, e.g. 15m (default 0)")


def cmd_plan(ns: argparse.Namespace) -> int:
    """Run `glm5 plan`; exit 2 on bad input."""
    from .judge.baselines import BaselineError
    from .judge.plan import from_baselines, from_report, price
    from .judge.verdicts import ReportError

    launch = ns.load_time + ns.measure_time if ns.load_time is not None else None
    try:
        if ns.source is None:
            if ns.cv is None or launch is None:
                print("glm5 plan: error: give a report or baselines file, or --cv and --load-time", file=sys.stderr)
                return 2
            lines = [price(ns.cv, ns.tolerance or 0.05, ns.reference or None, launch)]
        elif ns.source.suffix == ".toml":
            lines = from_baselines(ns.source, launch, ns.tolerance)
        else:
            lines = from_report(ns.source, launch)
    except (BaselineError, ReportError) as exc:
        print(f"glm5 plan: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `glm5` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "sim":
        from .sim.app import main as sim_main

        return sim_main(args[1:])
    ns = build_parser().parse_args(args)
    if ns.cmd == "bench":
        return cmd_bench(ns)
    if ns.cmd == "capacity":
        return cmd_capacity(ns)
    if ns.cmd == "compare":
        return cmd_compare(ns)
    if ns.cmd == "history":
        return cmd_history(ns)
    if ns.cmd == "merge":
        return cmd_merge(ns)
    if ns.cmd == "plan":
        return cmd_plan(ns)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
