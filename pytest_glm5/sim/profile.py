"""Performance profiles of the emulator: data files, resolved against a server's args into a model."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ..names import is_key

DEFAULT_PROFILE = "glm5-sm120"  # the emulated machine of a config that names none: the campaign's box


class ProfileError(Exception):
    """A profile that cannot be found or read."""


@dataclass(frozen=True)
class Failure:
    """How a config dies: in warmup, or under load once `running_at_least` requests run together."""

    phase: Literal["warmup", "load"]
    kind: str  # the fatal line's kind (servers' FATAL_PATTERNS name it back: cutlass_tile, cuda_oom, ...)
    exit_code: int = 1
    running_at_least: int = 0
    note: str = ""


@dataclass(frozen=True)
class Model:
    """A profile resolved for one set of server args: everything the scheduler needs."""

    name: str
    description: str
    model_type: str
    architecture: str
    vocab_size: int
    context_length: int
    eos_per_token: float
    gpu: dict[str, Any]
    load_s: float
    warmup_s: float
    decode_base_s: float
    decode_expert_s: float
    decode_token_s: float
    num_experts: int
    experts_per_token: int
    prefill_base_s: float
    prefill_token_s: float
    max_prefill_tokens: int
    kv_capacity_tokens: int
    max_running_requests: int
    noise_cv: float
    noise_correlation: float
    launch_cv: float = 0.0  # launch-to-launch CV of the speed factor drawn at start
    launch_factor: float = 1.0  # this launch's factor on every step time (> 1: slower)
    decode_factor: float = 1.0
    prefill_factor: float = 1.0
    decode_steps: int = 1
    failure: Failure | None = None
    failure_logs: dict[str, list[str]] = field(default_factory=dict)
    applied_rules: tuple[str, ...] = ()

    def experts_touched(self, batch: int) -> float:
        """Expected distinct experts that `batch` tokens route to."""
        e, k = self.num_experts, self.experts_per_token
        return e * (1.0 - (1.0 - k / e) ** batch)

    def decode_step_s(self, batch: int) -> float:
        """Model seconds of one decode step over `batch` running requests (one token each)."""
        return self.decoding(self.decode_base_s + self.decode_expert_s * self.experts_touched(batch)
                             + self.decode_token_s * batch)

    def decoding(self, raw_s: float) -> float:
        """Decode-phase seconds as this launch runs them (the build's decode speed, the launch's factor): a decode
        step's, a speculative draft pass's."""
        return raw_s * self.decode_factor * self.launch_factor

    def prefill_step_s(self, tokens: int) -> float:
        """Model seconds of one prefill step over `tokens` prompt tokens."""
        return (self.prefill_base_s + self.prefill_token_s * tokens) * self.prefill_factor * self.launch_factor


def bundled_profiles() -> list[str]:
    """Names of the profiles shipped with the emulator."""
    folder = resources.files("pytest_glm5.sim").joinpath("profiles")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_profile(name_or_path: str) -> dict[str, Any]:
    """Read a bundled profile by name, or a TOML file by path."""
    path = Path(name_or_path)
    try:
        if path.suffix == ".toml" or path.exists():
            text = path.read_text(encoding="utf-8")
        else:
            res = resources.files("pytest_glm5.sim").joinpath("profiles", f"{name_or_path}.toml")
            if not res.is_file():
                raise ProfileError(
                    f"unknown sim profile {name_or_path!r}; bundled: {', '.join(bundled_profiles())}; "
                    "or give a .toml path"
                )
            text = res.read_text()
        data: dict[str, Any] = tomllib.loads(text)
    except OSError as exc:
        raise ProfileError(f"cannot read sim profile {name_or_path}: {exc}") from None
    except UnicodeError as exc:
        raise ProfileError(f"sim profile {name_or_path} is not UTF-8 text: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"sim profile {name_or_path} is not valid TOML: {exc}") from None
    name = data.get("name")
    if not isinstance(name, str) or not is_key(name):
        # It names the baselines, answers and history files (sim-NAME-xSCALE): never a path.
        raise ProfileError(f"sim profile {name_or_path}: name {name!r} is not a key: use letters, digits and . _ + - "
                           "(it names the baselines directory sim-NAME-xSCALE)")
    return data


def _matches(when: dict[str, Any], args: dict[str, Any]) -> bool:
    return all(args.get(key) == value for key, value in when.items())


def resolve(profile: dict[str, Any], args: dict[str, Any], slowdown: float = 1.0, prefill_slowdown: float = 1.0,
            noise_cv: float | None = None, startup_s: float | None = None, launch_cv: float | None = None,
            warmup_s: float | None = None,
            launch_factor: float = 1.0) -> Model:
    """Apply a profile's rules to resolved SGLang args and the sim's knobs."""
    try:
        dec, pre, kv = profile["decode"], profile["prefill"], profile["kv"]
        decode_factor, prefill_factor, kv_factor = 1.0 / slowdown, 1.0 / prefill_slowdown, 1.0
        failure: Failure | None = None
        applied: list[str] = []
        for rule in profile.get("rule", []):
            if not _matches(rule.get("when", {}), args):
                continue
            applied.append(rule.get("note", str(rule.get("when"))))
            decode_factor *= float(rule.get("decode_factor", 1.0))
            prefill_factor *= float(rule.get("prefill_factor", 1.0))
            kv_factor *= float(rule.get("kv_factor", 1.0))
            if failure is None and "fail" in rule:
                f = rule["fail"]
                if f.get("phase") not in ("warmup", "load"):  # any other phase would never fail: say so
                    raise ProfileError(f"sim profile {profile.get('name')}: a rule's fail.phase must be warmup or "
                                       f"load, got {f.get('phase')!r} (rule: {applied[-1]})")
                failure = Failure(phase=f["phase"], kind=f["kind"], exit_code=int(f.get("exit_code", 1)),
                                  running_at_least=int(f.get("running_at_least", 0)), note=rule.get("note", ""))
        max_running = args.get("max_running_requests") or kv["default_max_running_requests"]
        max_prefill = args.get("max_prefill_tokens") or pre["max_prefill_tokens"]
        return Model(
            name=profile["name"],
            description=profile.get("description", ""),
            model_type=profile.get("model_type", "unknown"),
            architecture=profile.get("architecture", "unknown"),
            vocab_size=int(profile["vocab_size"]),
            context_length=int(args.get("context_length") or profile["context_length"]),
            eos_per_token=float(profile.get("eos_per_token", 0.0)),
            gpu=dict(profile.get("gpu", {})),
            load_s=float(startup_s if startup_s is not None else profile["startup"]["load_s"]),
            warmup_s=float(warmup_s if warmup_s is not None else profile["startup"]["warmup_s"]),
            decode_base_s=float(dec["base_s"]),
            decode_expert_s=float(dec["expert_s"]),
            decode_token_s=float(dec["token_s"]),
            num_experts=int(dec["num_experts"]),
            experts_per_token=int(dec["experts_per_token"]),
            prefill_base_s=float(pre["base_s"]),
            prefill_token_s=float(pre["token_s"]),
            max_prefill_tokens=int(max_prefill),
            kv_capacity_tokens=int(kv["capacity_tokens"] * kv_factor),
            max_running_requests=int(max_running),
            noise_cv=float(noise_cv if noise_cv is not None else profile.get("noise", {}).get("cv", 0.0)),
            noise_correlation=float(profile.get("noise", {}).get("correlation", 0.995)),
            launch_cv=float(launch_cv if launch_cv is not None else profile.get("noise", {}).get("launch_cv", 0.0)),
            launch_factor=launch_factor,
            decode_factor=decode_factor,
            prefill_factor=prefill_factor,
            decode_steps=max(1, int(args.get("num_continuous_decode_steps") or 1)),
            failure=failure,
            failure_logs={k: list(v) for k, v in profile.get("failure_logs", {}).items()},
            applied_rules=tuple(applied),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"sim profile {profile.get('name', '?')} is missing or has a bad value: {exc}") from None
