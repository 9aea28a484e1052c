"""`--glm5-shard I/N`: which configs a shard runs. Deterministic (every shard computes the same split), by config
(a config's tests never span two shards), balanced by each config's duration in the last run where the cache
knows it (longest first onto the least loaded shard), configs never timed counting as the mean of the timed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def parse_shard(value: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N; ValueError saying so."""
    i, sep, n = value.partition("/")
    try:
        index, count = int(i), int(n)
    except ValueError:
        index, count = 0, 0
    if not sep or count < 1 or not 1 <= index <= count:
        raise ValueError("must be I/N with 1 <= I <= N, e.g. 1/4")
    return index, count


def assign(configs: Sequence[str], durations: Mapping[str, float], shards: int) -> dict[str, int]:
    """Config -> shard (1-based)."""
    known = [durations[c] for c in configs if c in durations and durations[c] > 0]
    default = sum(known) / len(known) if known else 1.0
    cost = {c: durations.get(c, default) or default for c in configs}
    load = [0.0] * shards
    out: dict[str, int] = {}
    for c in sorted(configs, key=lambda c: (-cost[c], c)):
        k = min(range(shards), key=lambda s: (load[s], s))
        out[c] = k + 1
        load[k] += cost[c]
    return out
