"""Every setting of the plugin once: name, default, where it may come from, and its check.

A value comes from the command line, else the ini file, else the environment (where one is named), else the
suite's defaults (the root conftest's `pytest_glm5_suite` hook), else the default here. A bad value is a
SettingsError that names where it came from (`--glm5-stall-timeout`, `ini glm5_stall_timeout in pyproject.toml`,
`env GLM5_MODEL_PATH`, `suite default glm5-sim-time-scale in conftest.py`), as pytest-timeout's
`_validate_timeout` does.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .names import is_key

DEFAULT_CONFIGS = Path("suites") / "configs.toml"
DEFAULT_BASELINES = Path("baselines")
SIM_DEFAULT_MODEL = "/models/GLM-5-NVFP4"


class SettingsError(Exception):
    """A setting with a bad value; the message names the source and the fix."""


def _positive(value: str) -> float:
    return _number_in(value, lambda x: 0 < x < float("inf"), "must be a number > 0")


def _fraction(value: str) -> float:
    return _number_in(value, lambda x: 0 <= x < 1, "must be a fraction from 0 up to (not including) 1")


def generated_set(value: str) -> tuple[int, int] | None:
    """`generated:N[:SEED]` as (N, SEED) (None: a file's path, not a generated set); ValueError when malformed."""
    if not value.startswith("generated:"):
        return None
    parts = value.split(":")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[1:]) or int(parts[1]) < 1:
        raise ValueError("must be generated:N or generated:N:SEED with N >= 1 (e.g. generated:400), or a GSM8K "
                         "JSONL file")
    return int(parts[1]), int(parts[2]) if len(parts) == 3 else 0


def _accuracy_set(value: str) -> str:
    generated_set(value)
    return value


def _non_negative(value: str) -> float:
    return _number_in(value, lambda x: 0 <= x < float("inf"), "must be a number >= 0")


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError("must be a whole number >= 1") from None
    if number < 1:
        raise ValueError("must be a whole number >= 1")
    return number


MAX_LAUNCHES = 100  # a night holds 8 hours: more launches of one series than this is a typo, not a plan


def _launches(value: str) -> int:
    number = _count(value)
    if number > MAX_LAUNCHES:
        raise ValueError(f"must be a whole number from 1 to {MAX_LAUNCHES} (each is a server launch)")
    return number


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(h|m|min|s)?\s*$")
MAX_DURATION_S = 366 * 24 * 3600.0  # a budget beyond a year is a typo, not a plan


