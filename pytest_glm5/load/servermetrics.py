"""The server's own view of a measurement: SGLang's `/metrics` (every config starts with `--enable-metrics`) read
before and after the load, beside the client's numbers. A server that generated more tokens than this client
received was serving someone else too; one that generated fewer lost count (or this client double-counted)."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any

from .. import proxies

COUNTERS = ("sglang:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total",
            "sglang:cached_tokens_total")
GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:cache_hit_rate", "sglang:gen_throughput",
          "sglang:token_usage")
MISMATCH = 0.02  # more than this apart, the server's count and the client's are not the same requests


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> metric name -> value, summed over label sets (per-DP-rank series add up)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        with contextlib.suppress(ValueError):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def snapshot(url: str, timeout: float = 5.0) -> dict[str, float] | None:
    """The server's /metrics now (None: it has none, e.g. not started with --enable-metrics)."""
    try:
        with proxies.opener(url).open(url.rstrip("/") + "/metrics", timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return parse(resp.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def accept_length(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """Speculative decoding's accept length over a window by the server's own counters (its generated tokens over
    its verify calls), where it counted verify calls in it.

        >>> accept_length({"sglang:generation_tokens_total": 100, "sglang:spec_verify_calls_total": 40},
        ...               {"sglang:generation_tokens_total": 400, "sglang:spec_verify_calls_total": 140})
        {'spec_accept_length_counters': 3.0}
    """
    if before is None or after is None:
        return {}
    verifies = after.get("sglang:spec_verify_calls_total", 0.0) - before.get("sglang:spec_verify_calls_total", 0.0)
    tokens = after.get("sglang:generation_tokens_total", 0.0) - before.get("sglang:generation_tokens_total", 0.0)
    return {"spec_accept_length_counters": tokens / verifies} if verifies > 0 else {}


@dataclass(frozen=True)
class ServerView:
    """What the server counted over one measurement (probe and warmup included, as the client's totals are)."""

    generated_tokens: float
    prompt_tokens: float
    requests: float
    cached_tokens: float
    gauges: dict[str, float]  # at the end: running and queued requests, cache hit rate, gen throughput, KV use

    def mismatch(self, client_requests: int, client_tokens: int) -> str | None:
        """Why the server's count and the client's differ (None: they agree within 2%)."""
        if self.requests <= 0 and self.generated_tokens <= 0:
            return None  # a server that counts nothing (no metrics of this kind) says nothing
        for what, server, client in (("requests", self.requests, client_requests),
                                     ("generated tokens", self.generated_tokens, client_tokens)):
            if client and abs(server - client) > MISMATCH * client:
                more = server > client
                return (f"the server counted {server:.0f} {what}, this client {client}: "
                        + ("another client was using the server during the measurement" if more else
                           "the client received fewer than the server generated (lost or cut streams)")
                        + " (SGLang's /metrics)")
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return asdict(self)


def view(before: dict[str, float] | None, after: dict[str, float] | None) -> ServerView | None:
    """The counters' change between two snapshots, and the gauges at the end."""
    if before is None or after is None:
        return None

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    return ServerView(delta(COUNTERS[0]), delta(COUNTERS[1]), delta(COUNTERS[2]), delta(COUNTERS[3]),
                      {name.split(":", 1)[1]: after[name] for name in GAUGES if name in after})
