"""A real third-party engine end to end: llama.cpp's llama-server serving a tiny model made here."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from plugin_helpers import said_lines

from pytest_glm5.configs import ServerConfig
from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import Workload
from pytest_glm5.servers.engines import LlamaCppEngine
from pytest_glm5.servers.engines.base import EngineError
from pytest_glm5.servers.process import launch, stop


def _engine() -> LlamaCppEngine:
    engine = LlamaCppEngine()
    try:
        engine.binary()
    except EngineError as exc:
        if os.environ.get("CI") or os.environ.get("GLM5_OUTER_CI"):
            pytest.fail(f"CI must run the llama.cpp tests: {exc}")  # never skipped in CI
        pytest.skip(str(exc))
    return engine


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pytest_glm5.testing.tinymodel import write_gguf

    return write_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")


def llama_procs(model: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0].endswith("llama-server") and str(model) in cmd:
            out.append(p)
    return out


def test_tiny_model_is_deterministic(tmp_path: Path) -> None:
    from pytest_glm5.testing.tinymodel import write_gguf

    a = write_gguf(tmp_path / "a.gguf").read_bytes()
    assert a == write_gguf(tmp_path / "b.gguf").read_bytes() and len(a) < 2_000_000


@pytest.mark.slow
@pytest.mark.solo
def test_exact_counts_and_cross_check_with_llama_timings(gguf_model: Path, tmp_path: Path) -> None:
    engine = _engine()
    cfg = ServerConfig("tiny", engine="llamacpp", flags={"slots": 4, "slot-tokens": 256})
    handle = launch(cfg, engine, str(gguf_model), tmp_path, startup_timeout=60)
    try:
        r = run_workload(handle.url, Workload(concurrency=4, num_prompts=24, input_len=32, output_len=96,
                                              protocol="openai", warmup=4))
        assert r.failed == 0 and r.metrics["total_output_tokens"] == 24 * 96  # exact, by the server's usage
        assert all(rec.output_len == 96 and rec.finish_reason == "length" for rec in r.records)
        timings = [rec.server_timings for rec in r.records]
        assert all(t is not None and t["predicted_n"] == 96 and t["prompt_n"] <= 32 for t in timings)
        # Client and server agree on decode speed (same run, ratio only): client TPOT vs llama's own per token.
        server_tpot = statistics.median(t["predicted_ms"] / t["predicted_n"] for t in timings if t)
        ratio = r.metrics["median_tpot_ms"] / server_tpot
        assert 0.5 < ratio < 2.5, (r.metrics["median_tpot_ms"], server_tpot)
        assert r.server_info.get("total_slots") == 4  # llama.cpp's /props is the identity
    finally:
        stop(handle, timeout=10)
    assert llama_procs(gguf_model) == []


LLAMA_SUITE = """
import pytest

@pytest.mark.parametrize("concurrency", [1, 2, 4])
@pytest.mark.server_config("small")
def test_sweep(perf, concurrency):
    r = perf.run(f"c{concurrency}", concurrency=concurrency, num_prompts=4 * concurrency, input_len=32,
                 output_len=64, warmup=concurrency)
    assert r[0].metrics["total_output_tokens"] == 4 * concurrency * 64
    perf.check(r, f"c{concurrency}", ["output_throughput"])

@pytest.mark.server_config("big")
def test_big(perf):
    perf.check(perf.run("c8", concurrency=8, num_prompts=16, input_len=32, output_len=64), "c8")

@pytest.mark.server_config("small")
def test_small_again(sglang_server):
    assert sglang_server.server_info()["total_slots"] == 4
"""


def _suite(pytester: pytest.Pytester, model: Path) -> None:
    pytester.makefile(".toml", configs=f"""