def parse_duration(text: str) -> float:
    """`8h`, `90m`, `45min`, `3600s` or `3600` (seconds) -> seconds; ValueError naming the forms."""
    m = _DURATION_RE.match(text)
    if m is None:
        raise ValueError("is not a duration: write 8h, 90m, 45min, 3600s or 3600 (seconds), digits and a unit")
    seconds = float(m.group(1)) * {"h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, None: 1.0}[m.group(2)]
    if not 0 < seconds <= MAX_DURATION_S:
        raise ValueError("must be a duration above 0 and at most a year, e.g. 8h or 90m")
    return seconds


def parse_hardware(value: str) -> str:
    """A hardware key: one directory name under baselines/ (`8x-rtx-pro-6000-blackwell-sm120`); ValueError for a
    value that would make another path (`..`, `a/b`) or is no name (spaces, newlines)."""
    if not is_key(value):
        raise ValueError("is not a hardware key: use letters, digits and . _ + - (one directory name under "
                         "baselines/, e.g. 8x-rtx-pro-6000-blackwell-sm120)")
    return value


def _number_in(value: str, ok: Callable[[float], bool], message: str) -> float:
    """A number `ok` accepts; ValueError with `message` for anything else (text, nan, out of range)."""
    try:
        number = float(value)
    except ValueError:
        raise ValueError(message) from None
    if not ok(number):
        raise ValueError(message)
    return number


def parse_effect(value: str) -> float:
    """The smallest change worth finding, in (0, 1); ValueError saying so (0 could never be ruled out)."""
    return _number_in(value, lambda x: 0 < x < 1,
                      "must be a fraction in (0, 1), e.g. 0.05: a change of 0 can never be ruled out")


def parse_alpha(value: str) -> float:
    """A false-alarm rate in (0, 0.5); ValueError saying so."""
    return _number_in(value, lambda x: 0 < x < 0.5, "must be a probability in (0, 0.5), e.g. 0.01")


def parse_fraction(value: str) -> float:
    """A fraction in [0, 1); ValueError saying so."""
    return _number_in(value, lambda x: 0 <= x < 1, "must be a fraction in [0, 1), e.g. 0.02")


def parse_target(value: str) -> float:
    """An SLO's target: the share of requests within it, strictly between 0 and 1; ValueError saying so."""
    return _number_in(value, lambda x: 0 < x < 1, "must be a share strictly between 0 and 1, e.g. 0.95 for 95%")


def parse_ratio(value: str) -> float:
    """A number in [0, 1] (bench_serving's range ratio: 1 = fixed lengths); ValueError saying so."""
    return _number_in(value, lambda x: 0 <= x <= 1, "must be a number in [0, 1] (1 = fixed lengths)")


def parse_ab(value: str) -> tuple[str, str]:
    """`base,patched`: two build names."""
    names = [n.strip() for n in value.split(",")]
    if len(names) != 2 or not all(names):
        raise ValueError("must be two build names, A,B (e.g. base,patched)")
    return names[0], names[1]  # A,A is allowed: an A/A run measures the gate's own false-alarm rate


def parse_shard(value: str) -> tuple[int, int]:
    """`I/N` of --glm5-shard, with 1 <= I <= N; ValueError saying so."""
    i, sep, n = value.partition("/")
    try:
        index, count = int(i), int(n)
    except ValueError:
        index, count = 0, 0
    if not sep or count < 1 or not 1 <= index <= count:
        raise ValueError("must be I/N with 1 <= I <= N, e.g. 1/4")
    return index, count


EXPORT_FORMATS = ("customBiggerIsBetter", "customSmallerIsBetter", "bencher", "pytest-benchmark")


def parse_export(value: str) -> tuple[str, str]:
    """`FORMAT:PATH` of --glm5-export; ValueError naming the formats."""
    fmt, sep, path = value.partition(":")
    if not sep or fmt not in EXPORT_FORMATS or not path:
        raise ValueError(f"must be FORMAT:PATH with FORMAT one of {', '.join(EXPORT_FORMATS)} (e.g. "
                         "bencher:bmf.json)")
    return fmt, path


def parse_url(value: str) -> str:
    """A server's base URL (http or https, with a host); ValueError saying what is wrong."""
    parsed = urllib.parse.urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("is not a URL: give the server's base URL, e.g. http://127.0.0.1:30000")
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError("has a port that is not a number") from None
    return value.rstrip("/")


EVENT_LOOPS = ("uvloop", "asyncio")  # GLM5_EVENT_LOOP: the load client's event loop (uvloop where installed)


def event_loop(env: Mapping[str, str]) -> str:
    """GLM5_EVENT_LOOP's value (uvloop when unset); ValueError naming the variable and the choices."""
    value = env.get("GLM5_EVENT_LOOP", "") or "uvloop"
    if value not in EVENT_LOOPS:
        raise ValueError(f"env GLM5_EVENT_LOOP={value!r} is not an event loop the load client knows: give "
                         f"{' or '.join(EVENT_LOOPS)} (uvloop, the default, halves the client's CPU per token), or "
                         "unset it")
    return value


@dataclass(frozen=True)
class Setting:
    """One option: its command-line flag, ini twin, environment variable, default and check."""

    name: str  # the flag without dashes, e.g. "glm5-stall-timeout"
    help: str
    default: Any = None
    ini: bool = True
    env: str | None = None
    parse: Callable[[str], Any] | None = None  # None: kept as text
    flag: bool = False  # store_true, command line only
    argparse: dict[str, Any] = field(default_factory=dict)
    path: bool = False  # its value names a file or directory (the rootdir guard watches it)

    @property
    def dest(self) -> str:
        """The attribute name on pytest's option namespace and in the ini file."""
        return self.name.replace("-", "_")


SETTINGS: tuple[Setting, ...] = (
    Setting("glm5-configs", "server configs file (default suites/configs.toml under the rootdir)", path=True),
    Setting("glm5-model-path", "model path for configs without their own (also env GLM5_MODEL_PATH)",
            env="GLM5_MODEL_PATH", path=True),
    Setting("glm5-sim", "run every config on the SGLang emulator", flag=True, ini=False),
    Setting("glm5-sim-profile", "emulator profile name or TOML file (default: the config's, else glm5-sm120)",
            path=True),
    Setting("glm5-sim-time-scale", "emulator time scale (0.1 runs ten times faster; default 1)", 1.0,
            parse=_positive),
    Setting("glm5-sim-slowdown", "emulated decode speed times F (0.8 injects a 20%% regression)", 1.0,
            parse=_positive, ini=False),
    Setting("glm5-sim-garbage", "emulated tokens replaced by random ones at this rate, at full speed: a fast and "
            "wrong build (default 0)", 0.0, parse=_fraction, ini=False),
    Setting("glm5-sim-startup-s", "emulated model-load seconds (default: the profile's)", parse=_non_negative),
    Setting("glm5-log-dir", "where server logs go (default: glm5-logs under pytest's basetemp)", path=True),
    Setting("glm5-startup-timeout", "seconds a server may take to become ready (default 3600)", 3600.0,
            parse=_positive),
    Setting("glm5-stop-timeout", "seconds between SIGTERM and SIGKILL when stopping a server (default 60)", 60.0,
            parse=_positive),
    Setting("glm5-keep-servers", "leave the run's last server running and reuse it next run if its config matches",
            flag=True, ini=False),
    Setting("glm5-stop-servers", "stop servers kept by earlier runs, then exit", flag=True, ini=False),
    Setting("glm5-exclusive", "run every config alone on the machine: its GPU lease takes every GPU (always so "
            "with --update-baselines: a baseline is measured with no other server beside it)", flag=True, ini=False),
    Setting("glm5-lease-dir", "where the GPU leases of this machine are kept, shared by every run and worker "
            "(default: pytest-glm5-leases-UID in the temp dir; a group-writable directory shares the GPUs between "
            "users)", env="GLM5_LEASE_DIR", path=True),
    Setting("sglang-url", "use this running server for every config; never stop it", ini=False, parse=parse_url),
    Setting("glm5-strict", "fail (not skip) when an external server's args differ from the config", flag=True,
            ini=False),
    Setting("glm5-report", "write a JSON report of servers and results here", ini=False, path=True),
    Setting("glm5-html", "write the run as one self-contained HTML page here (verdicts, plots, history)", ini=False,
            path=True),
    Setting("glm5-markdown", "write the run's markdown summary here (also appended to $GITHUB_STEP_SUMMARY when "
            "that is set)", ini=False, path=True),
    Setting("glm5-history", "append every run to the history in this directory (one store per hardware and "
            "model); the page and `glm5 history DIR` show trends and change points", path=True),
    Setting("glm5-export", "also write FORMAT:PATH, FORMAT one of customBiggerIsBetter, customSmallerIsBetter "
            "(github-action-benchmark), bencher (BMF), pytest-benchmark; repeatable", ini=False,
            parse=parse_export, argparse={"action": "append"}, path=True),
    Setting("glm5-stall-timeout", "seconds without a token from any request that make a load run a hang "
            "(default 120)", 120.0, parse=_positive),
    Setting("glm5-relaunch-after-crash", "relaunch a crashed server once instead of failing the config's "
            "remaining tests", flag=True, ini=False),
    Setting("update-baselines", "record measured medians: new metrics and improvements; =all also lowers regressed "
            "bounds", ini=False, argparse={"nargs": "?", "const": "new", "choices": ("new", "all")}),
    Setting("glm5-baselines", "baselines directory (default baselines/ under the rootdir)", path=True),
    Setting("glm5-hardware", "hardware key of the baselines (needed with a remote --sglang-url), e.g. "
            "8x-rtx-pro-6000-blackwell-sm120", ini=False, parse=parse_hardware),
    Setting("glm5-strict-baselines", "fail metrics that have no baseline yet (for CI gates)", flag=True, ini=False),
    Setting("glm5-require-baselines", "fail a config whose baselines file holds nothing for it at all (on by "
            "default where env CI is true: a gate that found no baselines has switched itself off)", flag=True,
            ini=False, env="CI", parse=lambda v: v.strip().lower() in ("1", "true", "yes", "on")),
    Setting("glm5-repeats", "repeat each scenario N times (default: the suite's per-scenario value)",
            parse=_count),
    Setting("glm5-sim-noise", "emulator launch-to-launch CV (each launch draws one speed factor; default: the "
            "profile's)", parse=parse_fraction),
    Setting("glm5-alpha", "false-alarm rate per series of a statistical verdict; across the run the chance of any "
            "false alarm is held to it (each config one test, Holm across the configs; default 0.01)", 0.01,
            parse=parse_alpha),
    Setting("glm5-effect", "the smallest change the gate must find: SAME rules it out, 'unresolved' says how many "
            "launches would find it (default 0.05)", 0.05, parse=parse_effect),
    Setting("glm5-max-repeats", "launches a series may get while its verdict is inconclusive, each a fresh server "
            "launch, with alpha spending over the looks (default: 5 new launches; under --glm5-ab 8 per arm); with "
            "--update-baselines it also bounds recording (default: up to 12 launches)", parse=_launches),
    Setting("glm5-launches", "measure every scenario on N server launches (record a reference with "
            "--update-baselines --glm5-launches 5)", 1, parse=_launches),
    Setting("glm5-build", "run every config on this build of the configs file's [build.NAME] tables", ini=False),
    Setting("glm5-shard", "run shard I of N (I/N): a deterministic split by config, balanced by each config's "
            "duration in the last run; join the shards' --glm5-report files with `glm5 merge`", ini=False,
            parse=parse_shard),
    Setting("glm5-ab", "A/B patch gate: run each scenario on builds A and B in ABBA blocks and judge B against A "
            "(SAME / DIFFERENT / UNKNOWN); no baselines needed", ini=False, parse=parse_ab),
    Setting("glm5-budget", "bound the run's time on the box, e.g. 8h or 90m: rounds (extra launches) run only "
            "while they fit after the first launches of the configs not yet run", parse=parse_duration),
    Setting("glm5-no-canary", "skip the canary (16 greedy prompts on every launch before its load, compared with "
            "the replies recorded with the baselines)", flag=True, ini=False),
    Setting("glm5-accuracy-set", "paired accuracy test on each config's first launch: generated:N[:SEED] (arithmetic "
            "word problems, no download) or a GSM8K JSONL file (default: the suite's, else none)",
            parse=_accuracy_set, path=True),
    Setting("glm5-no-accuracy", "skip the accuracy set, whatever the suite or an option names: the canary alone "
            "checks the answers, and the outcome line says so", flag=True, ini=False),
    Setting("glm5-plan", "print the run's plan (configs, launches, estimated time on this box) and launch nothing",
            flag=True, ini=False),
)
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Sources:
    """Where values can come from: the command line, the ini file, the environment, the suite's defaults."""

    option: Callable[[str], Any]  # dest -> value or None
    ini: Callable[[str], Any]  # dest -> value or None/""
    ini_file: str = "the ini file"
    overrides: frozenset[str] = frozenset()  # ini keys given with pytest's -o/--override-ini
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    suite: Mapping[str, Any] = field(default_factory=dict)
    suite_file: str = "conftest.py"


@dataclass(frozen=True)
class Resolved:
    """One setting's value and where it came from."""

    value: Any
    source: str


class _Resolver:
    """Each setting's value and source, by name: the table resolved once (Settings holds it typed)."""

    def __init__(self, sources: Sources) -> None:
        self.values: dict[str, Resolved] = {}
        unknown = sorted(set(sources.suite) - set(BY_NAME))
        if unknown:
            raise SettingsError(f"{sources.suite_file}: pytest_glm5_suite gives default {unknown[0]!r}, which is not "
                                f"a setting; known: {', '.join(BY_NAME)}")
        for s in SETTINGS:
            self.values[s.name] = self._resolve(s, sources)

    @staticmethod
    def _resolve(s: Setting, src: Sources) -> Resolved:
        candidates: list[tuple[Any, str]] = [(src.option(s.dest), f"--{s.name}")]
        if s.ini:
            candidates.append((src.ini(s.dest), f"-o {s.dest}" if s.dest in src.overrides else
                               f"ini {s.dest} in {src.ini_file}"))
        if s.env:
            candidates.append((src.env.get(s.env), f"env {s.env}"))
        candidates.append((src.suite.get(s.name), f"suite default {s.name} in {src.suite_file}"))
        for value, where in candidates:
            if value == "" and where.startswith("--"):
                # `--glm5-html=` (a shell variable that was empty) must not silently write nothing.
                raise SettingsError(f"{where} = '' is empty: give a value or leave the option out")
            if value is None or value == "" or (s.flag and value is False):
                continue
            if s.parse is None or isinstance(value, bool):
                return Resolved(value, where)
            parsed = []
            for one in value if isinstance(value, list) else [value]:  # a repeatable option: each value
                try:
                    parsed.append(s.parse(str(one).strip()))
                except ValueError as exc:
                    reason = str(exc) if str(exc).startswith(("must", "is", "has")) else "must be a number > 0"
                    raise SettingsError(f"{where} = {one!r} {reason}") from None
            return Resolved(parsed if isinstance(value, list) else parsed[0], where)
        return Resolved(s.default, "default")

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    def source(self, name: str) -> str:
        """Where a setting's value came from."""
        return self.values[name].source



@dataclass(frozen=True)
class Settings:
    """Every setting of the run, typed and frozen, with the paths derived from them; built once by `resolve`."""

    rootdir: Path
    invocation_dir: Path
    sources: Mapping[str, str]  # setting name -> where its value came from
    configs: str | None = None
    model_path: str | None = None
    sim: bool = False
    sim_profile: str | None = None
    sim_time_scale: float = 1.0
    sim_slowdown: float = 1.0
    sim_startup_s: float | None = None
    sim_garbage: float = 0.0
    log_dir: str | None = None
    startup_timeout: float = 3600.0
    stop_timeout: float = 60.0
    keep_servers: bool = False
    stop_servers: bool = False
    exclusive: bool = False
    lease_dir: str | None = None
    sglang_url: str | None = None
    strict: bool = False
    report: str | None = None
    html: str | None = None
    markdown: str | None = None
    history: str | None = None
    export: tuple[tuple[str, str], ...] = ()
    stall_timeout: float = 120.0
    relaunch_after_crash: bool = False
    update_baselines: str | None = None
    baselines: str | None = None
    hardware: str | None = None
    strict_baselines: bool = False
    require_baselines: bool = False
    repeats: int | None = None
    sim_noise: float | None = None
    alpha: float = 0.01
    effect: float = 0.05
    max_repeats: int | None = None
    launches: int = 1
    build: str | None = None
    shard: tuple[int, int] | None = None
    ab: tuple[str, str] | None = None
    budget: float | None = None  # seconds
    plan: bool = False
    no_canary: bool = False
    accuracy_set: str | None = None
    no_accuracy: bool = False

    @classmethod
    def resolve(cls, sources: Sources, rootdir: Path, invocation_dir: Path) -> Settings:
        """Every setting from its sources, checked (a log or lease directory that cannot be written is an
        error now, not after a model load); SettingsError names the source of a bad value."""
        r = _Resolver(sources)
        try:
            event_loop(sources.env)  # now, not at the first measurement after a model load
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        values = {field_name(s): r[s.name] for s in SETTINGS}
        values["export"] = tuple(tuple(e) for e in values["export"] or ())
        for flag in (s for s in SETTINGS if s.flag):
            values[field_name(flag)] = bool(values[field_name(flag)])
        out = cls(rootdir=rootdir, invocation_dir=invocation_dir,
                  sources={s.name: r.source(s.name) for s in SETTINGS}, **values)
        if out.log_dir is not None:
            check_writable_dir(Path(out.log_dir), f"server log directory ({out.source('glm5-log-dir')})")
        if out.lease_dir is not None:
            check_creatable_dir(Path(out.lease_dir), f"GPU lease directory ({out.source('glm5-lease-dir')})")
        return out

    def source(self, name: str) -> str:
        """Where a setting's value came from (`--glm5-alpha`, `ini glm5_alpha in tox.ini`, `default`)."""
        return self.sources.get(name, "default")

    @property
    def configs_path(self) -> Path:
        """The server configs file."""
        return resolve_path(self.configs, DEFAULT_CONFIGS, self.rootdir, self.invocation_dir)

    @property
    def baselines_root(self) -> Path:
        """The baselines directory."""
        return resolve_path(self.baselines, DEFAULT_BASELINES, self.rootdir, self.invocation_dir)

    @property
    def model(self) -> str | None:
        """The model of configs without their own: --glm5-model-path, else the emulator's default under --glm5-sim."""
        return self.model_path or (SIM_DEFAULT_MODEL if self.sim else None)

    @property
    def build_name(self) -> str:
        """The build every config runs on (A's under --glm5-ab)."""
        return self.ab[0] if self.ab else self.build or "default"

    @property
    def external(self) -> bool:
        """Every config is served by a running server the run did not start (--sglang-url)."""
        return self.sglang_url is not None


def field_name(s: Setting) -> str:
    """A setting's attribute on Settings: its dest without the `glm5_` prefix."""
    return s.dest.removeprefix("glm5_")


PATH_OPTIONS = tuple(f"--{s.name}" for s in SETTINGS if s.path)


def rootdir_trap(args: list[str], here: Path, root: Path) -> str | None:
    """pytest picks its rootdir before it knows a plugin's options, so the value of `--glm5-history /tmp/h` (an
    existing path, written as a separate word) counts as a test path: the rootdir, and with it the configs and
    baselines, move there. The message that says so, with the fix; None when no path option was taken so."""
    for opt, value in itertools.pairwise(args):
        path = (here / value).resolve()
        # An existing path outside the invocation directory: pytest looked for the ini file from there, not here.
        if opt in PATH_OPTIONS and path.exists() and here != path and here not in path.parents:
            return (f"pytest took the value of {opt} {value} for a test path and chose rootdir {root} (it picks the "
                    f"rootdir before plugins' options are known), so its ini file and configs were not found; write "
                    f"{opt}={value} (with '=')")
    return None


def resolve_path(given: str | None, default: Path, rootdir: Path, invocation_dir: Path) -> Path:
    """A path setting: as given (relative to where pytest was invoked), else the default under the rootdir."""
    if given is None:
        return rootdir / default
    path = Path(given).expanduser()
    return path if path.is_absolute() else invocation_dir / path


def check_writable_dir(path: Path, what: str) -> None:
    """Create the directory if needed and prove a file can be written there; SettingsError otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"{what} {path} cannot be created or written to: {exc.strerror or exc}; pick another "
                            "directory") from None
    _probe(path, what, path)


def _probe(directory: Path, what: str, path: Path) -> None:
    """A real write in `directory` (access() says yes to root even where nothing can be created, as in /proc)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".glm5-write-check-"):
            pass
    except OSError as exc:
        raise SettingsError(f"{what} {path} cannot be created or written to: {exc.strerror or exc}; pick another "
                            "directory") from None


def check_creatable_dir(path: Path, what: str) -> None:
    """A directory that will be written later: it, or the nearest part of its path that exists, must take a new
    file (nothing is created now, so a --collect-only run leaves no trace)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise SettingsError(f"{what} {path} cannot be created: {probe} is not a directory; pick another directory")
    _probe(probe, what, path)


def check_writable_file(path: Path, what: str) -> None:
    """An output file's directory must exist and take a new file (checked before anything runs)."""
    if path.is_dir():
        raise SettingsError(f"{what} {path} is a directory; give a file path")
    parent = path.parent
    if not parent.is_dir():
        probe = parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise SettingsError(f"{what} {path}: {probe} is a file, not a directory; pick another path")
        raise SettingsError(f"{what} {path}: directory {parent} does not exist; create it or pick another path")
    try:  # A real write: access() says yes to root even where nothing can be created (/proc, read-only mounts).
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".glm5-write-check-"):
            pass
    except OSError as exc:
        raise SettingsError(f"{what} {path} cannot be written: {exc.strerror or exc}; pick another path") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise SettingsError(f"{what} {path} cannot be written (permission denied); pick another path")
