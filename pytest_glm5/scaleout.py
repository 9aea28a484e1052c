"""How a run spreads: over xdist workers (a config's tests are one work unit, so each config launches once) and
over machines (`--glm5-shard I/N`: a deterministic split by config, the same on every machine).

pytest-xdist's own `--dist loadgroup` renames node ids on the workers (`item._nodeid`), which pytest 9.2 no longer
reads, so its groups are silently ignored there; the controller's scheduler groups by `scope_of` instead. A test
parametrised over `glm5_config` carries the config's name in its id (`test_sweep[tp8-decode4-c256]`); a test
with its own `server_config` marker and no parameters groups by module, as its module holds one config.

A shard split is by config (a config's tests never span two shards), balanced by each config's cost (longest first
onto the least loaded shard); the costs must be the same on every machine, or two machines split differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


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


def config_of(nodeid: str, configs: Iterable[str]) -> str | None:
    """The longest config name that is a whole `-`-separated part run of the id's parameters, or None."""
    _, bracket, params = nodeid.partition("[")
    if not bracket:
        return None
    params = params.removesuffix("]")
    padded = f"-{params}-"
    found = [name for name in configs if f"-{name}-" in padded]
    return max(found, key=len) if found else None


def scope_of(nodeid: str, configs: Iterable[str]) -> str:
    """The work unit of a test: its config's, else the test itself (spread like --dist load)."""
    name = config_of(nodeid, configs)
    return f"glm5-config:{name}" if name is not None else nodeid


def shard_of(configs: Sequence[str | None], count: int) -> tuple[dict[str, int], list[str]]:
    """`--glm5-shard I/N`: each config's shard (1..N) and every config, from the configs of the collected tests (one
    entry per test; None for a test without a config). Balanced by each config's cost, its launch plus its tests,
    which every machine collects alike, so the split is the same on every shard's machine."""
    tests: dict[str, int] = {}
    for config in configs:
        if config is not None:
            tests[config] = tests.get(config, 0) + 1
    # A launch costs about as much as a few scenarios: a config's cost is its launch plus its tests.
    return assign(sorted(tests), {n: 2.0 + k for n, k in tests.items()}, count), sorted(tests)
