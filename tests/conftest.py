"""Fixtures of the plugin's own tests."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import scipy.stats  # noqa: F401  (see below)

from simproc import Sim, start_sim

# The plugin imports scipy.stats only when it first judges; a pytester session run in-process drops the modules it
# imported when it ends, and numpy cannot be imported twice in one process (the next session's import raised
# "_CopyMode.IF_NEEDED is neither True nor False"). Imported here, it outlives every session.

# The suite starts hundreds of Python processes (emulators, the CLI, pytest sessions, xdist workers). Where
# PYTHONDONTWRITEBYTECODE is set (this machine's and CI's environment) each compiled the plugin from source and each
# pytest process rewrote every test module's asserts again: measured, the workers' phase took 7:10 with bytecode kept
# against 7:38-7:51 without. Kept under .cache/pycache (ignored by git), so the source tree stays as free of .pyc
# files as the setting asks; set here, before xdist starts its workers, so they and every child inherit it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(__file__).resolve().parents[1] / ".cache" / "pycache"))
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Start emulators on free ports; every one is killed at teardown, whatever the test did."""
    started: list[Sim] = []

    def start(*args: str, **kw: Any) -> Sim:
        sim = start_sim(tmp_path, *args, **kw)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def sim(sim_factory: Callable[..., Sim]) -> Sim:
    """One fast emulator (tiny profile), ready, with /metrics."""
    return sim_factory("--enable-metrics")


@pytest.fixture
def wheel() -> str:
    """The sglang 0.5.23 wheel bench_serving is read from: GLM5_SGLANG_WHEEL, else the one scripts/test.sh downloaded
    into .cache/sglang/ (so `pytest tests -m "not slow"` uses it too). CI (GLM5_REQUIRE_SGLANG_WHEEL) fails without
    it; elsewhere the test skips."""
    path = os.environ.get("GLM5_SGLANG_WHEEL", "")
    if path and Path(path).is_file():
        return path
    cached = sorted((Path(__file__).resolve().parents[1] / ".cache" / "sglang").glob("sglang-0.5.23-*.whl"))
    if not path and cached:
        return str(cached[0])
    why = (f"no sglang wheel (GLM5_SGLANG_WHEEL={path!r}); scripts/test.sh downloads it "
           "(pip download --no-deps sglang==0.5.23)")
    if os.environ.get("GLM5_REQUIRE_SGLANG_WHEEL"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI=true turns on --glm5-require-baselines; the sessions these tests start decide it for themselves. Whether
    # this run is CI is kept apart (GLM5_OUTER_CI): CI never skips the llama.cpp tests.
    if os.environ.get("CI"):
        monkeypatch.setenv("GLM5_OUTER_CI", os.environ["CI"])
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def _kill_leftover_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A pytester test that failed half-way must not leave its emulators to the next test or run."""
    path = request.getfixturevalue("pytester").path if "pytester" in request.fixturenames else None
    yield
    if path is not None:
        from plugin_helpers import model_of, servers_of

        # Emulators carry the test's model name; other engines (llama-server) a model file under its directory.
        for proc in servers_of(model_of(path)) + servers_under(path):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def servers_under(path: Path) -> list[psutil.Process]:
    """Processes other than this one and its parents whose command line names a file under path."""
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if p.pid not in mine and any(word.startswith(f"{path}/") for word in cmd):
            out.append(p)
    return out
