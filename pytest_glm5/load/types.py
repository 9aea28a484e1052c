"""What a load run is and what it measured: the Workload in, the BenchResult out, and the errors a run can end
with. No HTTP client is imported here: the judge and the reports read these types without the load client.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..metrics import CDF_POINTS, RequestTiming, cdf_points, request_ms
from . import datasets
from .clientload import ClientLoad

Prompt = list[int] | str  # token ids, or a prompt set's text (sent as text, counted by the server)

# sglang: native /generate; openai: /v1/completions; chat: /v1/chat/completions (the chat template, thinking).
PROTOCOLS = ("sglang", "openai", "chat")
# How prompt token ids are drawn. `random-ids` is SGLang bench_serving's offline random dataset
# (sglang/benchmark/datasets/random.py, 0.5.23, lines 142-150): request i is a run of consecutive ids
# (offset_i + i + j) % vocab from an offset drawn uniformly, here inside [token_low, token_high). `uniform` draws
# every id on its own (this client's method before; MoE routing sees other experts, so the figures differ).
SAMPLINGS = ("random-ids", "uniform")
ARRIVALS = ("poisson", "gamma")  # open loop: bench_serving's --request-rate with --burstiness

class BenchError(Exception):
    """A measurement that cannot start or go on; the message is one line that names the cause."""


class Unreachable(BenchError):
    """Nothing answered at the URL (refused, reset or silent): unlike an error answer, the server said nothing."""

    def __init__(self, url: str, cause: str) -> None:
        self.cause = cause
        super().__init__(f"cannot reach {url}: {cause} (is the server running and the URL right?)")


@dataclass(frozen=True)
class Workload:
    """One measurement point: closed loop at `concurrency` over `num_prompts` fixed-length requests."""

    concurrency: int
    num_prompts: int
    input_len: int = 128
    output_len: int = 128
    protocol: str = "sglang"
    warmup: int = 1
    seed: int = 42
    token_low: int = 10
    token_high: int = 1000
    # bench_serving's --random-range-ratio: each request's input and output lengths uniform in [max(int(L*r), 1), L]
    # (datasets/common.py compute_random_lens). 1.0: fixed lengths, as the campaign's 128/128 figures were taken;
    # bench_serving's own default, 0.0, halves the mean length.
    range_ratio: float = 1.0
    sampling: str = "random-ids"
    flush_cache: bool = True
    request_timeout_s: float = 600.0
    stall_timeout_s: float | None = None
    # chat: thinking pinned on or off (never the server's default: a default that changes is a workload that
    # changed). input_len counts the templated prompt, as the server's usage.prompt_tokens does.
    thinking: bool | None = None
    # Shared prefixes (SGLang's generated-shared-prefix): each prompt opens with one of `prefix_groups` prefixes of
    # prefix_len tokens, new to each run (a cache-bust marker: one scenario's cache never serves the next), then
    # its own tokens. 0: no shared prefix.
    prefix_len: int = 0
    prefix_groups: int = 1
    # Open loop: requests sent at `request_rate` a second (Poisson, or gamma with shape `burstiness`: arrival CV
    # 1/sqrt(burstiness)), never more than `concurrency` in flight (a rate above capacity queues at the client
    # instead of growing a backlog without bound), each timed from its scheduled send (what a user who arrived then
    # waited: coordinated omission counted). None: closed loop.
    request_rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    duration_s: float | None = None  # open loop: no request scheduled after this many seconds is sent
    # Trace replay (load/trace.py): a Mooncake JSONL file whose first num_prompts rows are sent at their timestamps
    # (scaled to request_rate a second where given), with their lengths and shared blocks (input_len and output_len
    # are then the trace's); None: no trace.
    trace: str | None = None
    # Multi-turn sessions: num_prompts / turns conversations of `turns` requests sent one after another, each prompt
    # the conversation so far (every earlier turn's input_len new tokens and a stand-in answer of output_len tokens)
    # and input_len new ones: the context grows and the prefix cache serves the turn before. At most `concurrency`
    # sessions at once; new to each run, like a shared prefix. 1: single-turn.
    turns: int = 1
    # A prompt set of natural text (load/datasets.py: `natural`, bundled, or a JSONL path), sent as text, prompt after
    # prompt; input_len is then the set's own. What speculative decoding is judged on (random ids make every draft a
    # guess at noise). None: generated token ids.
    dataset: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.concurrency < 1:
            problems.append(f"concurrency must be >= 1, got {self.concurrency}")
        if self.num_prompts < 1:
            problems.append(f"num_prompts must be >= 1, got {self.num_prompts}")
        if self.input_len < 1 or self.output_len < 1:
            problems.append(f"input and output lengths must be >= 1, got {self.input_len}/{self.output_len}")
        if self.warmup < 0:
            problems.append(f"warmup must be >= 0, got {self.warmup}")
        if self.protocol not in PROTOCOLS:
            problems.append(f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if not 0 <= self.token_low < self.token_high:
            problems.append(f"token range [{self.token_low}, {self.token_high}) is empty")
        if not 0.0 <= self.range_ratio <= 1.0:
            problems.append(f"range_ratio must be in [0, 1] (1 = fixed lengths), got {self.range_ratio}")
        if not 0 <= self.prefix_len < self.input_len:
            problems.append(f"prefix_len must be in [0, input_len) (a prompt has tokens of its own), got "
                            f"{self.prefix_len} of {self.input_len}")
        if self.prefix_len and not 1 <= self.prefix_groups <= self.num_prompts:
            problems.append(f"prefix_groups must be in [1, num_prompts], got {self.prefix_groups}")
        if self.prefix_len and self.range_ratio < 1.0:
            problems.append("a shared prefix needs fixed lengths (range_ratio 1)")
        if self.request_rate is not None and not self.request_rate > 0:
            problems.append(f"request_rate must be > 0 requests a second (None: closed loop), got {self.request_rate}")
        if self.arrival not in ARRIVALS:
            problems.append(f"arrival must be one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if not self.burstiness > 0 or (self.arrival == "poisson" and self.burstiness != 1.0):
            problems.append(f"burstiness is a gamma arrival's shape (> 0; Poisson is 1), got {self.burstiness} with "
                            f"{self.arrival}")
        if self.duration_s is not None and (not self.duration_s > 0 or (self.request_rate is None and
                                                                        self.trace is None)):
            problems.append(f"duration_s bounds an open loop or a trace (request_rate or trace): > 0 seconds, got "
                            f"{self.duration_s}")
        if self.trace is not None and self.prefix_len:
            problems.append("a trace sets its own prefixes (its hash_ids): no prefix_len with it")
        if self.turns < 1:
            problems.append(f"turns must be >= 1 (1: single-turn), got {self.turns}")
        elif self.turns > 1 and self.num_prompts % self.turns:
            problems.append(f"num_prompts must be whole sessions of {self.turns} turns, got {self.num_prompts}")
        elif self.turns > 1 and (self.request_rate is not None or self.trace is not None or self.prefix_len
                                 or self.range_ratio < 1.0):
            problems.append("multi-turn sessions are a closed loop of fixed lengths of their own: no request_rate, "
                            "trace, prefix_len or range_ratio with turns")
        if self.protocol == "chat" and self.thinking is None:
            problems.append("a chat workload pins thinking on or off (thinking=True or False; glm5 bench --thinking "
                            "on|off): the server's default is not a workload")
        if self.protocol != "chat" and self.thinking is not None:
            problems.append(f"thinking applies to the chat protocol only, not {self.protocol!r}")
        if self.dataset is not None and not self.dataset.strip():
            problems.append("dataset names a prompt set (`natural`, or a JSONL path), got an empty name")
        if self.dataset is not None and (self.trace is not None or self.prefix_len or self.turns > 1):
            problems.append("a prompt set is its own prompts: no trace, prefix_len or turns with dataset")
        if self.sampling not in SAMPLINGS:
            problems.append(f"sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def ideal_prefix_hit(self, template: int = 0) -> float | None:
        """The share of prompt tokens a prefix cache can serve in this shape's window (the cache flushed before
        it): every prompt's prefix but the first of each group; in sessions, each turn's but the first, all of the
        turn before but the `template` tokens that close a chat prompt (the next turn goes on with the answer
        there). None: no shared prefix."""
        if self.turns > 1:
            lens = [self.turn_len(k) for k in range(self.turns)]
            return sum(max(0, n - template) for n in lens[:-1]) / sum(lens)
        if not self.prefix_len:
            return None
        return self.prefix_len * (self.num_prompts - self.prefix_groups) / (self.input_len * self.num_prompts)

    def turn_len(self, k: int) -> int:
        """The prompt of a session's turn k (from 0): k earlier turns of input and answer, and its own input."""
        return (k + 1) * self.input_len + k * self.output_len

    def label(self) -> str:
        """A short human name such as `c256 128/128 sglang`."""
        think = "" if self.thinking is None else " thinking" if self.thinking else " no-thinking"
        loop = "" if self.request_rate is None else f" open loop {self.request_rate:g} req/s {self.arrival}"
        if self.trace is not None:
            return f"c{self.concurrency} trace {self.trace} {self.protocol}{think}"
        turns = f" {self.turns} turns" if self.turns > 1 else ""
        if self.dataset is not None:
            return f"c{self.concurrency} {Path(self.dataset).stem}/{self.output_len} {self.protocol}{think}{loop}"
        return f"c{self.concurrency} {self.input_len}/{self.output_len} {self.protocol}{think}{loop}{turns}"


