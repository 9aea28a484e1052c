"""Short, stable digests of what must match for two records to be compared: a workload, a reference's launches,
the prompts the canary asked. One rule, so that a digest recorded by one module is the one another computes.

    >>> digest({"b": 2, "a": 1}) == digest({"a": 1, "b": 2})
    True
    >>> len(digest([["prompt"], 32]))
    12
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(value: Any) -> str:
    """12 hex digits of the sha256 of the value's JSON with sorted keys (what is not JSON, as its str)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]
