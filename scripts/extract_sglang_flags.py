"""Dump SGLang's real launch-flag table (names, types, choices) into the emulator's data file.

Usage (run with `python3 -S` so that nothing installed leaks in):
    pip download --no-deps sglang==0.5.23 -d /tmp/sgl && unzip -q /tmp/sgl/sglang-*.whl -d /tmp/sgl/full
    pip install msgspec --target /tmp/sgl/deps
    python3 -S scripts/extract_sglang_flags.py /tmp/sgl/full /tmp/sgl/deps pytest_glm5/sim/sglang_flags.json

SGLang's parser cannot be imported without torch, triton and CUDA wheels, so every missing
third-party module is replaced by a permissive stub; only argparse registrations are read.
"""
import sys, types, importlib.abc, importlib.machinery, json, argparse
WHEEL_DIR, DEPS_DIR, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [WHEEL_DIR, DEPS_DIR]
REAL = {"msgspec"}
class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ("sglang",) or top in sys.stdlib_module_names or top in REAL:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = StubMod(spec.name); m.__path__ = []; m.__spec__ = spec; m.__file__ = "/stub"; m.__version__ = "2.14.1"
        return m
    def exec_module(self, module): pass

import typing
import abc
class _Meta(abc.ABCMeta):
    def __getattr__(cls, n):
        if n.startswith("__"): raise AttributeError(n)
        return _mk(n)
    def __call__(cls, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k: return a[0]
        return type.__call__(cls)
    def __or__(cls, o): return typing.Any
    def __ror__(cls, o): return typing.Any
    def __getitem__(cls, k): return cls
    def __iter__(cls): return iter([])
    def __len__(cls): return 0
    def __bool__(cls): return False
    def __int__(cls): return 0
    def __lt__(cls, o): return False
    def __gt__(cls, o): return False
    def __ge__(cls, o): return False
    def __le__(cls, o): return False
def _mk(n):
    return _Meta(n, (), {"__getattr__": lambda self, x: _mk(x), "__call__": lambda self, *a, **k: (a[0] if len(a)==1 and callable(a[0]) and not k else _mk("r")), "__iter__": lambda s: iter([]), "__bool__": lambda s: False})
class StubMod(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__") or n in ("npu","xpu","musa","hpu","mlu","_C_npu"): raise AttributeError(n)
        return _mk(n)
sys.meta_path.append(Stub())
# skip sglang/__init__ heavy imports
pkg = types.ModuleType("sglang"); pkg.__path__ = [WHEEL_DIR + "/sglang"]; sys.modules["sglang"] = pkg
import sglang.srt.platforms as _pl
_pl._current_platform = _mk("Plat")()
from sglang.srt import server_args as sa
p = argparse.ArgumentParser(prog="sglang serve")
sa.ServerArgs.add_cli_args(p)
out = []
for a in p._actions:
    if not a.option_strings or "-h" in a.option_strings: continue
    ch = a.choices
    try: ch = sorted(ch) if isinstance(ch, set) else (list(ch) if ch is not None else None)
    except Exception: ch = None
    if ch is not None and not all(isinstance(c, (str, int, float)) for c in ch): ch = None
    t = getattr(a.type, "__name__", None) if a.type else None
    d = a.default if isinstance(a.default, (str, int, float, bool, type(None))) else None
    out.append({"flags": a.option_strings, "dest": a.dest, "action": type(a).__name__, "nargs": a.nargs if isinstance(a.nargs, (str, int, type(None))) else None, "type": t if t in ("int","float","str") else ("str" if t else None), "choices": ch, "default": d, "const": a.const if isinstance(a.const,(str,int,float,bool,type(None))) else None})
print(len(out), file=sys.stderr)
json.dump({"source": "sglang==0.5.23 wheel, sglang.srt.server_args.ServerArgs.add_cli_args (scripts/extract_sglang_flags.py)",
           "prog": "sglang serve", "options": out}, open(OUT, "w"), separators=(",", ":"))
