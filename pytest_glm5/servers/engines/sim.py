"""The emulator as a real subprocess, with the config's SGLang flags and the run's --sim-* settings."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import urllib.request
from typing import Any

from ... import __version__, proxies
from ...configs import ServerConfig
from ...sim.args import build_parser
from ...sim.profile import DEFAULT_PROFILE, ProfileError, load_profile
from ...spec import sglang as spec
from ...telemetry.nvml import sim_hardware_key
from .base import EngineError, Preflight, SpeaksSGLang


class SimEngine(SpeaksSGLang):
    """`python -m pytest_glm5.sim`: speaks, performs and fails like SGLang."""

    name = "sim"
    stack_dump_signal = signal.SIGUSR1

    def __init__(self, profile: str | None = None, time_scale: float = 1.0, slowdown: float = 1.0,
                 startup_s: float | None = None, seed: int | None = None, noise: float | None = None,
                 extra: list[str] | None = None, python: str | None = None, garbage: float = 0.0) -> None:
        self.python = python or sys.executable
        self.profile = profile
        self.time_scale = time_scale
        self.slowdown = slowdown
        self.startup_s = startup_s
        self.seed = seed
        self.noise = noise
        self.garbage = garbage
        self.extra = list(extra or [])

    def profile_of(self, cfg: ServerConfig) -> str:
        """The profile this config's emulator runs: --glm5-sim-profile, else the config's, else the default."""
        return self.profile or cfg.sim_profile or DEFAULT_PROFILE

    def _profile(self, cfg: ServerConfig) -> dict[str, Any]:
        try:
            return load_profile(self.profile_of(cfg))
        except ProfileError as exc:
            raise EngineError(f"config {cfg.name}: {exc}") from None

    def hardware_key(self, cfg: ServerConfig) -> str | None:
        """`sim-<profile>-x<time scale>`: what the emulator will report, known before it starts."""
        return sim_hardware_key(str(self._profile(cfg)["name"]), self.time_scale)

    def modeled_load(self, cfg: ServerConfig) -> tuple[float, str] | None:
        """The profile's real load (`[startup] real_load_s`, else its model load_s) and warmup, unscaled."""
        profile = self._profile(cfg)
        startup = profile.get("startup", {})
        real = float(startup.get("real_load_s", startup.get("load_s", 0.0))) + float(startup.get("warmup_s", 0.0))
        return real, f"modeled by profile {profile['name']}"

    def devices(self, cfg: ServerConfig) -> tuple[str, int] | None:
        """The profile's GPUs (`glm5-sm120`: eight)."""
        profile = self._profile(cfg)
        return str(profile["name"]), int(profile.get("gpu", {}).get("count", 1))

    def _sim_flags(self, cfg: ServerConfig) -> list[str]:
        profile = self.profile_of(cfg)
        out = ["--sim-profile", profile, "--sim-time-scale", str(self.time_scale)]
        # Unset, a build's env (GLM5_SIM_SLOWDOWN) decides; unseeded, each launch draws its own speed factor.
        if self.slowdown != 1.0:
            out += ["--sim-slowdown", str(self.slowdown)]
        if self.garbage:
            out += ["--sim-garbage", str(self.garbage)]
        if self.seed is not None:
            out += ["--sim-seed", str(self.seed)]
        if self.noise is not None:
            out += ["--sim-noise", str(self.noise)]
        if self.startup_s is not None:
            out += ["--sim-startup-s", str(self.startup_s)]
        return out + self.extra

    def argv(self, cfg: ServerConfig, model: str, host: str, port: int) -> list[str]:
        """The emulator with the same flags SGLang would get."""
        return [self.python, "-m", "pytest_glm5.sim", "--model-path", model, *cfg.flag_argv(),
                "--host", host, "--port", str(port), *self._sim_flags(cfg)]

    def env(self, cfg: ServerConfig) -> dict[str, str]:
        """The config's env plus the switch that makes the emulator die with its parent."""
        return {**cfg.env, **self.build_env, "GLM5_PDEATHSIG": "1"}

    def lag_seconds(self, url: str) -> float | None:
        """`sglang:sim_behind_seconds_total` from /metrics (the config must enable metrics)."""
        try:
            with proxies.opener(url).open(url + "/metrics", timeout=5) as resp:
                body = resp.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return None
        for line in body.splitlines():
            if line.startswith("sglang:sim_behind_seconds_total"):
                with contextlib.suppress(ValueError, IndexError):
                    return float(line.split()[-1])
        return None

    def slow_clock(self, url: str, factor: float) -> bool:
        """POST /sim/clock: the emulator's model `factor` times slower than its launch's time scale (True: it is)."""
        body = json.dumps({"factor": factor}).encode()
        req = urllib.request.Request(url + "/sim/clock", data=body, headers={"Content-Type": "application/json"})
        try:
            with proxies.opener(url).open(req, timeout=5) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError):
            return False  # an older emulator, or one that died: the launch's clock, and its lag says the rest

    def version(self) -> str:
        """SGLang's version as emulated, and ours."""
        return f"{spec.VERSION}-sim-{__version__}"

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        """The emulator's parser is SGLang's flag table: the same messages, in-process."""
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                # The launch's environment: a build's GLM5_SIM_* knobs are read as the emulator will read them.
                build_parser({**os.environ, **self.env(cfg)}).parse_args(self.argv(cfg, model, host, port)[3:])
        except SystemExit as exc:
            # argparse writes its error to stderr; a bad GLM5_SIM_* value is the SystemExit's own message.
            said = exc.code if isinstance(exc.code, str) else err.getvalue()
            lines = [ln for ln in said.splitlines() if ln.strip()]
            return Preflight(problem=spec.removed_flag_hint(lines[-1] if lines else "the emulator rejected the "
                                                                                     "arguments"))
        return Preflight()

    def build_note(self) -> str:
        """The emulated build's faults (` (emulated slowdown 0.9)`): a slowed or wrong build is another build, as a
        patch makes a real one, so its launches never pool with the unchanged build's across nights."""
        faults = [f"slowdown {self.slowdown:g}" if self.slowdown != 1.0 else "",
                  f"garbage {self.garbage:g}" if self.garbage else ""]
        shown = ", ".join(f for f in faults if f)
        return f" (emulated {shown})" if shown else ""

    def fingerprint_extra(self) -> dict[str, Any]:
        """What the emulator's own flags make of it."""
        # A wrong build is another build: a kept server of the right one is never reused for it.
        return {"sim": [self.profile, self.time_scale, self.slowdown, self.startup_s, self.seed, self.noise,
                        self.extra, *([self.garbage] if self.garbage else [])]}

    def compare(self, cfg: ServerConfig, model: str, info: dict[str, Any]) -> list[str]:
        """Same rules as SGLang: its /server_info has the same keys."""
        return spec.compare_server_info(cfg.flags, model, info)

    def gpus(self, cfg: ServerConfig) -> tuple[int, str] | None:
        """tp x pp x dp replicas, attention DP inside TP (spec.gpus_needed cites SGLang's source)."""
        need = spec.gpus_needed(spec.flag_args(cfg.flags))
        return need.count, need.why
