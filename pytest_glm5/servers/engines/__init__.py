"""Engines: what differs per server program (argv, readiness, identity, preflight, fatal log lines), and the
registry that picks one for a config."""

from __future__ import annotations

from collections.abc import Callable

from ...configs import ServerConfig
from ...settings import Settings
from .base import Engine, EngineError, Preflight
from .llamacpp import LlamaCppEngine
from .sglang import SGLangEngine
from .sim import SimEngine
from .transformers import TransformersEngine

__all__ = ["ENGINES", "Engine", "EngineError", "LlamaCppEngine", "Preflight", "SGLangEngine", "SimEngine",
           "TransformersEngine", "engine_factory"]

# A config's `engine` key names one of these; `sim` is the emulator (every config runs on it under --glm5-sim).
ENGINES: dict[str, type[Engine]] = {"sglang": SGLangEngine, "sim": SimEngine, "llamacpp": LlamaCppEngine,
                                    "transformers": TransformersEngine}


def engine_factory(s: Settings) -> Callable[[ServerConfig], Engine]:
    """The engine of each config under these settings: the emulator (with the run's --glm5-sim-* settings) for
    every config under --glm5-sim and for `engine = "sim"`, else the config's own."""

    def engine_for(cfg: ServerConfig) -> Engine:
        if s.sim or cfg.engine == "sim":
            return SimEngine(profile=s.sim_profile, time_scale=s.sim_time_scale, slowdown=s.sim_slowdown,
                             startup_s=s.sim_startup_s, noise=s.sim_noise, garbage=s.sim_garbage)
        if cfg.engine not in ENGINES:
            raise EngineError(f"config {cfg.name}: engine {cfg.engine!r} is not one of {', '.join(ENGINES)}")
        return ENGINES[cfg.engine]()

    return engine_for
