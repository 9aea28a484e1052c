"""GPU leases: how many GPUs a config needs (SGLang's own rule), disjoint sets across processes, a fair queue, an
outer CUDA_VISIBLE_DEVICES respected, and under xdist two TP4 configs side by side while TP8 runs alone."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from plugin_helpers import FAKE_NVML, assert_no_server_left, report, said_lines, write_configs

from pytest_glm5.servers.leases import Device, LeaseBook, LeaseError, book_for, emulated, visible
from pytest_glm5.spec.sglang import flag_args, gpus_needed


def need(flags: dict[str, Any]) -> int:
    return gpus_needed(flag_args(flags)).count


@pytest.mark.parametrize(("flags", "count"), [
    ({}, 1),
    ({"tp-size": 8}, 8),
    ({"tensor-parallel-size": 4}, 4),
    ({"tp": 4}, 4),  # argparse's abbreviation, as `sglang serve` takes it
    ({"tp-size": 4, "pp-size": 2}, 8),
    ({"tp-size": 4, "dp-size": 2}, 8),  # two replicas of TP4
    ({"tp-size": 8, "attn-dp-size": 2}, 8),  # attention DP inside the TP group
    ({"tp-size": 4, "dp-size": 2, "enable-dp-attention": True}, 4),  # the deprecated spelling of attn-dp-size 2
    ({"tp-size": 8, "ep-size": 8}, 8),  # EP shares the TP ranks
    ({"tp-size": 16, "nnodes": 2}, 8),  # this node's share
    ({"tp-size": 2, "base-gpu-id": 2}, 4),  # GPU ids 2 and 3 must be visible
    ({"tp-size": 2, "gpu-id-step": 2}, 3),  # GPU ids 0 and 2
])
def test_gpus_a_config_needs_follow_sglang(flags: dict[str, Any], count: int) -> None:
    assert need(flags) == count


def test_the_reason_names_the_flags() -> None:
    assert gpus_needed(flag_args({"tp-size": 8, "attn-dp-size": 2})).why == \
        "tp-size 8 x pp-size 1 (attention DP 2 inside TP)"
    assert gpus_needed(flag_args({"tp-size": 4, "dp-size": 2})).why == "tp-size 4 x pp-size 1 x dp-size 2"


EIGHT = [Device(i, f"GPU-{i:02d}aa-uuid") for i in range(8)]


def test_outer_cuda_visible_devices_narrows_and_orders() -> None:
    assert visible(EIGHT, None, "8 GPUs") == EIGHT
    assert [d.index for d in visible(EIGHT, "3,1", "8 GPUs")] == [3, 1]
    assert [d.index for d in visible(EIGHT, "GPU-05, GPU-06aa-uuid", "8 GPUs")] == [5, 6]  # prefixes, as CUDA
    assert visible(EIGHT, "", "8 GPUs") == []
    with pytest.raises(LeaseError, match=r"CUDA_VISIBLE_DEVICES=0,9: '9' matches no GPU among the 8 GPUs"):
        visible(EIGHT, "0,9", "8 GPUs")
    with pytest.raises(LeaseError, match="matches 8 GPUs"):
        visible(EIGHT, "GPU-0", "8 GPUs")
    with pytest.raises(LeaseError, match="names GPU 1 twice"):
        visible(EIGHT, "1,1", "8 GPUs")
    with pytest.raises(LeaseError, match="MIG instance"):
        visible(EIGHT, "MIG-abc", "8 GPUs")


def test_a_lease_is_launched_with_pci_ordered_indices(tmp_path: Path) -> None:
    book = LeaseBook(tmp_path / "l.json", visible(EIGHT, "6,7,2,3", "8 GPUs"), "4 of 8 GPUs")
    lease = book.acquire("tp4", 4)
    assert lease.env() == {"CUDA_VISIBLE_DEVICES": "6,7,2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with pytest.raises(LeaseError, match=r"config tp8 needs 8 GPUs \(tp-size 8\) but this run has 4 of 8 GPUs; "
                                         r"nothing was launched"):
        book.check("tp8", 8, "tp-size 8")
    assert LeaseBook(tmp_path / "x.json", EIGHT, "8", exclusive=True).check("tp4", 4, "") == 8


def _hold(path: str, n: int, hold_s: float, out: Any) -> None:
    book = LeaseBook(Path(path), emulated("t", 8), "8 emulated GPUs")
    lease = book.acquire(f"p{n}", 4)
    t0 = time.time()
    time.sleep(hold_s)
    out.put((tuple(lease.indices), t0, time.time()))
    book.release(lease)


@pytest.mark.slow
def test_processes_never_share_a_gpu(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(str(tmp_path / "l.json"), i, 0.4, out)) for i in range(6)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(p.exitcode == 0 for p in procs)
    for i, (gpus_a, start_a, end_a) in enumerate(got):
        for gpus_b, start_b, end_b in got[i + 1:]:
            if start_a < end_b and start_b < end_a:  # held at the same time: on other GPUs
                assert not set(gpus_a) & set(gpus_b), got
    # Eight GPUs, four each: two at a time, so six holders overlapped in pairs rather than all queueing.
    assert any(a[1] < b[2] and b[1] < a[2] for i, a in enumerate(got) for b in got[i + 1:])
    assert json.loads((tmp_path / "l.json").read_text())["leases"] == {}


@pytest.mark.slow
def test_the_queue_is_first_come_first_served(tmp_path: Path) -> None:
    """A TP8 config waiting for a busy half is not overtaken by a TP4 that came later (no starvation)."""
    book = LeaseBook(tmp_path / "l.json", emulated("t", 8), "8 emulated GPUs")
    book.say_after = 0.0  # a line at once (a run says it after 5 s of waiting)
    first = book.acquire("tp4-a", 4)
    order: list[str] = []
    said: list[str] = []

    def take(name: str, n: int) -> None:
        lease = book.acquire(name, n, waiting=lambda cfg, waited, line: said.append(f"{cfg} {line}"))
        order.append(name)
        time.sleep(0.3)
        book.release(lease)

    big = threading.Thread(target=take, args=("tp8", 8))
    big.start()
    time.sleep(0.5)
    small = threading.Thread(target=take, args=("tp4-b", 4))  # four GPUs are free, but tp8 is first in line
    small.start()
    time.sleep(0.5)
    assert order == []
    book.release(first)
    big.join(10)
    small.join(10)
    assert order == ["tp8", "tp4-b"]
    assert said[0].startswith("tp8 waits for 8 of 8 emulated GPUs: tp4-a on GPUs 0-3 (launching in pid ")
    assert any(s.startswith("tp4-b waits for 4 of 8 emulated GPUs: behind tp8 (waits for 8)") for s in said), said


def test_a_dead_holder_frees_its_gpus(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_hold, args=(str(tmp_path / "l.json"), 0, 60, out))
    p.start()
    book = LeaseBook(tmp_path / "l.json", emulated("t", 8), "8 emulated GPUs")
    deadline = time.monotonic() + 30
    while not json.loads((tmp_path / "l.json").read_text() if (tmp_path / "l.json").exists() else "{}").get(
            "leases") and time.monotonic() < deadline:
        time.sleep(0.05)
    p.kill()
    p.join(10)
    lease = book.acquire("tp8", 8)  # the killed holder's four are free again
    assert lease.indices == list(range(8))


THREE = """
[config.tp4-a]
flags = { tp-size = 4 }

