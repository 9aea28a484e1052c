"""Engines: what differs per server program (argv, readiness, identity, preflight, fatal log lines)."""

from __future__ import annotations

from .base import Engine, EngineError, Preflight
from .llamacpp import LlamaCppEngine
from .sglang import SGLangEngine
from .sim import SimEngine
from .transformers import TransformersEngine

__all__ = ["Engine", "EngineError", "LlamaCppEngine", "Preflight", "SGLangEngine", "SimEngine", "TransformersEngine"]
