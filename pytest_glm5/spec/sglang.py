"""SGLang 0.5.23's facts in one place: version, flag table, removed flags, fatal log lines, GPU count, info keys.

The real engine (engines/sglang.py) and the emulator (sim/) both import this module; neither imports the other.
The flag table in sglang_flags.json was read from the release wheel by scripts/extract_sglang_flags.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

VERSION = "0.5.23"
# `/server_info` holds the resolved args, `launch_command` and `version` (server's http_server.py);
# `/get_server_info` is its deprecated alias.
INFO_PATH = "/server_info"
# SGLang before 0.5 (and some 0.5.x builds) serve the same document only here.
INFO_FALLBACKS = ("/get_server_info",)
READY_PATHS = ("/ready", "/health_generate")

# Flags that 0.5.23 no longer accepts, with what replaced them (sglang.md section 4, server_args.py).
REMOVED_FLAGS: dict[str, str] = {
    "--enable-piecewise-cuda-graph": "removed in SGLang 0.5.23: prefill CUDA graphs are now "
                                     "--cuda-graph-backend-prefill {full,breakable,disabled}",
    "--cuda-graph-max-bs": "removed in SGLang 0.5.23: use --cuda-graph-max-bs-decode N or "
                           "--cuda-graph-max-bs-prefill N",
}

# Log lines that explain why an SGLang server died (shared/reference/campaign.md, sglang.md 5).
# A server that says it compiles is busy, not hung: FlashInfer's JIT logger (flashinfer/jit/core.py), torch.compile's
# inductor, and a ninja build's progress lines. A stall while the log grows with these is a pause.
COMPILING_PATTERNS: tuple[tuple[str, str], ...] = (
    ("flashinfer-jit", r"flashinfer\.jit|Loading JIT ops|JIT compil"),
    ("torch-compile", r"torch\._inductor|torch\.compile|[Cc]ompiling (graph|model|FX)"),
    ("ninja", r"^\s*\[\d+/\d+\] .*(nvcc|c\+\+|Linking|Building)"),
)
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


@cache
def flag_table() -> dict[str, Any]:
    """The flag table read from the SGLang wheel: {"source", "prog", "options": [{flags, dest, ...}]}."""
    text = resources.files("pytest_glm5.spec").joinpath("sglang_flags.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def flag_dests() -> dict[str, str]:
    """Every SGLang flag spelling -> its args dest (`--tp-size` and `--tensor-parallel-size` -> tp_size)."""
    return {flag: opt["dest"] for opt in flag_table()["options"] for flag in opt["flags"]}


def removed_flag_hint(message: str) -> str:
    """argparse's "unrecognized arguments" message, with what replaced a removed flag when one is named."""
    hints = [f"{flag}: {why}" for flag, why in REMOVED_FLAGS.items() if flag in message]
    return message + "".join(f" ({h})" for h in hints)


def flag_args(flags: dict[str, Any]) -> dict[str, Any]:
    """A config's flags by SGLang's dests, spelled as `sglang serve` accepts them: aliases and unique prefixes
    (argparse's allow_abbrev) resolve; an unknown or ambiguous key is left out (the preflight names it)."""
    dests = flag_dests()
    out: dict[str, Any] = {}
    for key, value in flags.items():
        flag = key if key.startswith("-") else f"--{key}"
        dest = dests.get(flag)
        if dest is None:
            hits = {d for f, d in dests.items() if f.startswith(flag)}
            dest = hits.pop() if len(hits) == 1 else None
        if dest is not None:
            out[dest] = value
    return out


@dataclass(frozen=True)
class GpuNeed:
    """GPUs one server uses on this node, and the flags that say so."""

    count: int
    why: str


def gpus_needed(args: dict[str, Any]) -> GpuNeed:
    """GPUs one server uses on this node (args by dest). SGLang 0.5.23 places `dp_size` replicas of
    `tp_size x pp_size` GPUs each (managers/data_parallel_controller.py:442 steps base_gpu_id by
    tp_size * pp_size per replica); attention DP lives inside the TP group (parallel_hook.py asserts
    `tp_size % (attn_dp_size * attn_cp_size) == 0`), and the deprecated `--enable-dp-attention` turns
    `--dp-size N` into `--attn-dp-size N` (parallel_hook.py:39). A node of `nnodes` holds its share; GPU ids run
    from `base_gpu_id` in steps of `gpu_id_step` (data_parallel_controller.py:747), so the server must see
    base + (n-1) x step + 1 devices."""
    def num(dest: str, default: int = 1) -> int:
        value = args.get(dest)
        return default if value is None or value is False else int(value)

    tp, pp, dp, attn_dp = num("tp_size"), num("pp_size"), num("dp_size"), num("attn_dp_size")
    if args.get("enable_dp_attention") and attn_dp == 1:
        attn_dp, dp = dp, 1
    nnodes = max(1, num("nnodes"))
    used = max(1, tp * pp * dp // nnodes)
    parts = [f"tp-size {tp}", f"pp-size {pp}"] + ([f"dp-size {dp}"] if dp > 1 else [])
    why = " x ".join(parts)
    if attn_dp > 1:
        why += f" (attention DP {attn_dp} inside TP)"
    if nnodes > 1:
        why += f" / nnodes {nnodes}"
    base, step = num("base_gpu_id", 0), max(1, num("gpu_id_step"))
    count = base + (used - 1) * step + 1
    if count != used:
        why += f", on GPU ids {base}, {base + step}, ... (base-gpu-id {base}, gpu-id-step {step})"
    return GpuNeed(count, why)


def compare_server_info(flags: dict[str, Any], model: str, info: dict[str, Any]) -> list[str]:
    """Flags of a config that a running SGLang server's resolved args (`/server_info`) contradict."""
    dests = flag_dests()
    diffs: list[str] = []
    if info.get("model_path") not in (None, model):
        diffs.append(f"model_path: server {info.get('model_path')!r}, config {model!r}")
    for key, want in flags.items():
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
