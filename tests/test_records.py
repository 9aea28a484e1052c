"""Server records: kept and launched servers, two writers, kill -9 while a model loads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from plugin_helpers import assert_no_server_left, said_lines, servers_of, write_configs

from pytest_glm5.servers.records import KEPT, RecordStore


def test_records_of_two_writers_merge(tmp_path: Path) -> None:
    stores = [RecordStore(tmp_path), RecordStore(tmp_path)]

    def write(k: int) -> None:
        for i in range(40):
            stores[k].put(KEPT, {"pid": 10_000 + 100 * k + i, "config": f"c{k}"})

    threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(RecordStore(tmp_path).read()[KEPT]) == 80


@pytest.mark.slow
def test_keep_servers_keeps_only_the_last_configs_server(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n[config.b]\nflags = { tp-size = 2 }\n")
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("a")
def test_a(sglang_server): pass
@pytest.mark.server_config("b")
def test_b(sglang_server): pass
""")
    result = pytester.runpytest("--glm5-keep-servers")
    result.assert_outcomes(passed=2)
    said_lines(result, ["a: stopped pid * to free the GPUs for b (one live server at a time; the run's last "
                                 "server is the one kept)", "b: kept running: pid *"])
    live = servers_of(model)
    assert len(live) == 1 and "2" in live[0].cmdline()[live[0].cmdline().index("--tp-size") + 1]
    # The next run starts with a: b's kept server is stopped first, so two never run at once.
    result = pytester.runpytest("--glm5-keep-servers", "-k", "test_a")
    said_lines(result, ["b: stopped kept server pid * to free the GPUs for a (one live server at a time)"])
    assert len(servers_of(model)) == 1
    pytester.runpytest("--glm5-stop-servers")
    assert_no_server_left(model)


@pytest.mark.slow
def test_keep_mode_sigkill_during_model_load_leaves_no_unrecorded_server(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.slow]\nflags = { sim-startup-s = 600 }\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('slow')\ndef test_x(sglang_server): pass\n")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--glm5-keep-servers", "--glm5-sim-time-scale", "1"],
                            cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not servers_of(model) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert servers_of(model), "the server never started"
    time.sleep(0.5)
    proc.kill()
    proc.wait(30)
    assert servers_of(model)  # keep mode: the server outlives its pytest, loading still
    result = pytester.runpytest("--glm5-stop-servers")
    said_lines(result, ["glm5: reaped a server left by an earlier run: slow pid * port *"])
    assert_no_server_left(model)
