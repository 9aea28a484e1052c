"""The programs in scripts/ as modules, for tests that call their functions.

Each is loaded from its file by name rather than by putting scripts/ on sys.path: a path entry left behind (a test
that failed between insert and remove) would let every later import in the worker find a script first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def script(name: str) -> ModuleType:
    """`scripts/<name>.py` as a fresh module, registered under `name` (its dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no scripts/{name}.py"
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
