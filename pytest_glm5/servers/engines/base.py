"""The engine interface the server pool and the load generator rely on."""

from __future__ import annotations

import copy
import re
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ...configs import ServerConfig
from ...spec import sglang as spec


class EngineError(Exception):
    """An engine that cannot be used as configured; the message names the cause and the fix."""


@dataclass(frozen=True)
class Preflight:
    """What a preflight found: the engine's own rejection, or why no check could run (both None: it passed)."""

    problem: str | None = None
    skipped: str | None = None


def python_says(python: str, code: str, unavailable: str, timeout: float = 120.0) -> str:
    """The last line `code` prints in the given Python, or EngineError(unavailable) if it fails there."""
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"cannot run {python}: {exc}") from None
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise EngineError(unavailable)
    return lines[-1]


class Engine(ABC):
    """One kind of server program."""

    name = "engine"
    protocol = "sglang"
    ready_paths: tuple[str, ...] = ("/ready", "/health_generate")
    info_path = "/server_info"  # the server's identity and resolved settings
    info_fallbacks: tuple[str, ...] = ()  # older versions' paths of the same document
    # (label, regex) pairs: log lines that explain a death. Data, so each engine keeps its own.
    fatal_patterns: tuple[tuple[str, str], ...] = ()
    compiling_patterns: tuple[tuple[str, str], ...] = ()  # log lines that say the server is compiling, not hung
    # Signal that makes a hung server write its stacks to its log (None: the engine has no such hook).
    stack_dump_signal: signal.Signals | None = None
    # The build's env (builds.py): what a patched build sets besides the config's own env.
    # Seconds of this server per second of the box the suite is written for: the emulator's --sim-time-scale (its
    # 100x faster rehearsal is 0.01), 1 for a real server. An SLO, a request rate or a duration scales by it.
    time_scale = 1.0
    build_env: dict[str, str] = {}  # noqa: RUF012 - replaced per instance, never mutated
    build_identity: dict[str, Any] = {}  # noqa: RUF012

    def build_note(self) -> str:
        """What the engine's own options change in the build it serves (the emulator's injected faults), for the
        build's identity in a verdict's provenance; "" for a real engine."""
        return ""

    @abstractmethod
    def argv(self, cfg: ServerConfig, model: str, host: str, port: int) -> list[str]:
        """The command that launches a server of this config."""

    def with_build(self, env: dict[str, str], python: str | None, identity: dict[str, Any]) -> Engine:
        """This engine as a build runs it, a new value: the build's env and identity, and its Python where the engine
        runs in a Python of its own (the engine it came from is not changed, so no build leaks into another)."""
        new = copy.copy(self)
        new.build_env, new.build_identity = dict(env), dict(identity)
        if python is not None:
            setattr(new, "python", python)  # noqa: B010 - only engines with a Python of their own get one
        return new

    def env(self, cfg: ServerConfig) -> dict[str, str]:
        """Extra environment for the server process: the config's, then the build's."""
        return {**cfg.env, **self.build_env}

    def lag_seconds(self, url: str) -> float | None:
        """Seconds an emulated server fell behind its own model so far (None: a real engine, or not known)."""
        return None

    def slow_clock(self, url: str, factor: float) -> bool:
        """Run the server's model `factor` times slower than its launch's clock (1: as launched); False where it has
        no such clock (a real engine keeps its own time)."""
        return False

    @abstractmethod
    def version(self) -> str:
        """The engine's version (part of the reuse fingerprint); raises EngineError if not installed."""

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        """Check the argv without loading a model: the engine's own error message, or why it was skipped."""
        return Preflight(skipped=f"{self.name} has no preflight check")

    def hardware_key(self, cfg: ServerConfig) -> str | None:
        """The hardware key its servers will report, where the engine decides it (the emulator's profile and time
        scale); None: the GPUs decide (NVML or --glm5-hardware). EngineError for a profile that does not exist."""
        return None

    def modeled_load(self, cfg: ServerConfig) -> tuple[float, str] | None:
        """Seconds a launch of this config takes on the machine it stands for, and whence (None: a real engine,
        whose load is measured): the emulator sleeps 0.2 s but plans with GLM-5's real load."""
        return None

    def devices(self, cfg: ServerConfig) -> tuple[str, int] | None:
        """The GPUs it emulates for this config (a name for the machine, their count); None: real GPUs."""
        return None

    def fingerprint_extra(self) -> dict[str, Any]:
        """Settings outside the config that change what the server is (the emulator's time scale)."""
        return {}

    def fatal_lines(self, lines: list[str]) -> list[str]:
        """The log lines that match this engine's fatal patterns, in order, each with its label."""
        compiled = [(label, re.compile(rx)) for label, rx in self.fatal_patterns]
        out = []
        for line in lines:
            for label, rx in compiled:
                if rx.search(line):
                    out.append(f"[{label}] {line.rstrip()}")
                    break
        return out

    def compiling_line(self, lines: list[str]) -> str | None:
        """The last log line that says the server is compiling (a JIT pause is not a hang), with its label."""
        compiled = [(label, re.compile(rx)) for label, rx in self.compiling_patterns]
        for line in reversed(lines):
            for label, rx in compiled:
                if rx.search(line):
                    return f"[{label}] {line.strip()}"
        return None

    def compare(self, cfg: ServerConfig, model: str, info: dict[str, Any]) -> list[str]:
        """Differences between a running server's /server_info and the config (empty when it matches)."""
        return []

    def gpus(self, cfg: ServerConfig) -> tuple[int, str] | None:
        """GPUs a server of this config uses on this node and the flags that say so (None: its flags do not
        say; it gets every GPU unless the config sets `gpus`)."""
        return None


def gpus_for(engine: Engine, cfg: ServerConfig, total: int) -> tuple[int, str]:
    """GPUs to lease for a config: its `gpus`, else what the engine reads from its flags, else all of them."""
    if cfg.gpus is not None:
        return cfg.gpus, f"gpus = {cfg.gpus} in [config.{cfg.name}]"
    found = engine.gpus(cfg)
    if found is not None:
        return found
    return total, f"{engine.name} flags do not say; every GPU unless the config sets gpus"


class SpeaksOpenAI(Engine):
    """A third-party engine on the OpenAI-compatible API (llama.cpp's llama-server, `transformers serve`): the load
    client's openai protocol and a /health that answers once the model is loaded."""

    protocol = "openai"
    ready_paths = ("/health",)


class SpeaksSGLang(Engine):
    """An engine that speaks SGLang 0.5.23: its fatal and compiling log lines, its info and readiness paths (the
    real server and the emulator alike)."""

    fatal_patterns = spec.FATAL_PATTERNS
    compiling_patterns = spec.COMPILING_PATTERNS
    info_path = spec.INFO_PATH
    info_fallbacks = spec.INFO_FALLBACKS
    ready_paths = spec.READY_PATHS
