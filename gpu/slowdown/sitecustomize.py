"""A test-only slower build of a real engine: with GLM5_TEST_SLOWDOWN=f (e.g. 0.05) in a build's env, every forward
pass of a transformers Llama takes 1/(1-f) times as long (after the step, the GPU is waited for and the process
sleeps f/(1-f) of the step's time), so throughput drops by f: a known, real slowdown for checking a gate on a GPU.

scripts/gpu_gate.sh puts this folder first on PYTHONPATH; without the variable it does nothing. Python imports
`sitecustomize` at start; a finder on sys.meta_path then wraps the Llama forward once its module has loaded.
"""

from __future__ import annotations

import os
import sys

_FRACTION = float(os.environ.get("GLM5_TEST_SLOWDOWN", "0") or 0)
_TARGET = "transformers.models.llama.modeling_llama"


def _slow(forward):  # type: ignore[no-untyped-def]
    import time

    import torch

    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = forward(*args, **kwargs)
        torch.cuda.synchronize()
        time.sleep((time.perf_counter() - t0) * _FRACTION / (1 - _FRACTION))
        return out

    return wrapped


class _Finder:
    """Finds nothing itself: it asks the other finders for the Llama module and patches it after it executes."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != _TARGET:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            real_exec(module)
            module.LlamaForCausalLM.forward = _slow(module.LlamaForCausalLM.forward)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if 0 < _FRACTION < 1:
    sys.meta_path.insert(0, _Finder())