@dataclass
class RequestShape:
    """How requests are sent: what the server accepted in the probe (some engines refuse our preferred shape)."""

    token_ids: bool = True
    ignore_eos: bool = True
    done_marker: bool | None = None  # seen `data: [DONE]` (None: not known yet)
    template_tokens: int = 0  # chat: tokens the server's template adds to the words sent (learned by the probe)
    # chat: tokens the server's tokenizer makes of one word the client sends (learned by the probe: a byte-level BPE
    # makes ~3 of "w123"); a prompt of n tokens goes as n / this many words
    tokens_per_word: float = 1.0
    spec_details: bool = False  # chat: ask SGLang for its speculative figures (a server that decodes speculatively)

    @property
    def exact_lengths(self) -> bool:
        """Exact input and output lengths need token-id prompts and ignore_eos."""
        return self.token_ids and self.ignore_eos

    def describe(self) -> str:
        """`token-id prompts, ignore_eos` or `text prompts (approximate lengths), ...`."""
        parts = ["token-id prompts" if self.token_ids else "text prompts of about the asked length",
                 "ignore_eos" if self.ignore_eos else "no ignore_eos (output lengths as the server counts them)"]
        if self.done_marker is False:
            parts.append("no [DONE]")
        return ", ".join(parts)


# An emulator behind its own model for more of a run than this measured the host, not the model: the gate does not
# judge the run (judge/gate.py), and the load measures such a point again on a slower clock (load/clock.py).
BEHIND = 0.02


