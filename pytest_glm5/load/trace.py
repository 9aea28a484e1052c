"""Trace replay: Mooncake's JSONL request traces (FAST'25 release), read and checked before a request is sent.

A row is `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`: when the request arrived,
its lengths, and the hash of each 512-token block of its prompt, so that two rows with the same leading hash ids share
that prefix. Replayed, each hash id becomes one block of tokens (the same id, the same tokens: a shared block is a
shared prefix the server's cache can serve), the prompt is its blocks cut to `input_length`, and the rows' timestamps
are the open loop's schedule. What the trace implies a prefix cache serves (a block seen before, counted only while
every block before it was seen too) is the ideal the run's hit is held to.

    >>> rows = parse(['{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}',
    ...               '{"timestamp": 250, "input_length": 700, "output_length": 8, "hash_ids": [1, 3]}'])
    >>> [len(p) for p in prompts(rows, 10, 1000)], gaps(rows), round(ideal_hit(rows), 3)
    ([600, 700], [0.0, 0.25], 0.394)
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..textfiles import read_utf8

BLOCK = 512  # Mooncake's hash_ids block size, in tokens
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace that cannot be replayed: the message names the file, the line and the field."""


@dataclass(frozen=True)
class Row:
    """One request of a trace."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _row(text: str, where: str) -> Row:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(d, dict):
        raise TraceError(f"{where}: a row is a JSON object with {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in d]
    if missing:
        raise TraceError(f"{where}: no {', '.join(missing)} (a Mooncake row has {', '.join(FIELDS)})")
    ts, n, m, ids = d["timestamp"], d["input_length"], d["output_length"], d["hash_ids"]
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise TraceError(f"{where}: timestamp must be a finite number of milliseconds >= 0, got {ts!r}")
    for name, value in (("input_length", n), ("output_length", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TraceError(f"{where}: {name} must be a whole number >= 1, got {value!r}")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
    if len(ids) * BLOCK < n:
        raise TraceError(f"{where}: {len(ids)} hash ids cover {len(ids) * BLOCK} tokens, fewer than input_length {n}")
    return Row(float(ts), n, m, tuple(ids))


def parse(lines: Iterable[str], name: str = "trace") -> list[Row]:
    """The rows of a trace's lines (blank lines skipped), checked; timestamps must not go back."""
    rows: list[Row] = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            row = _row(line, f"{name}:{i}")
            if rows and row.timestamp_ms < rows[-1].timestamp_ms:
                raise TraceError(f"{name}:{i}: timestamp {row.timestamp_ms:g} is before the row above's "
                                 f"({rows[-1].timestamp_ms:g}): a trace is in arrival order")
            rows.append(row)
    if not rows:
        raise TraceError(f"{name}: no rows")
    return rows


def load(path: str | Path) -> list[Row]:
    """A trace file's rows, or TraceError naming what is wrong and where."""
    p = Path(path)
    try:
        text = read_utf8(p)
    except OSError as exc:
        raise TraceError(f"cannot read trace {p}: {exc.strerror or exc}") from None
    except UnicodeError as exc:
        raise TraceError(f"cannot read trace {exc}") from None
    return parse(text.splitlines(), str(p))


def prompts(rows: Sequence[Row], low: int, high: int) -> list[list[int]]:
    """Each row's prompt: its hash ids' blocks (one id, one block of tokens in [low, high)), cut to its length."""
    blocks: dict[int, list[int]] = {}

    def block(h: int) -> list[int]:
        if h not in blocks:
            rng = random.Random(f"mooncake-block:{h}")
            blocks[h] = [rng.randrange(low, high) for _ in range(BLOCK)]
        return blocks[h]

    return [[t for h in r.hash_ids for t in block(h)][:r.input_length] for r in rows]


def gaps(rows: Sequence[Row], rate: float | None = None) -> list[float]:
    """Seconds from each row's arrival to the next's, the first 0: the open loop's schedule; with `rate`, scaled so
    the rows arrive at that mean rate a second, their pattern kept (AIPerf's fixed-schedule speed-up)."""
    out = [0.0] + [(b.timestamp_ms - a.timestamp_ms) / 1000.0 for a, b in itertools.pairwise(rows)]
    span = sum(out)
    if rate is None or span <= 0 or len(out) < 2:
        return out
    factor = (len(out) - 1) / span / rate
    return [g * factor for g in out]


MAX_REPLAY_S = 6 * 3600.0  # a night is 8 h: one point's replay longer than this is a trace in the wrong unit


def replay_s(rows: Sequence[Row], rate: float | None = None, duration_s: float | None = None) -> float:
    """How long the open loop's sends take (from the first to the last), at the trace's pace or `rate`, bounded by
    `duration_s`: TraceError when it is over MAX_REPLAY_S (a trace in microseconds reads 1000 times longer).

        >>> rows = parse(['{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
        ...               '{"timestamp": 9e9, "input_length": 1, "output_length": 1, "hash_ids": [1]}'])
        >>> replay_s(rows, duration_s=60.0)
        60.0
        >>> replay_s(rows)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        pytest_glm5.load.trace.TraceError: its 2 rows replay over 2500.0 h at the trace's pace, over the 6 h a ...
    """
    span = sum(gaps(rows, rate))
    if duration_s is not None:
        span = min(span, duration_s)
    if span > MAX_REPLAY_S:
        pace = f"at {rate:g} requests a second" if rate is not None else "at the trace's pace"
        raise TraceError(f"its {len(rows)} rows replay over {span / 3600:.1f} h {pace}, over the "
                         f"{MAX_REPLAY_S / 3600:g} h a point may take: timestamps are milliseconds (a trace in "
                         "microseconds or nanoseconds reads 1000 times longer); give a request rate, or a duration "
                         "to bound it")
    return span


def native_rate(rows: Sequence[Row]) -> float | None:
    """The rows' own mean arrival rate a second (None for fewer than two rows or no time between them)."""
    span = (rows[-1].timestamp_ms - rows[0].timestamp_ms) / 1000.0 if len(rows) > 1 else 0.0
    return (len(rows) - 1) / span if span > 0 else None


def ideal_hit(rows: Sequence[Row]) -> float:
    """The share of prompt tokens a cache (empty at the start, large enough) serves: each block's tokens that an
    earlier row sent under the same leading ids (a row's last block is cut to its length: a later row that sends
    the whole block finds only the part sent before), up to the first that none did."""
    sent: dict[tuple[int, ...], int] = {}  # a prefix of ids -> how many tokens of its last block were sent
    hit = total = 0
    for r in rows:
        total += r.input_length
        run = True
        for k in range(len(r.hash_ids)):
            prefix = r.hash_ids[:k + 1]
            here = min(BLOCK, r.input_length - k * BLOCK)
            if here <= 0:
                break
            before = sent.get(prefix, 0) if run else 0
            hit += min(before, here)
            run = run and before >= here
            sent[prefix] = max(sent.get(prefix, 0), here)
    return hit / total if total else 0.0
