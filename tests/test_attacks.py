"""Issue 38's findings, one test each, against real processes where one is involved: an open loop's gap is not a
hang, a trace that cannot be replayed is one line (not a hang or a traceback), a server's malformed chunks are
failed requests, the emulator refuses what SGLang refuses, a digit run past a float is a wrong answer, a bad
GLM5_SIM_* value says what it is, and no key a profile or a server names becomes a path outside its directory."""

from __future__ import annotations

import http.server as httpd
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pytest_glm5.cli import main as glm5
from pytest_glm5.configs import ServerConfig
from pytest_glm5.correctness.questions import grade
from pytest_glm5.judge.provenance import HardwareError, hardware_for
from pytest_glm5.load import trace
from pytest_glm5.load.client import run_workload
from pytest_glm5.load.types import BenchError, Workload
from pytest_glm5.servers.engines.sim import SimEngine
from pytest_glm5.sim.profile import ProfileError, load_profile

from simproc import Sim, http

ROW = '{{"timestamp": {ts}, "input_length": 8, "output_length": 4, "hash_ids": [1]}}'


def _trace(path: Path, stamps: list[str]) -> Path:
    path.write_text("\n".join(ROW.format(ts=t) for t in stamps) + "\n")
    return path


def test_an_open_loop_gap_longer_than_the_stall_timeout_is_not_a_hang(sim: Sim, tmp_path: Path) -> None:
    # Three requests 2.5 s apart with a 1 s stall timeout: nothing is in flight during the gaps. Today's main killed
    # the run as "stalled: no token from any of 0 requests".
    path = _trace(tmp_path / "gaps.jsonl", ["0", "2500", "5000"])
    r = run_workload(sim.url, Workload(concurrency=4, num_prompts=3, trace=str(path), warmup=0, stall_timeout_s=1.0))
    assert not r.stalled and r.metrics["completed"] == 3, r.errors


@pytest.mark.parametrize(("stamp", "said"), [
    ("Infinity", "timestamp must be a finite number of milliseconds >= 0, got inf"),
    ("NaN", "timestamp must be a finite number of milliseconds >= 0, got nan"),
])
def test_a_trace_timestamp_that_is_no_finite_number_is_refused(tmp_path: Path, stamp: str, said: str) -> None:
    path = _trace(tmp_path / "t.jsonl", ["0", stamp])
    with pytest.raises(trace.TraceError, match=f"t.jsonl:2: {said}"):
        trace.load(path)


def test_a_trace_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(ROW.format(ts=0).encode() + b"\n\xff\xfe\n")
    with pytest.raises(trace.TraceError, match=r"cannot read trace .*latin1.jsonl: not UTF-8 text: byte 0xff at "
                                               r"offset \d+ \(line 2\)"):
        trace.load(path)


