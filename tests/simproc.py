"""Start and always stop emulator processes for the tests (127.0.0.1, a free port each)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, body: Any = None, timeout: float = 10) -> tuple[int, bytes]:
    """One plain HTTP call; returns (status, body) and never raises for HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Sim:
    """A running emulator process."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def get_json(self, path: str) -> Any:
        status, body = http("GET", self.url + path)
        assert status == 200, (path, status, body[:200])
        return json.loads(body)

    def metric(self, name: str) -> float:
        _, body = http("GET", self.url + "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def start_sim(tmp: Path, *args: str, profile: str = "tiny", scale: float = 1.0, wait: bool = True,
              timeout: float = 30.0) -> Sim:
    """Launch `python -m pytest_glm5.sim` and (by default) wait until /ready answers 200."""
    port = free_port()
    log = tmp / f"sim-{port}.log"
    argv = [sys.executable, "-m", "pytest_glm5.sim", "--model-path", "/models/test-model", "--port", str(port),
            "--sim-profile", profile, "--sim-time-scale", str(scale), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    sim = Sim(f"http://127.0.0.1:{port}", port, proc, log)
    if wait:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if http("GET", sim.url + "/ready", timeout=1)[0] == 200:
                    return sim
            except OSError:
                pass
            time.sleep(0.05)
        sim.stop()
        raise TimeoutError(f"sim not ready in {timeout}s: {log.read_text()[-2000:]}")
    return sim
