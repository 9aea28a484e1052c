"""SGLang's own load client, bench_serving, run in this process: the cross-check of `glm5 bench` on the same server.

Where sglang is installed (the box), `sglang.benchmark.serving` is imported as it is. Elsewhere it is read from an
sglang wheel (`pip download --no-deps sglang==0.5.23`, named by --sglang-wheel or GLM5_SGLANG_WHEEL), with the
imports it makes beyond its client left out: the package's __init__ (the engine, torch), the dataset modules it does
not use here and, where transformers is not installed, the tokenizer classes it only names in type hints. The client
itself (a session per request, its SSE parsing, `benchmark()` and `calculate_metrics()`) is SGLang's own code.

The requests are ours: the same token ids `glm5 bench` sends (client.make_prompts, bench_serving's random-ids
method), passed as bench_serving's DatasetRow, so both clients ask the server the same thing. bench_serving re-counts
each output with a tokenizer after the run (`total_output_tokens_retokenized`); without the model's tokenizer that
figure counts whitespace-separated words and is left out of the comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import types
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import proxies
from ..metrics import distinct
from . import datasets
from .client import make_prompts, output_lengths, prompt_text
from .types import BenchError, Workload

WHEEL_ENV = "GLM5_SGLANG_WHEEL"
# The packages bench_serving's client needs beyond this plugin's own (aiohttp, orjson, numpy via scipy).
NEEDS = ("msgspec", "requests", "tqdm", "numpy")
_LOADED = "_glm5_bench_serving"


@dataclass(frozen=True)
class Source:
    """Where bench_serving came from: `installed sglang 0.5.23` or the wheel's path."""

    module: types.ModuleType
    described: str


class _Words:
    """The one tokenizer method bench_serving calls on our path (re-counting outputs), by whitespace."""

    vocab_size = 1000

    def encode(self, text: str, add_special_tokens: bool = True) -> list[str]:
        return text.split()

    def num_special_tokens_to_add(self) -> int:
        return 0


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _package(name: str, path: Path) -> types.ModuleType:
    """A package whose submodules load from path without running its __init__."""
    return _stub(name, __path__=[str(path)])


def _extract(wheel: Path) -> Path:
    """The wheel's sglang/benchmark sources in a cache folder beside it (extracted once)."""
    stem = wheel.name.split("-")[1] if wheel.name.count("-") >= 2 else "x"
    for root in (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-glm5",
                 Path(tempfile.gettempdir()) / "pytest-glm5"):
        out = root / f"sglang-{stem}-bench" / str(wheel.stat().st_mtime_ns)
        if (out / "sglang" / "benchmark" / "serving.py").exists():
            return out
        try:
            with zipfile.ZipFile(wheel) as z:
                names = [n for n in z.namelist() if n.startswith("sglang/benchmark/") and n.endswith(".py")]
                if "sglang/benchmark/serving.py" not in names:
                    raise BenchError(f"{wheel} holds no sglang/benchmark/serving.py: is it an sglang wheel of 0.5.x?")
                z.extractall(out, names)
            return out
        except zipfile.BadZipFile:
            raise BenchError(f"{wheel} is not a wheel (not a zip archive); pip download --no-deps sglang==0.5.23 "
                             "gives one") from None
        except OSError:
            continue
    raise BenchError(f"cannot extract {wheel}: no writable cache folder (set XDG_CACHE_HOME)")