[defaults]
engine = "llamacpp"
model = "{model}"
[config.small]
flags = {{ slots = 4, slot-tokens = 128 }}
[config.big]
flags = {{ slots = 8, slot-tokens = 128 }}
""")
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    pytester.makepyfile(test_llama=LLAMA_SUITE)
    (pytester.path / "baselines" / "ci-cpu").mkdir(parents=True)
    (pytester.path / "baselines" / "ci-cpu" / "tiny.toml").write_text(
        "# CPU engine, shared cores: wide tolerance (seen 2x run to run)\n[defaults]\ntolerance = 0.8\n")


@pytest.mark.slow
def test_llama_suite_launch_measure_baseline_update_reuse(pytester: pytest.Pytester, gguf_model: Path) -> None:
    _engine()
    model = pytester.path / "tiny.gguf"
    shutil.copy(gguf_model, model)
    _suite(pytester, model)
    args = ("--glm5-hardware", "ci-cpu", "-p", "no:randomly")
    # Recorded with its rounds: a one-launch floor of llama.cpp on 2 shared cores met a launch 99% slower beside
    # another worker (28 vs 3718 tok/s) and read it as a provisional regression.
    result = pytester.runpytest(*args, "--update-baselines", "--glm5-keep-servers")
    result.assert_outcomes(passed=5)
    said_lines(result, ["small: launched pid *", "big: launched pid *",
                                 "baselines updated (4):", "  small c1 output_throughput: new -> * (new)"])
    text = (pytester.path / "baselines" / "ci-cpu" / "tiny.toml").read_text()
    assert text.startswith("# CPU engine") and 'engine = "llamacpp 11434.0.0"' in text and 'hardware = "ci-cpu"' in text
    assert "[small.c4.output_throughput]" in text and "[big.c8.output_throughput]" in text
    assert len(llama_procs(model)) == 1  # the last config's server is kept: one live server at a time
    # One look: no rounds (a series that one launch leaves unresolved would relaunch its config), so the launches
    # counted below are the reuse decisions alone.
    result = pytester.runpytest(*args, "--glm5-keep-servers", "--glm5-max-repeats", "1")
    result.assert_outcomes(passed=5)
    # Held against the recorded floor (llama.cpp on 2 shared cores varies up to 2x run to run, so the verdict
    # may read "improved"; a regression would fail the run, which passed=5 above rules out). The kept config runs
    # first and is reused; the other one is launched after it is stopped.
    said_lines(result, ["big: reusing kept server pid * (fingerprint matches)",
                                 "big: stopped pid * to free the GPUs for small*", "small: launched pid *",
                                 "*small * c1 * output_throughput * >=*"])
    assert result.stdout.str().count("launched pid") == 1
    assert pytester.runpytest("--glm5-stop-servers").ret == 0
    deadline = time.monotonic() + 10
    while llama_procs(model) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert llama_procs(model) == []


@pytest.mark.slow
def test_llama_server_killed_mid_load(pytester: pytest.Pytester, gguf_model: Path) -> None:
    _engine()
    model = pytester.path / "tiny.gguf"
    shutil.copy(gguf_model, model)
    _suite(pytester, model)
    pytester.makepyfile(test_kill="""
import os, signal, threading, pytest

@pytest.mark.server_config("small")
def test_killed(bench, sglang_server):
    threading.Timer(1.0, os.kill, (sglang_server.pid, signal.SIGKILL)).start()
    bench(concurrency=4, num_prompts=2000, input_len=32, output_len=120, warmup=0)
""")
    t0 = time.monotonic()
    result = pytester.runpytest("test_kill.py", "--glm5-hardware", "ci-cpu")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - t0 < 30
    said_lines(result, ["*server for small died during the load run: signal SIGKILL, * s into the run at "
                                 "concurrency 4; * requests completed*", "full log: *small-*.log"])
    assert llama_procs(model) == []


def test_wrapper_is_never_launched(gguf_model: Path) -> None:
    engine = _engine()
    argv = engine.argv(ServerConfig("x", engine="llamacpp"), str(gguf_model), "127.0.0.1", 1)
    assert Path(argv[0]).name == "llama-server" and "-np" in argv and argv[argv.index("-c") + 1] == str(8 * 512)
    assert sys.executable not in argv and signal.SIGTERM  # the binary itself, which takes SIGTERM
    assert subprocess.run([argv[0], "--version"], capture_output=True, timeout=30).returncode == 0


CANARY_SUITE = """
import pytest

@pytest.mark.server_config("small")
def test_point(perf):
    perf.check(perf.run("c2", concurrency=2, num_prompts=4, input_len=16, output_len=16, warmup=0), "c2",
               ["output_throughput"])
