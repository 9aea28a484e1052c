"""The emulator's command line: SGLang 0.5.23's real flag table plus `--sim-*` flags of its own.

The table (spec/sglang_flags.json) was read from the release wheel by scripts/extract_sglang_flags.py, so
the emulator accepts, abbreviates and rejects flags exactly as `sglang serve` does (argparse with
allow_abbrev: `--tp` resolves to `--tp-size`, `--pp` is ambiguous, `--cuda-graph-max-bs` is gone).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..spec.sglang import flag_table
from .profile import DEFAULT_PROFILE

log = logging.getLogger("sglang.sim")

_TYPES: dict[str, type] = {"int": int, "float": float, "str": str}
FAULT_KINDS = ("http500", "malformed-sse", "cut-stream")


class _Deprecated(argparse.Action):
    """SGLang's DeprecatedStoreTrueAction: stores True and warns on stderr."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        log.warning("The command line argument '%s' is deprecated and will be removed in future versions.",
                    option_string)
        setattr(namespace, self.dest, self.const if self.const is not None else True)


def _add_sglang_flags(parser: argparse.ArgumentParser) -> None:
    for opt in flag_table()["options"]:
        flags: list[str] = opt["flags"]
        kind = opt["action"]
        kw: dict[str, Any] = {"dest": opt["dest"], "default": opt["default"]}
        if kind == "_StoreTrueAction":
            parser.add_argument(*flags, action="store_true", **kw)
        elif kind == "BooleanOptionalAction":
            parser.add_argument(flags[0], action=argparse.BooleanOptionalAction, **kw)
        elif kind == "DeprecatedStoreTrueAction":
            parser.add_argument(*flags, action=_Deprecated, nargs=0, const=True, **kw)
        else:
            if opt["choices"] is not None:
                kw["choices"] = opt["choices"]
            if opt["type"] in _TYPES:
                kw["type"] = _TYPES[opt["type"]]
            if opt["nargs"] is not None:
                kw["nargs"] = opt["nargs"]
            parser.add_argument(*flags, **kw)


def _fault(text: str) -> tuple[str, float]:
    kind, _, rate = text.partition("=")
    if kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, got {kind!r}")
    try:
        p = float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"fault rate must be a number in [0, 1], got {rate!r}") from None
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"fault rate must be in [0, 1], got {p}")
    return kind, p


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _whole(text: str) -> float:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text}")
    return float(value)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1), got {text}")
    return value