@dataclass
class BenchResult:
    """What one Workload measured: metrics by bench_serving's names, the records, and the server's identity."""

    url: str
    workload: Workload
    metrics: dict[str, float]
    records: list[RequestTiming] = field(repr=False)
    errors: list[str]
    server_info: dict[str, Any]
    max_in_flight: int
    started_at: float
    aborted: str | None = None
    in_flight_at_abort: int = 0
    stalled: bool = False
    shape: RequestShape = field(default_factory=RequestShape)
    telemetry: Any = None  # telemetry.Telemetry when NVML sampled the run
    energy: Any = None  # energy.Window when NVML counted the run's energy (warmup included, as tokens_total)
    launch: str = ""  # which server launch measured it (build:pid): the unit of launch-to-launch variance
    invalid: str | None = None  # why the launch's answers make its figures worthless (a failed canary, accuracy)
    build: str = ""
    arm: str = ""  # A/B: "A" or "B", the position in the ABBA block (an A/A run has one build in both arms)
    lag_s: float | None = None  # seconds an emulator fell behind its own model during the run (None: not known)
    wait_s: float | None = None  # seconds the server's processes waited for a CPU during the run (None: not known)
    clock: float = 1.0  # the emulator ran this many times slower than its launch's clock; figures converted back
    cotenants: list[str] = field(default_factory=list)  # other servers holding GPUs of the machine meanwhile
    client: ClientLoad | None = None  # what the load client cost itself over the measured window
    cache_note: str | None = None  # the prefix cache could not be flushed before the window: it says why
    pauses: list[str] = field(default_factory=list)  # stalls the server's log explained (JIT compiles)
    completed_total: int = 0  # requests completed in every phase (probe, warmup, window), for the server's count
    tokens_total: int = 0
    server: Any = None  # servermetrics.ServerView: SGLang's own counters over the same run
    server_note: str | None = None  # the server's count and the client's differ: why
    slo: Any = None  # judge.slo.Attainment: the window's requests against the scenario's SLO (None: it has none)

    @property
    def failed(self) -> int:
        """Requests of the measured window that did not complete."""
        return int(self.metrics.get("failed", 0))

    def distributions(self, points: int = CDF_POINTS) -> dict[str, list[float]]:
        """TTFT and ITL in ms at evenly spaced quantiles (0, 5, ... 100%): a CDF small enough for every report, at
        the resolution a reference records its own (metrics.cdf_points)."""
        return {f"{name}_ms": cdf_points(request_ms(self.records, name), points) for name in ("ttft", "itl")}

    def to_dict(self, details: bool = False) -> dict[str, Any]:
        """A JSON-ready record: workload, metrics, errors and /server_info (per-request data if asked)."""
        out: dict[str, Any] = {
            "url": self.url,
            "workload": asdict(self.workload),
            "metrics": self.metrics,
            "errors": self.errors,
            "max_in_flight": self.max_in_flight,
            "request_shape": {**asdict(self.shape), "exact_lengths": self.shape.exact_lengths,
                              "described": self.shape.describe()},
            "started_at": self.started_at,
            "aborted": self.aborted,
            "server_info": self.server_info,
            "telemetry": self.telemetry.to_dict() if self.telemetry is not None else None,
            "energy": self.energy.to_dict() if self.energy is not None else None,
            "launch": self.launch,
            "build": self.build,
            "arm": self.arm,
            "emulator_lag_s": self.lag_s,
            "server_cpu_wait_s": self.wait_s,
            "emulator_clock": self.clock,
            "cotenants": self.cotenants,
            "client": self.client.to_dict() if self.client is not None else None,
            "cache_note": self.cache_note,
            "pauses": self.pauses,
            "server_metrics": self.server.to_dict() if self.server is not None else None,
            "server_note": self.server_note,
            "distributions": self.distributions(),
        }
        if details:
            out["records"] = [asdict(r) for r in self.records]
        return out


def trace_identity(path: str | Path) -> str:
    """What a bound measured on a trace is keyed by: its file name and content, never where the checkout lives
    (`mooncake-sample.jsonl@2febf50403c7`; the name alone when the file cannot be read). A baseline keyed by the
    absolute path read "workload changed" on every other checkout, the box's included."""
    p = Path(path)
    try:
        digest = hashlib.sha256(p.read_bytes()).hexdigest()[:12]
    except OSError:
        return p.name
    return f"{p.name}@{digest}"


def dataset_identity(name: str) -> str:
    """What a bound measured on a prompt set is keyed by: its name and content (`natural.jsonl@1a2b3c4d5e6f`; the
    name alone where it cannot be read), so acceptance is compared only on the same text."""
    try:
        return datasets.load(name).identity
    except datasets.DatasetError:
        return Path(name).name