"""


@pytest.mark.slow
def test_the_canary_holds_on_a_real_engine_and_catches_a_changed_model_file(pytester: pytest.Pytester,
                                                                             gguf_model: Path) -> None:
    # llama.cpp's greedy replies from one model file repeat launch after launch (the canary must not cry wolf on a
    # real engine); the same name over other weights answers differently and the run fails on it, whatever its speed.
    from pytest_glm5.testing.tinymodel import write_gguf

    _engine()
    model = pytester.path / "tiny.gguf"
    shutil.copy(gguf_model, model)
    _suite(pytester, model)
    pytester.makepyfile(test_llama=CANARY_SUITE)
    args = ("--glm5-hardware", "ci-cpu", "-p", "no:randomly")
    # The canary's 5 reference launches, and no more: rounds a CPU-noisy speed would ask for are not what is held.
    rec = pytester.runpytest(*args, "--update-baselines", "--glm5-launches", "5", "--glm5-max-repeats", "5")
    assert rec.ret == 0, rec.stdout.str()[-3000:]
    said_lines(rec, ["  small: answers recorded in tiny.answers.json (canary: * reference launches)"])
    # One launch a check: what is asserted is the canary, and a CPU-noisy CI box may leave the speed unresolved and
    # ask for rounds (3 launches, "held on 3 of 3").
    same = pytester.runpytest(*args, "--glm5-max-repeats", "1")
    assert same.ret == 0, same.stdout.str()[-3000:]
    said_lines(same, ["  small: canary held on 1 of 1 launches: canary: 16 of 16 prompts agree on their first * words "
                      "(rule from * reference launches)"])
    write_gguf(model, seed=1)  # other weights under the same name: the model key and the baselines still match
    other = pytester.runpytest(*args, "--glm5-max-repeats", "1")
    assert other.ret == 1
    said_lines(other, ["FAILED: faster, but wrong: 1 config answered wrong (small: canary failed: *"])
    assert llama_procs(model) == []


@pytest.mark.slow
def test_chat_prompts_hold_their_length_on_a_real_tokenizer(gguf_model: Path, tmp_path: Path) -> None:
    """The tiny model's byte-level BPE makes ~3 tokens of a client word like `w123` (543 prompt tokens where 192
    were asked, before the probe learned it): the probe now measures tokens per word and sends n / that many words,
    so the server counts the asked length, plain and with a shared prefix (a part shared is the same words)."""
    engine = _engine()
    cfg = ServerConfig("tiny", engine="llamacpp", flags={"slots": 2, "slot-tokens": 1024})
    handle = launch(cfg, engine, str(gguf_model), tmp_path, startup_timeout=60)
    try:
        for prefix in (0, 128):
            r = run_workload(handle.url, Workload(concurrency=2, num_prompts=6, input_len=192, output_len=8,
                                                  protocol="chat", thinking=False, prefix_len=prefix,
                                                  prefix_groups=2 if prefix else 1, warmup=1))
            assert r.failed == 0, r.errors
            assert abs(r.metrics["mean_input_tokens"] / 192 - 1) <= 0.02, (prefix, r.metrics["mean_input_tokens"])
    finally:
        stop(handle, timeout=10)
    assert llama_procs(gguf_model) == []


@pytest.mark.slow
def test_acceptance_read_from_a_real_engines_speculative_decoding(gguf_model: Path, tmp_path: Path) -> None:
    """llama.cpp drafts with a second model (`--spec-type draft-simple -md`) and says what it drafted and accepted
    in each reply's timings: the target as its own draft accepts every draft under greedy decoding, another model's
    draft (other random weights) far fewer, and the replies are the target's either way (lossless)."""
    from pytest_glm5.testing.tinymodel import write_gguf

    engine = _engine()
    other = write_gguf(tmp_path / "other.gguf", weights_seed=1)  # the same tokenizer, other weights
    wl = Workload(concurrency=2, num_prompts=6, input_len=16, output_len=48, protocol="openai", warmup=0)
    got = {}
    for name, draft in (("self", gguf_model), ("other", other)):
        cfg = ServerConfig(name, engine="llamacpp", flags={"slots": 2, "slot-tokens": 256, "spec-type": "draft-simple",
                                                          "model-draft": str(draft), "spec-draft-n-max": 4})
        handle = launch(cfg, engine, str(gguf_model), tmp_path, startup_timeout=60)
        try:
            got[name] = run_workload(handle.url, wl)
        finally:
            stop(handle, timeout=10)
    assert got["self"].failed == got["other"].failed == 0
    assert got["self"].metrics["spec_accept_rate"] == 1.0
    assert got["other"].metrics["spec_accept_rate"] < 0.5
    assert all(r.spec_proposed > 0 for r in got["self"].records)
    assert llama_procs(gguf_model) == []
