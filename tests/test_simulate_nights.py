"""scripts/simulate_nights.py: the real suite over nights through the plugin's plan, schedule and decision code. A
short run here proves the script runs from a checkout and that its measures mean what the table says; the table's
own figures (100 histories of 30 nights a cell) are in docs/night.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_short_simulation_fits_the_budget_covers_every_config_and_confirms_a_clear_drop(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, "scripts/simulate_nights.py", "--cv", "0.02", "--histories", "2",
                        "--nights", "6", "--drop-night", "3", "--drop", "0.2", "--jobs", "1", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    [row] = json.loads(out.read_text())
    # The budget admits nothing it cannot pay; the schedule judges each config (known crashes aside) every 2 nights.
    assert row["nights_over_budget"] == 0 and row["longest_gap"] <= 2, row
    # A 20% drop at CV 2% (4 times the tolerance): one suspect launch, its confirmation the same or the next night.
    assert row["confirmed"] == 2 and row["confirmed_within_share"] == 1.0, row
    assert row["false_regressions_per_100_nights"] == 0.0 and 6 <= row["launches_per_night"] <= 13, row
    assert p.stdout.startswith("| launch CV | nights over budget |") and "| 2% | 0 |" in p.stdout, p.stdout
