"""SGLang 0.5.23: `sglang serve` (or `python -m sglang.launch_server`), preflight with its own parser."""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

from ..configs import ServerConfig
from ..sim.args import sglang_flag_table
from .base import Engine, python_says

PREFLIGHT_CODE = (
    "import sys\n"
    "try:\n"
    "    from sglang.srt.server_args import prepare_server_args\n"
    "except Exception as exc:\n"
    "    print(f'IMPORT-FAILED {exc.__class__.__name__}: {exc}'); sys.exit(3)\n"
    "prepare_server_args(sys.argv[1:])\n"
)

# Log lines that explain why an SGLang server died (shared/reference/campaign.md, sglang.md 5).
FATAL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cuda-oom", r"CUDA out of memory|OutOfMemoryError"),
    ("illegal-memory-access", r"illegal memory access"),
    ("cutlass-tile", r"CUTLASS|shared memory|[Tt]ile \d+x\d+x\d+|OutOfResources"),
    ("nccl", r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|NCCL timeout"),
    ("watchdog", r"[Ww]atchdog timeout|Scheduler watchdog"),
    ("scheduler-exception", r"Scheduler hit an exception|Detokenizer hit an exception|TokenizerManager hit"),
    ("traceback", r"^Traceback \(most recent call last\)|^\S*(Error|Exception): "),
    ("child-died", r"Received sigquit from a child process|Initialization failed"),
)


def flag_dests() -> dict[str, str]:
    """Every SGLang flag spelling -> its args dest (`--tp-size` and `--tensor-parallel-size` -> tp_size)."""
    return {flag: opt["dest"] for opt in sglang_flag_table()["options"] for flag in opt["flags"]}


def compare_server_info(cfg: ServerConfig, model: str, info: dict[str, Any]) -> list[str]:
    """Flags of the config that a running SGLang server's resolved args contradict."""
    dests = flag_dests()
    diffs: list[str] = []
    if info.get("model_path") not in (None, model):
        diffs.append(f"model_path: server {info.get('model_path')!r}, config {model!r}")
    for key, want in cfg.flags.items():
        flag = key if key.startswith("-") else f"--{key}"
        dest = dests.get(flag)
        if dest is None or dest not in info:
            continue
        have = info[dest]
        if want is True:
            ok = bool(have) is True
        elif want is False:
            ok = not have
        else:
            ok = str(have) == str(want) or (isinstance(have, float | int) and _num_eq(have, want))
        if not ok:
            diffs.append(f"{flag}: server {have!r}, config {want!r}")
    return diffs


def _num_eq(have: float | int, want: Any) -> bool:
    try:
        return float(have) == float(want)
    except (TypeError, ValueError):
        return False


class SGLangEngine(Engine):
    """The real SGLang server, in the same or another Python environment."""

    name = "sglang"
    fatal_patterns = FATAL_PATTERNS

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

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
                           f"SGLang is not importable in {self.python}; install it (pip install sglang==0.5.23) "
                           "or run with --glm5-sim", timeout=60)

    def preflight(self, cfg: ServerConfig, model: str, host: str, port: int) -> str | None:
        """Run SGLang's own prepare_server_args on the argv in the server's Python (seconds, no GPU)."""
        args = self.argv(cfg, model, host, port)
        tail = args[args.index("--model-path"):]
        try:
            p = subprocess.run([self.python, "-c", PREFLIGHT_CODE, *tail], capture_output=True, text=True,
                               timeout=300)
        except subprocess.TimeoutExpired:
            return None
        if p.returncode == 3 and "IMPORT-FAILED" in p.stdout:
            # Importable for its version but not its parser: say so and go on (the launch will tell).
            return None
        if p.returncode == 2:
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            return lines[-1] if lines else "sglang rejected the arguments"
        return None

    def compare(self, cfg: ServerConfig, model: str, info: dict[str, Any]) -> list[str]:
        """Differences between /server_info and the config."""
        return compare_server_info(cfg, model, info)