def test_a_trace_in_the_wrong_unit_is_one_line_before_anything_is_sent(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # Microseconds taken for milliseconds: 3 rows a minute apart read as 16.7 hours. Nothing listens at the URL:
    # the trace is refused before the client reaches for the server.
    path = _trace(tmp_path / "micro.jsonl", ["0", "60000000", "120000000"])
    assert glm5(["bench", "--url", "http://127.0.0.1:9", "--trace", str(path), "--concurrency", "4"]) == 2
    err = capsys.readouterr().err
    assert "its 3 rows replay over 33.3 h at the trace's pace, over the 6 h a point may take: timestamps are " \
           "milliseconds" in err, err
    with pytest.raises(BenchError, match=r"replay over 33\.3 h"):
        run_workload("http://127.0.0.1:9", Workload(concurrency=4, num_prompts=3, trace=str(path)))
    # Bounded by a duration, or sped up to a rate, it replays: the estimate is said before it starts.
    assert trace.replay_s(trace.load(path), rate=1.0) == pytest.approx(2.0)


def test_glm5_bench_says_how_long_a_trace_replays(sim: Sim, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace(tmp_path / "t.jsonl", ["0", "500", "1000"])
    assert glm5(["bench", "--url", sim.url, "--trace", str(path), "--concurrency", "2", "--warmup", "0"]) == 0
    assert "3 prompts, sent over 1 s against" in capsys.readouterr().err


class _Chunks(httpd.BaseHTTPRequestHandler):
    """An OpenAI-style server whose first answer is well formed (the probe) and whose later ones are not."""

    bad: ClassVar[list[bytes]] = []
    served = 0

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        good = b'{"choices": [{"text": "a", "finish_reason": null}]}'
        chunk = good if cls.served == 0 else cls.bad[(cls.served - 1) % len(cls.bad)]
        cls.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        end = b'{"choices": [{"text": "", "finish_reason": "length"}]}'
        self.wfile.write(b"data: " + chunk + b"\n\ndata: " + end + b"\n\ndata: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def chunk_server() -> Iterator[str]:
    """A scripted OpenAI-style server on 127.0.0.1; stopped at teardown."""
    server = httpd.ThreadingHTTPServer(("127.0.0.1", 0), _Chunks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("chat", [False, True])
def test_malformed_stream_chunks_are_failed_requests_with_their_reason(chunk_server: str, chat: bool) -> None:
    _Chunks.served = 0
    _Chunks.bad = [b'{"choices": [7]}', b'{"choices": [{"text": "a"}], "usage": "many"}',
                   b'{"choices": "abc"}']
    wl = Workload(concurrency=1, num_prompts=3, input_len=4, output_len=2, warmup=0,
                  protocol="chat" if chat else "openai", thinking=False if chat else None)
    r = run_workload(chunk_server, wl)
    assert r.metrics["failed"] == 3 and r.metrics["completed"] == 0, (r.metrics, r.errors)
    assert r.errors and all(e.startswith("malformed ") for e in r.errors), r.errors


def test_the_emulator_refuses_what_sglang_refuses_and_never_freezes(sim: Sim) -> None:
    t0 = time.perf_counter()
    status, body = http("POST", sim.url + "/generate", {"text": "hello there", "sampling_params": {
        "max_new_tokens": 10**9, "ignore_eos": True}})
    assert status == 400 and b"exceeds the model's maximum context length of 8192 tokens" in body, body
    for bad in (-1, 1.5, "many", float("inf")):
        status, body = http("POST", sim.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": bad}}
                            ) if bad != float("inf") else (400, b"max_new_tokens must be")
        assert status == 400 and b"max_new_tokens must be" in body, (bad, body)
    status, body = http("POST", sim.url + "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 10**9})
    assert status == 400 and b"maximum context length" in body
    status, body = http("POST", sim.url + "/v1/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**9})
    assert status == 400 and b"maximum context length" in body
    assert time.perf_counter() - t0 < 10
    # The server still answers at once: nothing was built in one blocking step.
    status, _ = http("POST", sim.url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4}})
    assert status == 200


@pytest.mark.parametrize("reply", ["The answer is " + "9" * 400, "#### 1" + "0" * 320, "1e999"])
def test_a_number_past_a_float_is_a_wrong_answer_not_a_crash(reply: str) -> None:
    got = grade(reply)
    assert got is not None and got != "18"


def test_a_bad_sim_env_value_is_named_by_the_preflight(tmp_path: Path) -> None:
    # As a [build.slow] env = {GLM5_SIM_SLOWDOWN = "fast"} gives it; and as a config's env does.
    engine = SimEngine(profile="tiny").with_build({"GLM5_SIM_SLOWDOWN": "fast"}, None, {})
    problem = engine.preflight(ServerConfig("t"), "/m", "127.0.0.1", 1).problem
    assert problem == "sglang serve: error: env GLM5_SIM_SLOWDOWN must be a number > 0, got 'fast'", problem
    cfg = ServerConfig("t", env={"GLM5_SIM_GARBAGE": "2"})
    problem = SimEngine(profile="tiny").preflight(cfg, "/m", "127.0.0.1", 1).problem
    assert problem == "sglang serve: error: env GLM5_SIM_GARBAGE must be a fraction in [0, 1), got '2'", problem


def test_a_profile_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    bundled = (Path(load_profile.__code__.co_filename).parent / "profiles" / "tiny.toml").read_text()
    evil = tmp_path / "evil.toml"
    evil.write_text(bundled.replace('name = "tiny"', 'name = "../../../tmp/x"'))
    assert 'name = "../../../tmp/x"' in evil.read_text()
    with pytest.raises(ProfileError, match=r"name '\.\./\.\./\.\./tmp/x' is not a key"):
        load_profile(str(evil))


@pytest.mark.parametrize(("sim_info", "said"), [
    ({"profile": "../../x", "time_scale": 0.01}, "the emulator profile's name '../../x' is not a key"),
    ({"profile": "x/..", "time_scale": 0.01}, "is not a key"),
    ({"profile": "tiny", "time_scale": "fast"}, "the emulator's time scale 'fast' is not a number"),
    ({"profile": "tiny", "time_scale": -1}, "is not a number above 0"),
])
def test_a_server_naming_a_path_as_its_profile_is_refused(sim_info: dict[str, Any], said: str) -> None:
    with pytest.raises(HardwareError, match=said.replace(".", r"\.").replace("(", r"\(")):
        hardware_for({"sim": sim_info}, None, None)
