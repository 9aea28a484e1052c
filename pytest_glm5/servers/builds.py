"""Builds: which Python (and so which SGLang, FlashInfer, torch) runs the engine, with what env and patches.

A build is config data, `[build.NAME]` in the configs file:

    [build.fusion]
    python = "/opt/sglang-fusion/bin/python"
    env = { SGLANG_ENABLE_JIT_DEEPGEMM = "0" }
    patches = ["patches/allreduce-fusion-sm120.diff"]

Its identity (engine and kernel versions, the git commit and dirty state of an editable SGLang, the patch files'
hash) joins the reuse fingerprint, the provenance and the report: a patched SGLang with an unchanged version
string is another build, and a kept server of the unpatched one is not reused for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..configs import ConfigError, read_toml
from .engines.base import EngineError, python_says

DEFAULT_BUILD = "default"
BUILD_KEYS = {"description", "python", "env", "patches"}
IDENTITY_PACKAGES = ("sglang", "sglang-kernel", "sgl-kernel", "flashinfer-python", "torch", "pytest-glm5")
# Run in the build's Python: package versions, and for an editable install its source checkout's commit and state.
IDENTITY_CODE = f"PACKAGES = {IDENTITY_PACKAGES!r}\n" + """
import json, subprocess, importlib.metadata as m
out = {}
for name in PACKAGES:
    try:
        dist = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    info = {"version": dist.version}
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        url = {}
    if url.get("dir_info", {}).get("editable") and url.get("url", "").startswith("file://"):
        src = url["url"][len("file://"):]
        try:
            head = subprocess.run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                  text=True, timeout=20).stdout.strip()
            dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=20).stdout.strip()
            if head:
                info["commit"] = head + ("+dirty" if dirty else "")
        except (OSError, subprocess.SubprocessError):
            pass
    out[name] = info
print(json.dumps(out, sort_keys=True))
"""


@dataclass(frozen=True)
class Build:
    """One build of the engine."""

    name: str
    python: str = ""  # '' = the engine's own default (for SGLang: the first Python that imports it)
    env: dict[str, str] = field(default_factory=dict)
    patches: tuple[str, ...] = ()
    description: str = ""

    def patch_hash(self, root: Path) -> str:
        """sha256 (12 hex digits) over the patch files' names and bytes; '' without patches."""
        if not self.patches:
            return ""
        h = hashlib.sha256()
        for name in self.patches:
            path = root / name
            try:
                h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
            except OSError as exc:
                raise EngineError(f"build {self.name}: cannot read patch {path}: {exc.strerror}") from None
        return h.hexdigest()[:12]


def load_builds(path: Path, build: str | None = None, ab: Sequence[str] | None = None) -> dict[str, Build]:
    """The `[build.NAME]` tables of a configs file, plus `default` (this Python) unless the file defines it; the
    builds --glm5-build and --glm5-ab name must be among them (ConfigError lists the known ones)."""
    data = read_toml(path) if path.exists() else {}
    builds: dict[str, Build] = {DEFAULT_BUILD: Build(DEFAULT_BUILD)}
    for name, table in data.get("build", {}).items():
        where = f"{path}: [build.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = sorted(set(table) - BUILD_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(BUILD_KEYS))}")
        python = table.get("python", "")
        env = table.get("env", {})
        patches = table.get("patches", [])
        if not isinstance(python, str) or ("python" in table and not python):
            raise ConfigError(f"{where}: python must be the path of the build's Python, got {python!r}")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ConfigError(f"{where}: env must be a table of strings, got {env!r}")
        if not isinstance(patches, list) or not all(isinstance(p, str) for p in patches):
            raise ConfigError(f"{where}: patches must be a list of file paths, got {patches!r}")
        builds[name] = Build(name, python, dict(env), tuple(patches), str(table.get("description", "")))
    if build:
        pick(builds, build, "--glm5-build", path)
    for name in ab or ():
        pick(builds, name, "--glm5-ab", path)
    return builds


def pick(builds: dict[str, Build], name: str, where: str, path: Path) -> Build:
    """A build by name; ConfigError lists the known ones."""
    if name not in builds:
        raise ConfigError(f"{where}: build {name!r} is not defined in {path}; known: {', '.join(builds)} (add a "
                          f"[build.{name}] table)")
    return builds[name]


_identities: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}


def identity(build: Build, root: Path) -> dict[str, Any]:
    """What the build is: its Python, package versions (and editable commits), env keys and patch hash. Once per
    build and run (one subprocess)."""
    key = (build.python, json.dumps(build.env, sort_keys=True), build.patches)
    if key not in _identities:
        text = python_says(build.python, IDENTITY_CODE, f"build {build.name}: {build.python} does not run Python "
                                                        "(set [build.NAME] python to a working interpreter)")
        packages = json.loads(text)
        _identities[key] = {"build": build.name, "python": build.python, "packages": packages,
                            "env": dict(sorted(build.env.items())), "patches": build.patch_hash(root)}
    return _identities[key]


def describe(ident: dict[str, Any]) -> str:
    """`sglang 0.5.23 (commit 1a2b3c4d5e6f+dirty), flashinfer-python 0.6.1, torch 2.9.1, patches 9f8e...`."""
    parts = []
    for name, info in ident.get("packages", {}).items():
        commit = f" (commit {info['commit']})" if info.get("commit") else ""
        parts.append(f"{name} {info.get('version', '?')}{commit}")
    if ident.get("patches"):
        parts.append(f"patches {ident['patches']}")
    if ident.get("env"):
        parts.append("env " + " ".join(f"{k}={v}" for k, v in ident["env"].items()))
    return ", ".join(parts) or "no engine packages found"