def _from_wheel(wheel: Path) -> types.ModuleType:
    missing = [m for m in NEEDS if not _importable(m)]
    if missing:
        raise BenchError(f"bench_serving needs {', '.join(missing)} (pip install {' '.join(missing)})")
    root = _extract(wheel) / "sglang"
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith(("sglang.", "transformers"))}
    try:
        _package("sglang", root)
        _package("sglang.benchmark", root / "benchmark")
        datasets = _package("sglang.benchmark.datasets", root / "benchmark" / "datasets")
        _package("sglang.srt", root / "srt")
        _package("sglang.srt.disaggregation", root / "srt" / "disaggregation")
        _package("sglang.srt.utils", root / "srt" / "utils")
        # Used by run_benchmark (the command line), not by the client: values from 0.5.23's sources.
        _stub("sglang.srt.disaggregation.utils", FAKE_BOOTSTRAP_HOST="2.2.2.2")
        _stub("sglang.srt.utils.network", resolve_base_url=None, resolve_host_port=None)
        if not _importable("transformers"):
            _stub("transformers", AutoTokenizer=object, PreTrainedTokenizerBase=object, AutoProcessor=object,
                  PreTrainedTokenizer=object, PreTrainedTokenizerFast=object, AutoConfig=object)
        common = importlib.import_module("sglang.benchmark.datasets.common")
        # get_dataset is the command line's loader: our requests are passed in.
        datasets.__dict__.update(DatasetRow=common.DatasetRow, get_dataset=None)
        return importlib.import_module("sglang.benchmark.serving")
    except ImportError as exc:
        raise BenchError(f"bench_serving from {wheel} needs {exc.name or exc} (pip install it)") from None
    finally:
        # The loaded module keeps what it imported; the names go, so a real sglang imported later is not shadowed.
        serving = sys.modules.get("sglang.benchmark.serving")
        for k in [k for k in sys.modules if k == "sglang" or k.startswith(("sglang.", "transformers"))]:
            if k not in saved:
                del sys.modules[k]
        sys.modules.update(saved)
        if serving is not None:
            sys.modules[_LOADED] = serving


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def load(wheel: str | Path | None = None) -> Source:
    """bench_serving's module: the installed sglang's, else the wheel's (argument, then GLM5_SGLANG_WHEEL);
    BenchError naming both ways when neither is there."""
    if _LOADED in sys.modules:
        mod = sys.modules[_LOADED]
        return Source(mod, getattr(mod, "_glm5_source", "bench_serving"))
    path = wheel or os.environ.get(WHEEL_ENV)
    if path is None:
        try:
            mod = importlib.import_module("sglang.benchmark.serving")
        except ImportError as exc:
            raise BenchError(f"SGLang's bench_serving is not importable here ({exc}); install sglang, or give its "
                             f"wheel with --sglang-wheel or {WHEEL_ENV} (pip download --no-deps sglang==0.5.23)"
                             ) from None
        described = f"installed sglang {getattr(sys.modules.get('sglang'), '__version__', '?')}"
    else:
        p = Path(path)
        if not p.is_file():
            raise BenchError(f"no sglang wheel at {p} (pip download --no-deps sglang==0.5.23 -d DIR gives one)")
        mod = _from_wheel(p)
        described = f"bench_serving of {p.name}"
    mod._glm5_source = described  # type: ignore[attr-defined]
    sys.modules[_LOADED] = mod
    return Source(mod, described)

def _template_tokens(url: str, workload: Workload, model: str = "default") -> int:
    """What the server's chat template adds to the words of a prompt (one short request, its usage.prompt_tokens
    less the words sent): glm5 bench's probe learns it the same way."""
    words = 8
    body = {"model": model, "messages": [{"role": "user", "content": prompt_text(list(range(10, 10 + words)))}],
            "max_completion_tokens": 1, "chat_template_kwargs": {"enable_thinking": bool(workload.thinking)}}
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            usage = json.loads(resp.read()).get("usage") or {}
    except (OSError, ValueError) as exc:
        raise BenchError(f"{url}/v1/chat/completions did not answer a probe with its usage: {exc}") from None
    return max(0, int(usage.get("prompt_tokens") or words) - words)


def _args(mod: types.ModuleType, url: str, workload: Workload, output_file: str) -> argparse.Namespace:
    """bench_serving's own parsed arguments for this workload (its parser, so every default is its own)."""
    backend = {"sglang": "sglang", "openai": "sglang-oai", "chat": "sglang-oai-chat"}[workload.protocol]
    # Chat prompts are text (a list would be taken for the messages); the others are the same token ids as ours.
    tokenized = [] if workload.protocol == "chat" else ["--tokenize-prompt"]
    argv = ["bench_serving", "--backend", backend, "--base-url", url, "--dataset-name", "random-ids", *tokenized,
            "--num-prompts", str(workload.num_prompts), "--random-input-len", str(workload.input_len),
            "--random-output-len", str(workload.output_len), "--random-range-ratio", str(workload.range_ratio),
            "--max-concurrency", str(workload.concurrency), "--request-rate", "inf",
            "--warmup-requests", str(workload.warmup), "--output-file", output_file, "--disable-tqdm"]
    if workload.flush_cache:
        argv.append("--flush-cache")
    seen: list[argparse.Namespace] = []
    # cli_main parses and hands the arguments to run_benchmark: caught there, before anything runs.
    real, saved_argv = mod.__dict__["run_benchmark"], sys.argv
    mod.__dict__["run_benchmark"] = seen.append
    sys.argv = argv
    try:
        mod.cli_main()
    finally:
        mod.__dict__["run_benchmark"] = real
        sys.argv = saved_argv
    return seen[0]


