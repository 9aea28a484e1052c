"""scripts/gpu_gate.py, the gate's run on a real GPU: its live nightly checks (here with a stand-in launcher) and the
H200 launches it brought back (docs/gpu_gate_live.json) replayed through today's decision code."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from scriptmods import script

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "docs" / "gpu_gate_live.json"


@pytest.fixture
def gate() -> ModuleType:
    return script("gpu_gate")


def _stand_in(gate: ModuleType, monkeypatch: pytest.MonkeyPatch, uuid: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    launched: list[str] = []
    now = [0.0]  # a launch takes 40 s of this clock, however fast the machine runs the test

    def one_launch(build: str, logs: Path) -> dict[str, Any]:
        launched.append(build)
        now[0] += 40.0
        f = (1 - gate.BUILDS[build]) * rng.lognormvariate(0, 0.03)
        return {"build": build, "startup_s": 0.0, "util": {}, "c8": [60 * f, 61 * f], "launch_s": 40.0}

    monkeypatch.setattr(gate, "time", SimpleNamespace(monotonic=lambda: now[0]))

    monkeypatch.setattr(gate, "one_launch", one_launch)
    monkeypatch.setattr(gate, "make_model", lambda: 0.0)
    monkeypatch.setattr(gate, "gpu_uuid", lambda: uuid)
    return launched


def test_live_checks_own_their_launches_and_go_on_from_the_state(gate: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    launched = _stand_in(gate, monkeypatch, "GPU-a", 1)
    # 20 minutes: 7 launches of warmup and reference, then checks while one more fits (1.2 x 40 s to spare)
    assert gate.gpu(tmp_path / "1", 20, None) == 0
    doc = json.loads((tmp_path / "1" / "launches.json").read_text())
    roles = [r["role"] for r in doc["launches"]]
    assert len(roles) == 29 and len(doc["checks"]) >= 4
    assert roles[:1 + gate.N_REF] == ["warmup"] + ["reference"] * gate.N_REF
    # Every check launch belongs to exactly one check, of that check's build, and a check stops when decided.
    for check in doc["checks"]:
        mine = [r for r in doc["launches"] if r.get("check") == check["id"]]
        assert {r["build"] for r in mine} == {check["build"]}
        assert len(mine) == len(check["values"]) <= gate.LOOKS
        if check["verdict"] != "open":
            assert check["verdict"] != "unresolved" or len(mine) == gate.LOOKS
    assert [c["build"] for c in doc["checks"]][:3] == list(gate.CYCLE)
    before = len(launched)
    # The next call on the same GPU: no warmup, no new reference, the open check goes on.
    assert gate.gpu(tmp_path / "2", 5, tmp_path / "1" / "launches.json") == 0
    doc2 = json.loads((tmp_path / "2" / "launches.json").read_text())
    assert [r["role"] for r in doc2["launches"][len(doc["launches"]):]] == ["check"] * (len(launched) - before)
    # On another GPU the open check is abandoned and a reference is recorded there first.
    _stand_in(gate, monkeypatch, "GPU-b", 2)
    doc2["checks"].append({"id": len(doc2["checks"]), "build": "base", "gpu": "GPU-a", "values": [], "verdict": "open"})
    (tmp_path / "state.json").write_text(json.dumps(doc2))
    gate.gpu(tmp_path / "3", 10, tmp_path / "state.json")
    doc3 = json.loads((tmp_path / "3" / "launches.json").read_text())
    new = doc3["launches"][len(doc2["launches"]):]
    assert [r["role"] for r in new[:1 + gate.N_REF]] == ["warmup"] + ["reference"] * gate.N_REF
    assert doc3["checks"][len(doc2["checks"]) - 1]["verdict"] == "abandoned: the machine changed"


def test_a_cycle_of_the_unchanged_build_spends_every_check_on_it(gate: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    launched = _stand_in(gate, monkeypatch, "GPU-a", 3)
    assert gate.gpu(tmp_path, 12, None, ("base",)) == 0
    doc = json.loads((tmp_path / "launches.json").read_text())
    assert set(launched) == {"base"} and len(doc["checks"]) >= 1
    assert {c["build"] for c in doc["checks"]} == {"base"}
    monkeypatch.setattr(sys, "argv", ["gpu_gate.py", str(tmp_path), "--cycle", "base,fast"])
    with pytest.raises(SystemExit) as exit_:  # a misspelt build is refused before anything launches
        gate.main()
    assert exit_.value.code == 2 and len(launched) == len(doc["launches"])


def test_the_h200_launches_read_today_as_they_read_on_the_gpu(gate: ModuleType) -> None:
    doc = json.loads(LIVE.read_text())
    ref = [gate._value(r) for r in doc["launches"] if r["role"] == "reference" and "error" not in r]
    assert len(ref) == gate.N_REF
    closed = [c for c in doc["checks"] if c["verdict"] != "open"]
    assert {c["build"] for c in closed} == {"base", "slow5", "slow10"}
    for check in closed:
        again = gate.decide(ref, check["values"])
        assert again["verdict"] == check["verdict"], (check["id"], again, check["last"])
        # "pass" only where the data rule out a drop beyond the tolerance.
        if again["verdict"] == "pass":
            assert again["worst"] >= -gate.TOLERANCE
    # Unchanged code never read as a regression, a real slowdown never as a pass.
    assert all(c["verdict"] != "regression" for c in closed if c["build"] == "base")
    assert all(c["verdict"] != "pass" for c in closed if c["build"] != "base")
    text = gate.replay(LIVE, 10, 1)
    assert "live nightly checks, independent" in text
    assert text.count("pass with a bound wider than 5%: 0") == text.count("pass with a bound wider than")


def test_the_h100_unchanged_launches_replay_and_read_as_they_read_on_the_gpu(gate: ModuleType) -> None:
    # A `CYCLE=base` call launches the unchanged build only; the replay crashed on the slower builds it never ran.
    h100 = ROOT / "docs" / "gpu_gate_h100.json"
    doc = json.loads(h100.read_text())
    ref = [gate._value(r) for r in doc["launches"] if r["role"] == "reference"]
    closed = [c for c in doc["checks"] if c["verdict"] != "open"]
    assert len(ref) == gate.N_REF and {c["build"] for c in closed} == {"base"} and len(closed) >= 10
    for check in closed:
        again = gate.decide(ref, check["values"])
        assert again["verdict"] == check["verdict"] != "regression", (check["id"], again, check["last"])
    text = gate.replay(h100, 10, 1)
    assert "nightly slow" not in text and "A/B base,slow" not in text and "base: 18 checks: pass 18" in text
    assert text.count("pass with a bound wider than 5%: 0") == text.count("pass with a bound wider than")
