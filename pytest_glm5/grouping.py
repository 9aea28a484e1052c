"""Which server config a test id belongs to, for scheduling a config's tests on one xdist worker.

pytest-xdist's own `--dist loadgroup` renames node ids on the workers (`item._nodeid`), which pytest 9.2 no longer
reads, so its groups are silently ignored there; the controller's scheduler groups by this instead. A test
parametrised over `glm5_config` carries the config's name in its id (`test_sweep[tp8-decode4-c256]`); a test
with its own `server_config` marker and no parameters groups by module, as its module holds one config.
"""

from __future__ import annotations

from collections.abc import Iterable


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