@contextlib.contextmanager
def _direct(url: str) -> Iterator[None]:
    """bench_serving's side calls (flush, server_info) go through `requests`, which follows http_proxy: a server on
    this machine is reached directly, as glm5 bench reaches it."""
    if not proxies.is_local(url):
        yield
        return
    host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
    saved = {k: os.environ.get(k) for k in ("no_proxy", "NO_PROXY")}
    for k, v in saved.items():
        os.environ[k] = f"{v},{host}" if v else host
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def run(url: str, workload: Workload, source: Source | None = None, quiet: bool = True) -> dict[str, Any]:
    """One closed-loop window by bench_serving against url, with glm5 bench's requests; its result dict."""
    src = source or load()
    mod = src.module
    with tempfile.TemporaryDirectory(prefix="glm5-bench-serving-") as tmp:
        args = _args(mod, url, workload, os.path.join(tmp, "out.jsonl"))
        mod.set_global_args(args)
        prompts: list[Any] = make_prompts(workload, workload.num_prompts)
        outs = output_lengths(workload, workload.num_prompts)
        extra: dict[str, Any] = {}
        if workload.dataset is not None:  # the prompt set's text, as glm5 bench sends it
            prompts = datasets.load(workload.dataset).take(workload.num_prompts)
            if workload.protocol == "chat":
                extra = {"chat_template_kwargs": {"enable_thinking": bool(workload.thinking)},
                         "stream_options": {"include_usage": True}}
        elif workload.protocol == "chat":
            # The words glm5 bench sends: the prompt less what the server's template adds, so both ask the same.
            with _direct(url):
                template = _template_tokens(url, workload)
            prompts = [prompt_text(p[:max(1, len(p) - template)]) for p in prompts]
            extra = {"chat_template_kwargs": {"enable_thinking": bool(workload.thinking)},
                     "stream_options": {"include_usage": True}}
        rows = [mod.DatasetRow(prompt=p, prompt_len=len(p) if not isinstance(p, str) else
                               len(p.split()) if workload.dataset else workload.input_len,
                               output_len=n) for p, n in zip(prompts, outs, strict=True)]
        api = url.rstrip("/") + {"sglang": "/generate", "openai": "/v1/completions",
                                 "chat": "/v1/chat/completions"}[workload.protocol]
        with _quiet(quiet), _direct(url):
            result = asyncio.run(mod.benchmark(
                backend=args.backend, api_url=api, base_url=url.rstrip("/"), model_id=args.model or "default",
                tokenizer=_Words(), input_requests=rows, request_rate=float("inf"),
                max_concurrency=workload.concurrency, disable_tqdm=True, lora_names=[],
                lora_request_distribution=None, lora_zipf_alpha=None, extra_request_body=extra, profile=False,
                flush_cache=workload.flush_cache, warmup_requests=workload.warmup))
    if not isinstance(result, dict) or "output_throughput" not in result:
        raise BenchError(f"bench_serving measured nothing against {url} (every request failed?)")
    return result


def figures(result: dict[str, Any], workload: Workload) -> dict[str, float]:
    """bench_serving's numeric results under glm5 bench's metric names (they are the same names), with `failed`."""
    out = {k: float(v) for k, v in result.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    out["failed"] = float(workload.num_prompts - out.get("completed", 0.0))
    return out


def errors(result: dict[str, Any], limit: int = 3) -> list[str]:
    """The distinct errors of failed requests, each as its last line (bench_serving keeps whole tracebacks)."""
    return distinct((str(e).strip().splitlines()[-1] if str(e).strip() else "" for e in result.get("errors") or []),
                    limit)


def record(result: dict[str, Any], workload: Workload, source: Source, details: bool = False) -> dict[str, Any]:
    """A JSON-ready record of one bench_serving run, shaped like glm5 bench's (--json)."""
    out: dict[str, Any] = {"client": "bench_serving", "source": source.described, "workload": asdict(workload),
                           "metrics": figures(result, workload), "errors": errors(result),
                           "server_info": result.get("server_info")}
    if details:
        out["records"] = {k: result.get(k) for k in ("input_lens", "output_lens", "ttfts", "itls", "errors")}
    return out
