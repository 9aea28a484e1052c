"""Hugging Face `transformers serve`: a real GPU engine on the device machine (an OpenAI-style server that
refuses token-id prompts and ignore_eos, and sends no [DONE]; the load generator falls back for it)."""

from __future__ import annotations

import os
import shutil
import sys

from ...configs import ServerConfig
from .base import EngineError, Preflight, SpeaksOpenAI, python_says

FATAL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cuda-oom", r"CUDA out of memory|OutOfMemoryError"),
    ("cuda-error", r"CUDA error|illegal memory access|device-side assert"),
    ("traceback", r"^Traceback \(most recent call last\)|^\S*(Error|Exception): "),
)


class TransformersEngine(SpeaksOpenAI):
    """`transformers serve MODEL_DIR --continuous-batching` with bounded cache flags from the config."""

    name = "transformers"
    info_path = "/v1/models"
    fatal_patterns = FATAL_PATTERNS

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable  # a build's Python: its `transformers` command and version

    def _cli(self) -> list[str]:
        found = shutil.which("transformers", path=os.path.dirname(self.python) + os.pathsep
                             + os.environ.get("PATH", ""))
        if not found:
            raise EngineError("the `transformers` command is not installed: pip install 'transformers[serving]'")
        return [found]

    def argv(self, cfg: ServerConfig, model: str, host: str, port: int) -> list[str]:
        """The serve command; cache bounds (--cb-*) and --device come from the config's flags."""
        flags = ServerConfig(cfg.name, flags={k: v for k, v in cfg.flags.items() if k != "port"})
        return [*self._cli(), "serve", model, "--host", host, "--port", str(port), *flags.flag_argv()]

    def env(self, cfg: ServerConfig) -> dict[str, str]:
        """Offline (the model is a local folder, nothing is fetched), then the config's env and the build's."""
        return {"HF_HUB_OFFLINE": "1", **super().env(cfg)}

    def version(self) -> str:
        """transformers' version in this Python."""
        return python_says(self.python, "import importlib.metadata as m; print(m.version('transformers'))",
                           f"transformers is not importable in {self.python}; pip install 'transformers[serving]'",
                           timeout=60)

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        """The model folder must exist (offline serving cannot fetch one)."""
        self._cli()
        if not os.path.isdir(model):
            return Preflight(problem=f"model folder {model} does not exist (transformers serve runs offline here)")
        return Preflight(skipped="its flags are checked only by the launch itself")
