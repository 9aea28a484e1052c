"""Minutes the real nightly run may take on this box: each config's time from the last runs (the plugin keeps it per
config, server start included, in .pytest_cache), or a GLM-5 launch plus its measuring where a config has none yet;
a margin on top. The nightly workflow sets its real run's timeout from it, so a night that outgrows its box fails
on time with its reports written, not at the job's limit with nothing.

    python scripts/night_plan.py                 # minutes, for the workflow
    python scripts/night_plan.py --explain       # per config, and where each figure came from
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / ".pytest_cache" / "v" / "glm5" / "config-durations"
# A GLM-5-NVFP4 launch costs 10-50 minutes on the box; the suite's points take about 15 minutes more per config.
LOAD_MINUTES = float(os.environ.get("GLM5_LOAD_MINUTES", "30"))
MEASURE_MINUTES = float(os.environ.get("GLM5_MEASURE_MINUTES", "15"))
MARGIN = 1.25
SETUP_MINUTES = 10.0  # the venv, the rehearsal on the emulator, the reports


def plan(configs_path: Path, durations_path: Path) -> tuple[int, list[str]]:
    """Minutes for the night and a line per config saying where its figure came from."""
    configs = tomllib.loads(configs_path.read_text(encoding="utf-8")).get("config", {})
    known: dict[str, float] = {}
    if durations_path.exists():
        known = {k: float(v) for k, v in json.loads(durations_path.read_text()).items()}
    lines, total = [], 0.0
    for name in configs:
        if name in known:
            minutes = known[name] / 60
            lines.append(f"{name}: {minutes:.0f} min (the last run's time)")
        else:
            minutes = LOAD_MINUTES + MEASURE_MINUTES
            lines.append(f"{name}: {minutes:.0f} min (no run yet: a {LOAD_MINUTES:g} min launch + "
                         f"{MEASURE_MINUTES:g} min of measuring)")
        total += minutes
    return math.ceil(total * MARGIN + SETUP_MINUTES), lines


def main() -> int:
    """Print the minutes (or the explanation with --explain)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=Path, default=ROOT / "suites" / "configs.toml")
    ap.add_argument("--durations", type=Path, default=DURATIONS)
    ap.add_argument("--explain", action="store_true")
    ns = ap.parse_args()
    minutes, lines = plan(ns.configs, ns.durations)
    if ns.explain:
        print("\n".join(lines))
        print(f"night: {minutes} min ({minutes / 60:.1f} h), with a {MARGIN:g}x margin and {SETUP_MINUTES:g} min of "
              "set-up")
    else:
        print(minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
