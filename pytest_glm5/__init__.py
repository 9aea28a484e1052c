"""pytest-glm5: the performance regression gate for LLM serving (GLM-5 under SGLang on SM120).

The public API, importable without pytest: `from pytest_glm5 import Workload, run_workload, Perf, ...`.
Names load on first use, so `python -m pytest_glm5.sim` starts without the plugin's modules.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "BenchResult": "load.types", "Workload": "load.types", "run_workload": "load.client", "BenchError": "load.types",
    "ServerConfig": "configs", "load_configs": "configs", "ConfigError": "configs",
    "ServerHandle": "servers.process", "ServerError": "servers.process", "launch": "servers.process",
    "stop": "servers.process",
    "ServerPool": "servers.pool", "PoolSettings": "servers.pool",
    "Perf": "perf.fixture", "PerfContext": "perf.fixture", "bench": "perf.fixture",
    "PerfGate": "judge.gate", "GateError": "judge.references",
    "Verdict": "judge.baselines", "BaselineStore": "judge.baselines", "BaselineError": "judge.baselines",
    "Provenance": "judge.provenance", "Slo": "judge.slo",
    "Settings": "settings", "SettingsError": "settings",
}
__all__ = ["__version__", *sorted(_PUBLIC)]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
