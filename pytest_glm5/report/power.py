"""What the GPUs' energy cost, a scenario a line, for every output (the terminal's summary, the markdown, the page):
the campaign's diagnosis ("GPUs drew 330 W of 600 W (55%) at concurrency 1024") beside tokens per joule, joules per
request, the share of the window at the power cap and the idle power before the load.

    >>> run = {"metrics": {"output_tokens_per_joule": 0.92, "joules_per_request": 8.1, "concurrency": 1024},
    ...        "energy": {"source": "energy counter", "power_line": "GPUs drew 330 W of 600 W (55%)",
    ...                   "power": {"cap_share": 0.12, "idle_w": 80.0}, "not_comparable": None}}
    >>> line(run)
    '0.92 output tok/J, 8.1 J a request (energy counter); GPUs drew 330 W of 600 W (55%) at concurrency 1024; at the \
power cap 12% of the window; idle 80 W a GPU before the load'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def line(run: Mapping[str, Any]) -> str:
    """One run's energy (a run document's `runs[]` entry with `energy`), as one line."""
    e, m = run["energy"], run.get("metrics") or {}
    tpj, jpr = m.get("output_tokens_per_joule"), m.get("joules_per_request")
    head = ", ".join([*([f"{tpj:.3g} output tok/J"] if tpj else []), *([f"{jpr:.3g} J a request"] if jpr else [])])
    parts = [f"{head or format(e['total_j'], '.0f') + ' J'} ({e['source']})"]
    if e.get("power_line"):
        at = f" at concurrency {m['concurrency']:.0f}" if m.get("concurrency") else ""
        parts.append(e["power_line"] + at)
    power = e.get("power") or {}
    if power.get("cap_share") is not None:
        parts.append(f"at the power cap {power['cap_share'] * 100:.0f}% of the window")
    if power.get("idle_w") is not None:
        parts.append(f"idle {power['idle_w']:.0f} W a GPU before the load")
    if e.get("not_comparable"):
        parts.append(e["not_comparable"])
    return "; ".join(parts)


def lines(results: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(config, scenario, line) of each scenario whose runs counted energy (its last such run)."""
    out = []
    for entry in results:
        run = next((r for r in reversed(entry.get("runs") or []) if r.get("energy")), None)
        if run is not None:
            out.append((str(entry["config"]), str(entry["scenario"]), line(run)))
    return out