def _env(env: Mapping[str, str], name: str, parse: Callable[[str], float], default: float, what: str) -> float:
    """A build's knob from its environment (a [build.X] env makes a slow or a wrong build); SystemExit on a bad one."""
    text = env.get(name, "")
    if not text:
        return default
    try:
        return parse(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise SystemExit(f"sglang serve: error: env {name} must be {what}, got {text!r}") from None


# A build's knobs: each a flag whose default a build's env sets (GLM5_SIM_ and the flag's name: a [build.X] env makes
# a slow, a wrong or a lossy build). (flag, kind, metavar, help): a factor (> 0, default 1), a fraction ([0, 1),
# default 0), a whole number (>= 0, default 0: off) or a switch.
BUILD_KNOBS: tuple[tuple[str, str, str, str], ...] = (
    ("--sim-slowdown", "factor", "F", "decode speed times F (0.8 = a 20%% slower decode), to inject a regression"),
    ("--sim-prefill-slowdown", "factor", "F", "prefill speed times F (0.5 = prefill twice as slow, decode as "
                                             "before): a regression of TTFT that throughput hides"),
    ("--sim-reasoning-scale", "factor", "F", "the model thinks F times as long (0.8 = 20%% shorter reasoning, which "
                                            "buys speed no user asked for)"),
    ("--sim-prefix-cache-broken", "switch", "", "the prefix cache never hits, radix cache on (a build that broke "
                                                "its matching)"),
    ("--sim-garbage", "fraction", "RATE", "replace each generated token by a random one with chance RATE, at full "
                                          "speed: a fast and wrong build"),
    ("--sim-garbage-late", "fraction", "RATE", "the same, only in the second half of each reply (where the answer "
                                               "is)"),
    ("--sim-nondeterminism", "fraction", "P", "a share P of requests diverges at one late token to a near-tie word, "
                                              "the answer kept (batch-variant kernels): no correctness alarm may "
                                              "follow"),
    ("--sim-changed-from", "whole", "N", "every reply longer than N words is changed from word N on, on every launch "
                                         "(a systematic late change)"),
    ("--sim-off-by-one", "switch", "", "every arithmetic answer is one more than the model's, all other text "
                                       "unchanged"),
    ("--sim-accept-drop", "fraction", "SHARE", "speculative decoding: each draft right with (1 - SHARE) times its "
                                               "chance, at the same step cost (a build that accepts fewer drafts)"),
    ("--sim-draft-slowdown", "factor", "F", "speculative decoding: draft passes at F times their speed (0.5 = "
                                            "twice as slow)"),
    ("--sim-lossy-verify", "fraction", "RATE", "speculative decoding: that share of accepted drafts is not the "
                                               "target model's token (a verify that accepts wrong drafts: fast and "
                                               "wrong)"),
)


def _add_knob(group: argparse._ArgumentGroup, env: Mapping[str, str], flag: str, kind: str, metavar: str,
              help_: str) -> None:
    name = "GLM5_SIM_" + flag[len("--sim-"):].replace("-", "_").upper()
    if kind == "switch":
        group.add_argument(flag, action="store_true", default=env.get(name, "") not in ("", "0"),
                           help=f"{help_}; default env {name}")
        return
    parse, default, what = {"factor": (_positive, 1.0, "a number > 0"), "fraction": (_fraction, 0.0,
                                                                                     "a fraction in [0, 1)"),
                            "whole": (_whole, 0.0, "a whole number >= 0")}[kind]
    value = _env(env, name, parse, default, what)
    group.add_argument(flag, type=int if kind == "whole" else parse,
                       default=int(value) if kind == "whole" else value, metavar=metavar,
                       help=f"{help_}; default env {name}, else {default:g}")


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """An argparse parser with SGLang's prog name and flags plus the sim's own; the GLM5_SIM_* defaults are read
    from `environ` (default: this process's), so a preflight sees a build's env as its launch will."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="sglang serve",
        description="pytest-glm5's emulator of an SGLang 0.5.23 server (HTTP API, performance, failures).",
    )
    _add_sglang_flags(parser)
    sim = parser.add_argument_group("emulator (not SGLang flags)")
    sim.add_argument("--sim-profile", default=DEFAULT_PROFILE,
                     help=f"performance profile: a bundled name or a TOML file (default {DEFAULT_PROFILE})")
    sim.add_argument("--sim-time-scale", type=_positive, default=1.0,
                     help="every modelled duration times S; 0.1 runs ten times faster")
    for flag, kind, metavar, help_ in BUILD_KNOBS:
        _add_knob(sim, env, flag, kind, metavar, help_)
    sim.add_argument("--sim-seed", type=int, default=None,
                     help="seed of the step noise, the faults and the launch's speed factor (unset: step noise and "
                          "faults use 0, and each launch draws its own factor, as real launches differ)")
    sim.add_argument("--sim-noise", type=_fraction, default=None, metavar="CV",
                     help="launch-to-launch CV: each launch draws one speed factor (median 1) that scales every "
                          "step, as GPU clocks, memory placement and kernel choices do (default: the profile's "
                          "[noise] launch_cv)")
    sim.add_argument("--sim-step-noise", type=_fraction, default=None, metavar="CV",
                     help="CV of step times within a launch, drifting AR(1) (default: the profile's [noise] cv)")
    sim.add_argument("--sim-startup-s", type=float, default=None,
                     help="model seconds to load weights (default from the profile)")
    sim.add_argument("--sim-warmup-s", type=float, default=None,
                     help="model seconds of the warmup before /ready, beside its one request (default from the "
                          "profile: glm5-sm120's 20 s are 10 s of a test at time scale 0.5)")
    sim.add_argument("--sim-max-chunk-rate", type=_positive, default=8000.0,
                     help="most stream chunks a second the emulator sends in all; past it, chunks carry more "
                          "tokens (token counts, TTFT and TPOT stay exact; ITL coarsens)")
    sim.add_argument("--sim-hang-after-tokens", type=int, default=None, metavar="N",
                     help="stop generating (HTTP stays up) once N tokens were generated: a hung scheduler")
    sim.add_argument("--sim-jit-pause-s", type=float, default=0.0, metavar="S",
                     help="pause S wall seconds, logging FlashInfer's JIT lines, the first time a decode batch is "
                          "larger than any before (a kernel compiled for a new shape)")
    sim.add_argument("--sim-require-model-path", action="store_true",
                     help="fail like SGLang when --model-path does not exist (the emulator needs no weights)")
    sim.add_argument("--sim-openai-strict", action="store_true",
                     help="answer /v1/completions like transformers serve: text prompts only (400), no fields "
                          "outside OpenAI's schema (422), no [DONE]")
    sim.add_argument("--sim-fault", type=_fault, action="append", default=[], metavar="KIND=P",
                     help=f"inject a fault into a fraction P of requests; KIND in {', '.join(FAULT_KINDS)}")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse like `sglang serve`: exit code 2 and argparse's message on a bad flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.model_path:
        parser.error("the following arguments are required: --model-path/--model")
    return args


def sglang_args(args: argparse.Namespace) -> dict[str, Any]:
    """The namespace without the emulator's own settings: what SGLang itself would have parsed."""
    return {k: v for k, v in vars(args).items() if not k.startswith("sim_")}