[config.tp4-b]
flags = { tp-size = 4 }

[config.tp8]
flags = { tp-size = 8 }
"""
POINTS = """
import pytest

@pytest.mark.parametrize("c", [1, 2])
def test_point(perf, glm5_config, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=8 * c, input_len=8, output_len=32, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput"])
"""


def _spans(doc: dict[str, Any]) -> dict[str, tuple[float, float, list[int]]]:
    return {n: (s["launched_at"], s["stopped_at"], s["gpus"]) for n, s in doc["servers"].items()}


def _overlap(a: tuple[float, float, list[int]], b: tuple[float, float, list[int]]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.slow
def test_two_tp4_configs_run_side_by_side_and_tp8_alone(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    model = write_configs(pytester, THREE)
    pytester.makepyfile(POINTS)
    result = pytester.runpytest("-n", "2", "--glm5-sim", "--glm5-report", "r.json", "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()
    doc = report(pytester, "r.json")
    spans = _spans(doc)
    a, b, tp8 = spans["tp4-a"], spans["tp4-b"], spans["tp8"]
    assert len(a[2]) == len(b[2]) == 4 and not set(a[2]) & set(b[2]) and sorted(tp8[2]) == list(range(8))
    # Two TP4 configs on disjoint halves overlap whenever both workers start on one: the scheduler hands each
    # worker a config at once, and TP8 is last in collection order.
    assert _overlap(a, b), spans
    assert not _overlap(tp8, a) and not _overlap(tp8, b), spans
    # Each measurement says who shared the machine with it.
    mates = {v["config"]: v["provenance"].get("cotenants", []) for v in doc["verdicts"]}
    assert mates["tp8"] == []
    assert any(m.startswith("tp4-b on GPUs ") for m in mates["tp4-a"]), mates
    said_lines(result, ["tp4-?: launched pid * on GPUs ?-? in *", "tp8: launched pid * on GPUs 0-7 *"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_exclusive_runs_every_config_alone(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    model = write_configs(pytester, THREE)
    pytester.makepyfile(POINTS)
    result = pytester.runpytest("-n", "2", "--glm5-sim", "--glm5-exclusive", "--glm5-report", "r.json",
                                "-k", "a-1 or b-1 or tp8-1")
    assert result.ret == 0, result.stdout.str()
    spans = _spans(report(pytester, "r.json"))
    names = sorted(spans)
    assert all(sorted(spans[n][2]) == list(range(8)) for n in names)
    assert not any(_overlap(spans[x], spans[y]) for i, x in enumerate(names) for y in names[i + 1:]), spans
    assert_no_server_left(model)


@pytest.mark.slow
def test_a_config_that_needs_more_gpus_than_exist_fails_at_once(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_configs(pytester, THREE + "\n[config.tp16]\nflags = { tp-size = 16 }\n")
    pytester.makepyfile(POINTS)
    monkeypatch.setenv("GLM5_SIM_VISIBLE_DEVICES", "4,5,6,7")
    result = pytester.runpytest("--glm5-sim", "-k", "tp16 or tp8 or tp4-a", "--glm5-report", "r.json")
    result.assert_outcomes(passed=2, errors=4)
    said_lines(result, [
        "*config tp16 needs 16 GPUs (tp-size 16 x pp-size 1) but this run has 4 of 8 emulated GPUs (profile tiny) "
        "(GLM5_SIM_VISIBLE_DEVICES=4,5,6,7); nothing was launched. Run it where 16 GPUs are visible, or set `gpus = N` "
        "in [[]config.tp16] if its flags do not say how many it uses*",
        "*config tp8 needs 8 GPUs*4 of 8 emulated GPUs*"])
    doc = report(pytester, "r.json")
    assert doc["servers"]["tp4-a"]["gpus"] == [4, 5, 6, 7]
    assert doc["servers"]["tp8"]["how"] == "failed" and doc["servers"]["tp8"]["pid"] is None
    # A bad entry in the variable is the user's to fix, before anything runs.
    monkeypatch.setenv("GLM5_SIM_VISIBLE_DEVICES", "0,8")
    bad = pytester.runpytest("--glm5-sim")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["*glm5: GLM5_SIM_VISIBLE_DEVICES=0,8: '8' matches no GPU among the 8 emulated GPUs "
                              "(profile tiny) (indices 0-7); fix the entry or unset the variable*"])
    assert_no_server_left(model)


@pytest.mark.slow
def test_the_hosts_cuda_visible_devices_does_not_narrow_the_emulated_machine(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # A CI box without GPUs often exports CUDA_VISIBLE_DEVICES="" (no GPU): it names real GPUs, and a rehearsal on
    # the emulator must run as on any machine (at c979bd9 it leased from zero GPUs and stopped).
    model = write_configs(pytester, THREE)
    pytester.makepyfile(POINTS)
    for value in ("", "0"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        result = pytester.runpytest("--glm5-sim", "-k", "tp8-1", "--glm5-report", "r.json")
        result.assert_outcomes(passed=1)
        assert report(pytester, "r.json")["servers"]["tp8"]["gpus"] == list(range(8))
    assert_no_server_left(model)


@pytest.mark.slow
def test_gpus_in_a_config_overrides_the_flags(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, '[config.two]\ngpus = 2\nflags = { tp-size = 1 }\n')
    pytester.makepyfile(POINTS)
    result = pytester.runpytest("--glm5-sim", "--glm5-report", "r.json",
                                "test_gpus_in_a_config_overrides_the_flags.py::test_point[two-1]")
    result.assert_outcomes(passed=1)
    assert report(pytester, "r.json")["servers"]["two"]["gpus"] == [0, 1]
    bad = write_configs(pytester, '[config.two]\ngpus = 0\n')
    result = pytester.runpytest("--glm5-sim")
    said_lines(result, ["*[[]config.two]: gpus must be a whole number of GPUs >= 1, got 0*"])
    assert_no_server_left(model)
    assert_no_server_left(bad)


@pytest.mark.slow
def test_kept_servers_stay_on_their_gpus_until_a_launch_needs_them(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, THREE)
    pytester.makepyfile(POINTS)
    try:
        one_point = ["-k", "tp4-a-1 or tp4-b-1"]
        first = pytester.runpytest("--glm5-sim", "--glm5-keep-servers", *one_point, "--glm5-report", "r1.json")
        assert first.ret == 0, first.stdout.str()
        said_lines(first, ["tp4-a: kept idle on GPUs 0-3: pid * (stopped when a launch needs its GPUs)",
                                    "tp4-b: kept running: pid * on GPUs 4-7"])
        assert len(__import__("plugin_helpers").servers_of(model)) == 2
        again = pytester.runpytest("--glm5-sim", "--glm5-keep-servers", *one_point, "--glm5-report", "r2.json")
        assert again.ret == 0, again.stdout.str()
        servers = report(pytester, "r2.json")["servers"]
        assert {servers[n]["how"] for n in ("tp4-a", "tp4-b")} == {"reused"}
        assert sorted(servers["tp4-a"]["gpus"] + servers["tp4-b"]["gpus"]) == list(range(8))
        # TP8 needs all eight: both idle kept servers are stopped for it.
        big = pytester.runpytest("--glm5-sim", "-k", "tp8-1")
        assert big.ret == 0, big.stdout.str()
        said_lines(big, ["tp4-?: stopped kept server pid * to free GPUs ?-? for the next launch"])
        assert big.stdout.str().count("stopped kept server") == 2
    finally:
        pytester.runpytest("--glm5-stop-servers")
    assert_no_server_left(model)


HALVES_LOADED = """
import pytest

def test_load(bench, glm5_config):
    if glm5_config == "tp8":
        bench(concurrency=1, num_prompts=2, input_len=8, output_len=8, warmup=0)
        return
    open(f"loading-{glm5_config}", "w").close()
    bench(concurrency=4, num_prompts=4000, input_len=8, output_len=64, warmup=0)
"""


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.slow
def test_sigkill_of_the_xdist_controller_leaves_no_orphan(pytester: pytest.Pytester, keep: bool) -> None:
    """Both workers mid-load when the controller dies: every server left is stopped or recorded, and the next run
    gets all eight GPUs back."""
    pytest.importorskip("xdist")
    from plugin_helpers import servers_of

    from pytest_glm5.servers.records import KEPT, LAUNCHED, RecordStore

    model = write_configs(pytester, THREE)
    pytester.makepyfile(HALVES_LOADED)
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--glm5-sim", "-k", "tp4", "-p", "no:randomly"]
    proc = subprocess.Popen(cmd + (["--glm5-keep-servers"] if keep else []), cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not all((pytester.path / f"loading-tp4-{x}").exists() for x in "ab") and time.monotonic() < deadline:
        time.sleep(0.05)
    if time.monotonic() >= deadline:
        proc.kill()
        raise AssertionError(proc.communicate()[0].decode()[-3000:])
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    store_dir = pytester.path / ".pytest_cache" / "d" / "glm5"

    def unaccounted() -> list[int]:
        """Servers alive that nothing stops (without keep) or that no record names (with keep)."""
        alive = {p.pid for p in servers_of(model)}
        if not keep:
            return sorted(alive)
        store = RecordStore(store_dir).read()
        return sorted(alive - {int(pid) for section in (KEPT, LAUNCHED) for pid in store[section]})

    deadline = time.monotonic() + 15  # the workers see their controller gone
    while unaccounted() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert unaccounted() == []
    # The next run gets all eight GPUs: whatever the killed run left is stopped for it.
    after = pytester.runpytest("--glm5-sim", "-k", "tp8", "--glm5-report", "r.json")
    assert after.ret == 0, after.stdout.str()
    assert report(pytester, "r.json")["servers"]["tp8"]["gpus"] == list(range(8))
    pytester.runpytest("--glm5-stop-servers")
    assert_no_server_left(model, wait=10.0)


@pytest.mark.slow
def test_a_process_already_on_the_leased_gpus_is_named(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Real GPUs (a fake NVML here): someone's job already on a leased GPU is said, and every verdict names it."""
    squatter = subprocess.Popen(["sleep", "120"])
    try:
        rtx = [("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))] * 8
        busy = f"BUSY = {{1: ({squatter.pid}, 12 * 2**30)}}\n"  # someone's job on GPU 1
        pytester.makepyfile(fake_nvml_leases=FAKE_NVML.format(gpus=rtx) + busy)
        pytester.syspathinsert()
        monkeypatch.setenv("GLM5_NVML_MODULE", "fake_nvml_leases")
        monkeypatch.setenv("GLM5_LEASE_DIR", str(tmp_path / "leases"))
        model = write_configs(pytester, "[config.tp2]\nflags = { tp-size = 2 }\n")
        pytester.makepyfile(POINTS)
        result = pytester.runpytest("--glm5-report", "r.json", "-k", "tp2-1")
        assert result.ret == 0, result.stdout.str()
        line = f"pid {squatter.pid} (sleep) on GPU 1, 12 GB, outside pytest-glm5's leases"
        said_lines(result, [f"tp2: its GPUs are not free: {line}; its numbers may be skewed*",
                                     "tp2: launched pid * on GPUs 0,1 in *",
                                     "measured while other servers or processes used this machine's GPUs (1 config;*",
                                     f"  tp2 beside pid {squatter.pid} (sleep) on GPU 1"])
        doc = report(pytester, "r.json")
        assert doc["servers"]["tp2"]["outside"] == [line]
        assert doc["verdicts"][0]["provenance"]["cotenants"] == [line]
        assert json.loads((tmp_path / "leases" / "gpu-leases.json").read_text())["leases"] == {}
        assert_no_server_left(model)
    finally:
        squatter.kill()
        squatter.wait()


def test_a_group_shared_lease_dir_stays_writable_by_the_group(tmp_path: Path) -> None:
    # At c979bd9 the lock file was 0644 and the book 0600: the second user of a group-writable lease dir got
    # PermissionError. Both now take the umask (002 where a group shares the directory).
    import stat as st

    old = os.umask(0o002)
    try:
        book = book_for([Device(i, f"GPU-{i}") for i in range(2)], "2 GPUs", None, tmp_path, exclusive=False)
        assert book is not None
        lease = book.acquire("a", 1, lambda *a: None, lambda holder: None)
        book.release(lease)
    finally:
        os.umask(old)
    for name in ("gpu-leases.json", "gpu-leases.json.lock"):
        mode = st.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode & 0o060 == 0o060, (name, oct(mode))


@pytest.mark.slow
def test_each_config_leases_from_its_own_emulated_machine(pytester: pytest.Pytester) -> None:
    # At c979bd9 the run's lease book took the first config's profile for every config: a 4-GPU profile listed
    # first made an 8-GPU config of another profile fail with "needs 8 GPUs but this run has 4".
    tiny = (Path(__file__).resolve().parents[1] / "pytest_glm5" / "sim" / "profiles" / "tiny.toml").read_text()
    four = pytester.path / "four.toml"
    four.write_text(tiny.replace('name = "tiny"', 'name = "four"').replace("count = 8", "count = 4"))
    model = write_configs(pytester, f'[config.a]\nsim_profile = "{four}"\nflags = {{ tp-size = 4 }}\n'
                                    '[config.b]\nflags = { tp-size = 8 }\n')
    pytester.makepyfile(POINTS)
    result = pytester.runpytest("--glm5-sim", "-k", "1", "--glm5-report", "r.json")
    result.assert_outcomes(passed=2)
    servers = report(pytester, "r.json")["servers"]
    assert servers["a"]["gpus"] == [0, 1, 2, 3] and servers["b"]["gpus"] == list(range(8))
    assert (pytester.path / ".pytest_cache" / "d" / "glm5" / "gpu-leases-four.json").exists()
    assert_no_server_left(model)
