"""Named server configs (suites/configs.toml): engine, model, flags, env, known issue; argv and fingerprint."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .textfiles import read_utf8

CONFIG_KEYS = {"description", "engine", "model", "flags", "env", "known_issue", "known_issue_phase",
               "known_issue_concurrency", "known_issue_match", "sim_profile", "protocol", "sweep", "compare_to",
               "expected_slower", "gpus", "production"}
DEFAULT_KEYS = CONFIG_KEYS - {"description", "known_issue", "known_issue_phase", "known_issue_concurrency",
                              "known_issue_match", "expected_slower", "gpus", "production"}
# The marker of a production cell (chat, shared prefixes, long inputs, a trace, capacity at an SLO): it runs only on
# the configs that say `production = true`, the candidates to serve, since every cell costs minutes of each launch.
PRODUCTION_MARKER = "production"
# The marker of a speculative cell (natural text, acceptance): it runs on the configs that decode speculatively and on
# the configs they compare to, so a speculative config and its lossless reference are judged on the same text.
SPECULATIVE_MARKER = "speculative"
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")  # a config name is a file-name part (logs) and a TOML key (baselines)
PHASES = ("startup", "load")


class ConfigError(Exception):
    """A configs file that cannot be used; the message names the file, the table and the key."""


@dataclass(frozen=True)
class ServerConfig:
    """One named server shape."""

    name: str
    engine: str = "sglang"
    model: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    known_issue: str | None = None
    known_issue_phase: str = "startup"
    known_issue_concurrency: int = 0
    sim_profile: str | None = None
    protocol: str | None = None  # default: the engine's (sglang native, or openai for llama.cpp)
    sweep: list[int] | None = None
    known_issue_match: str | None = None  # regex the failure's text must match for the strict xfail to hold
    compare_to: str | None = None  # the reference config whose values of the same run this one is judged against
    expected_slower: bool = False  # a known cost: slower than compare_to is listed, not failed
    gpus: int | None = None  # GPUs its server uses, where the engine's flags do not say (leases.py)
    production: bool = False  # a candidate to serve: the suite's production cells run on it too

    @property
    def speculative(self) -> bool:
        """Decodes speculatively (`speculative-algorithm` among its flags)."""
        return any(k.lstrip("-") == "speculative-algorithm" and v not in (None, False) for k, v in self.flags.items())

    @property
    def lossless_reference(self) -> str:
        """The config whose replies this one's must equal under greedy decoding: a speculative config's compare_to
        (the same model without drafts), else itself."""
        return self.compare_to if self.speculative and self.compare_to else self.name

    def issue_at(self, concurrency: int | None) -> str | None:
        """The known issue a test of this config at this concurrency hits (it must fail: strict xfail), or None."""
        if not self.known_issue or self.known_issue_phase == "startup" or not self.known_issue_concurrency:
            return self.known_issue or None
        return self.known_issue if concurrency is not None and concurrency >= self.known_issue_concurrency else None

    def flag_argv(self) -> list[str]:
        """The flags as command-line words: `{tp-size = 8, disable-cuda-graph = true}` -> --tp-size 8 ..."""
        argv: list[str] = []
        for key, value in self.flags.items():
            flag = key if key.startswith("-") else f"--{key}"
            if value is True:
                argv.append(flag)
            elif value is False or value is None:
                continue
            elif isinstance(value, list):
                argv += [flag, *(str(v) for v in value)]
            else:
                argv += [flag, str(value)]
        return argv

    def fingerprint(self, engine_version: str, model: str, extra: dict[str, Any] | None = None) -> str:
        """Identity for reuse: engine, its version, model, flags and env (12 hex digits)."""
        ident = {"engine": self.engine, "version": engine_version, "model": model, "flags": self.flag_argv(),
                 "env": dict(sorted(self.env.items())), **(extra or {})}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def _check_table(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    types: dict[str, type | tuple[type, ...]] = {
        "description": str, "engine": str, "model": str, "flags": dict, "env": dict, "known_issue": str,
        "known_issue_phase": str, "known_issue_concurrency": int, "sim_profile": str, "protocol": str,
        "sweep": list, "known_issue_match": str, "compare_to": str, "expected_slower": bool, "gpus": int,
        "production": bool}
    for key, value in table.items():
        if not isinstance(value, types[key]):
            raise ConfigError(f"{where}: key {key!r} must be a {getattr(types[key], '__name__', types[key])}, "
                              f"got {type(value).__name__} {value!r}")
    if "known_issue_match" in table:
        try:
            re.compile(table["known_issue_match"])
        except re.error as exc:
            raise ConfigError(f"{where}: known_issue_match is not a valid regex: {exc}") from None
    if "known_issue_phase" in table and table["known_issue_phase"] not in PHASES:
        raise ConfigError(f"{where}: known_issue_phase must be one of {', '.join(PHASES)}")
    if "gpus" in table and (isinstance(table["gpus"], bool) or table["gpus"] < 1):
        raise ConfigError(f"{where}: gpus must be a whole number of GPUs >= 1, got {table['gpus']!r}")
    if "sweep" in table and not all(isinstance(c, int) and c > 0 for c in table["sweep"]):
        raise ConfigError(f"{where}: sweep must be a list of positive concurrencies, got {table['sweep']!r}")
    for k, v in table.get("env", {}).items():
        if not isinstance(v, str):
            raise ConfigError(f"{where}: env {k!r} must be a string, got {v!r}")
    for k, v in table.get("flags", {}).items():
        if not isinstance(v, str | int | float | bool | list):
            raise ConfigError(f"{where}: flag {k!r} has an unsupported value {v!r}")


def read_toml(path: Path) -> dict[str, Any]:
    """The configs file as TOML data; ConfigError names the file and the problem."""
    try:
        data = tomllib.loads(read_utf8(path))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configs file not found (set --glm5-configs or ini glm5_configs)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configs file: {exc.strerror}") from None
    unknown = sorted(set(data) - {"defaults", "config", "build"})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key {unknown[0]!r}; expected [defaults], [config.NAME] and "
                          "[build.NAME]")
    return data


def load_configs(path: Path, engines: Collection[str] = ()) -> dict[str, ServerConfig]:
    """Read and validate a configs file (each `engine` one of `engines`, where given: the registry's names);
    ConfigError names the file, line, table and key of a problem."""
    data = read_toml(path)
    defaults = data.get("defaults", {})
    _check_table(f"{path}: [defaults]", defaults, DEFAULT_KEYS)
    out: dict[str, ServerConfig] = {}
    for name, table in data.get("config", {}).items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: config.{name} must be a table")
        if not NAME_RE.match(name):
            raise ConfigError(f"{path}: config name {name!r} may hold only letters, digits, '_', '.' and '-' (it "
                              "names log files and baselines tables); rename the [config.NAME] table")
        _check_table(f"{path}: [config.{name}]", table, CONFIG_KEYS)
        if engines and "engine" in table and table["engine"] not in engines:
            raise ConfigError(f"{path}: [config.{name}]: engine {table['engine']!r} is not one of "
                              f"{', '.join(engines)}")
        merged = {**defaults, **table}
        merged["flags"] = {**defaults.get("flags", {}), **table.get("flags", {})}
        merged["env"] = {**defaults.get("env", {}), **table.get("env", {})}
        out[name] = ServerConfig(name=name, **merged)
    if not out:
        raise ConfigError(f"{path}: no [config.NAME] tables")
    for name, cfg in out.items():
        if cfg.compare_to is not None and cfg.compare_to != name and cfg.compare_to not in out:
            raise ConfigError(f"{path}: [config.{name}]: compare_to {cfg.compare_to!r} is not a config; known: "
                              f"{', '.join(out)}")
        if cfg.speculative and (cfg.compare_to in (None, name) or out[str(cfg.compare_to)].speculative):
            raise ConfigError(f"{path}: [config.{name}]: a speculative config compares to the same model without "
                              "speculative decoding (its replies must equal that one's under greedy decoding): set "
                              f"compare_to to such a config, got {cfg.compare_to!r}")
    return out


def configs_for(configs: dict[str, ServerConfig], markers: Collection[str]) -> list[str]:
    """The configs a test of these markers runs on: all; for a production cell those with `production = true`; for
    a speculative cell the speculative configs and the configs they compare to."""
    references = {c.compare_to for c in configs.values() if c.speculative}
    return [n for n, c in configs.items()
            if (c.production or PRODUCTION_MARKER not in markers)
            and (c.speculative or n in references or SPECULATIVE_MARKER not in markers)]
