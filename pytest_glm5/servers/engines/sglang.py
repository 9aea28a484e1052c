"""SGLang 0.5.23: `sglang serve` (or `python -m sglang.launch_server`), preflight with its own parser."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from functools import cache
from typing import Any

from ...configs import ServerConfig
from ...spec import sglang as spec
from .base import Preflight, SpeaksSGLang, python_says

PREFLIGHT_TIMEOUT_S = 300.0
PREFLIGHT_CODE = (
    "import sys\n"
    "try:\n"
    "    from sglang.srt.server_args import prepare_server_args\n"
    "except Exception as exc:\n"
    "    print(f'IMPORT-FAILED {exc.__class__.__name__}: {exc}'); sys.exit(3)\n"
    "prepare_server_args(sys.argv[1:])\n"
)

def _candidates() -> list[str]:
    """This Python first, then each `python3` on PATH and the usual system places (the plugin's venv needs no
    system site packages: SGLang is used where it is installed)."""
    env = os.environ.get("GLM5_SGLANG_PYTHON")
    if env:
        return [env]
    found = [sys.executable]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for name in ("python3", "python"):
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK) and path not in found:
                found.append(path)
    found += [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK) and p not in found]
    return found


@cache
def find_python() -> str:
    """The first Python that imports sglang (`GLM5_SGLANG_PYTHON` decides alone); this one if none does, so that
    the version check says SGLang is missing."""
    candidates = _candidates()
    if importlib.util.find_spec("sglang") is not None and candidates[0] == sys.executable:
        return sys.executable
    for python in candidates:
        try:
            p = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                                "sys.exit(0 if u.find_spec('sglang') else 1)"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0:
            return python
    return candidates[0]


class SGLangEngine(SpeaksSGLang):
    """The real SGLang server, in the same or another Python environment."""

    name = "sglang"

    def __init__(self, python: str | None = None) -> None:
        self._python = python

    @property
    def python(self) -> str:
        """The server's Python: the build's, else found where SGLang is importable (looked up on first use)."""
        if self._python is None:
            self._python = find_python()
        return self._python

    @python.setter
    def python(self, value: str) -> None:
        self._python = value

    def argv(self, cfg: ServerConfig, model: str, host: str, port: int) -> list[str]:
        """`sglang serve --model-path M <flags> --host H --port P`."""
        tail = ["--model-path", model, *cfg.flag_argv(), "--host", host, "--port", str(port)]
        cli = shutil.which("sglang") if self.python == sys.executable else None
        if cli:
            return [cli, "serve", *tail]
        return [self.python, "-m", "sglang.launch_server", *tail]

    def version(self) -> str:
        """sglang's installed version in the server's Python."""
        return python_says(self.python, "import importlib.metadata as m; print(m.version('sglang'))",
                           f"SGLang is not importable in {self.python} (nor in any python3 on PATH); install it "
                           f"(pip install sglang=={spec.VERSION}), name its Python in GLM5_SGLANG_PYTHON or a "
                           "[build.NAME] python, or run with --glm5-sim", timeout=60)

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> Preflight:
        """Run SGLang's own prepare_server_args on the argv in the server's Python (seconds, no GPU)."""
        args = self.argv(cfg, model, host, port)
        tail = args[args.index("--model-path"):]
        try:
            p = subprocess.run([self.python, "-c", PREFLIGHT_CODE, *tail], capture_output=True, text=True,
                               timeout=PREFLIGHT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Preflight(skipped=f"SGLang's parser did not answer within {PREFLIGHT_TIMEOUT_S:.0f} s in "
                                     f"{self.python}")
        if p.returncode == 3 and "IMPORT-FAILED" in p.stdout:
            # Importable for its version but not its parser: the launch itself will tell.
            why = p.stdout.split("IMPORT-FAILED", 1)[1].strip().splitlines()[0]
            return Preflight(skipped=f"cannot import sglang.srt.server_args in {self.python}: {why}")
        if p.returncode == 2:
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            return Preflight(problem=spec.removed_flag_hint(lines[-1] if lines else "sglang rejected the arguments"))
        if p.returncode != 0:
            # Not argparse's verdict on the flags (that is exit 2): the parser tripped on something else here, so
            # it proves nothing either way; the launch decides.
            last = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip()][-1:]
            return Preflight(skipped=f"prepare_server_args failed outside argument parsing (exit {p.returncode}): "
                                     f"{last[0] if last else 'no output'}")
        return Preflight()

    def compare(self, cfg: ServerConfig, model: str, info: dict[str, Any]) -> list[str]:
        """Differences between /server_info and the config."""
        return spec.compare_server_info(cfg.flags, model, info)

    def gpus(self, cfg: ServerConfig) -> tuple[int, str] | None:
        """tp x pp x dp replicas, attention DP inside TP (spec.gpus_needed cites SGLang's source)."""
        need = spec.gpus_needed(spec.flag_args(cfg.flags))
        return need.count, need.why
