"""Write the 200-request trace sample the rehearsal replays (pytest_glm5/load/traces/mooncake-sample.jsonl).

Synthetic, in Mooncake's format (FAST'25 release: timestamp ms, input_length, output_length, hash_ids of 512-token
blocks), not Mooncake's data (no network here): agentic-coding sessions whose every turn resends the session's
growing context (its blocks' hash ids again, then new ones) up to 15 blocks, a shared system prompt of 4 blocks
across sessions, and Poisson arrivals at 2 requests a second. Seeded: the same file every time.

    python scripts/make_trace_sample.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

MAX_BLOCKS = 15  # 7,680 tokens: within the tiny emulator profile's 8,192-token context
OUT = Path(__file__).resolve().parents[1] / "pytest_glm5" / "load" / "traces" / "mooncake-sample.jsonl"


def main() -> None:
    """Write the sample."""
    rng = random.Random(2025)
    system = [0, 1, 2, 3]  # a system prompt every session opens with
    next_id = 4
    sessions: list[list[int]] = []
    rows = []
    t = 0.0
    for _ in range(200):
        t += rng.expovariate(2.0) * 1000.0
        if not sessions or rng.random() < 0.25:
            sessions.append(list(system))
        context = rng.choice(sessions)
        new = rng.randint(1, 3)  # the turn's own blocks: a tool result, an edit, a question
        if len(context) + new > MAX_BLOCKS:  # the session ends where its context would pass the window
            sessions.remove(context)
            context = list(system)
            sessions.append(context)
        context.extend(range(next_id, next_id + new))
        next_id += new
        length = len(context) * 512 - rng.randint(0, 400)
        rows.append({"timestamp": round(t), "input_length": length, "output_length": rng.randint(32, 256),
                     "hash_ids": list(context)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
