#!/usr/bin/env python3
"""The judge's verdicts over seeded simulated nights, as one digest: run it on two checkouts to show that a
refactor of the judge changed no verdict (issue 41: "the rehearsal's verdicts on one seed are the same before and
after"). Each history is scripts/simulate_nights.py's (the plugin's own plan, schedule, gate, decision and history
lines, every launch drawn from a seeded generator), at CV 5%, with and without a heavy tail; the digest covers every
series' verdict of every night.

    git worktree add /tmp/before REV
    python scripts/verdict_digest.py /tmp/before    # the digest of REV's judge
    python scripts/verdict_digest.py .              # this checkout's: the same digest, or a verdict changed

It prints the digest, the verdicts counted by kind, and with --json PATH writes every verdict (to diff).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from pathlib import Path


def verdicts(root: Path, seeds: range, nights: int) -> dict[str, list[dict[str, str]]]:
    """Every night's verdicts of each seeded history, judged by the checkout at `root`."""
    sys.path[:0] = [str(root / "scripts"), str(root)]  # that checkout's plugin, not the installed one
    import simulate_nights as sn

    costs, configs = sn.suite()
    series = sn.series_of([c.config for c in costs])
    out: dict[str, list[dict[str, str]]] = {}
    for seed in seeds:
        for variant in (sn.Variant(), sn.Variant(heavy=0.05)):
            h = sn.history(seed, 0.05, 0.10, costs, configs, series, nights, min(10, nights), 8 * 3600, 0.01, 0.05,
                           variant=variant)
            out[f"{seed}/heavy {variant.heavy:g}"] = [{" | ".join(k): v for k, v in sorted(n.verdicts.items())}
                                                      for n in h.nights]
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the digest of a checkout's verdicts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path("."), help="the checkout whose judge decides")
    ap.add_argument("--seeds", type=int, default=3, help="histories a variant (default 3)")
    ap.add_argument("--nights", type=int, default=14, help="nights a history (default 14; the drop comes on 10)")
    ap.add_argument("--json", type=Path, help="also write every verdict here")
    ns = ap.parse_args(argv)
    got = verdicts(ns.root.resolve(), range(1, ns.seeds + 1), ns.nights)
    text = json.dumps(got, sort_keys=True)
    if ns.json:
        ns.json.write_text(text + "\n", encoding="utf-8")
    kinds = collections.Counter(v for h in got.values() for night in h for v in night.values())
    total = sum(kinds.values())
    print(f"{hashlib.sha256(text.encode()).hexdigest()[:16]}  {total} verdicts over {len(got)} histories: "
          + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
