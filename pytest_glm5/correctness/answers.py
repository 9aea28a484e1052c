"""What a config's answers were when its baselines were recorded: the canary's replies launch by launch and the
accuracy set's per-question results, in `<hardware>/<model key>.answers.json` beside the baselines TOML (token
ids are many and nobody reviews them line by line; the TOML keeps what people read).

>>> import tempfile; d = Path(tempfile.mkdtemp())
>>> s = AnswerStore(d / "m.answers.json")
>>> s.add_canary("t", [[1, 2], [3]], unit="tokens", asked="0f1e"); s.save()
>>> AnswerStore(d / "m.answers.json").canary("t")
[[[1, 2], [3]]]
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..textfiles import SHARED_MODE, atomic_write, read_utf8

CANARY_CAP = 12  # reference launches kept per config: enough to calibrate, a file that stays small


class AnswersError(ValueError):
    """An answers file that cannot be read: the message names it and the fix."""


def answers_path(baselines: Path) -> Path:
    """The answers file beside a baselines file."""
    return baselines.with_name(baselines.stem + ".answers.json")


class AnswerStore:
    """One answers file: read once, changed in memory, written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = _read(path)
        self.changed: set[str] = set()  # the configs this run changed: only they are written back

    def _config(self, name: str) -> dict[str, Any]:
        configs: dict[str, dict[str, Any]] = self.data["configs"]
        return configs.setdefault(name, {})

    def canary(self, config: str) -> list[list[list[Any]]]:
        """The config's reference canary launches, oldest first (each a reply per prompt)."""
        got = self.data["configs"].get(config, {}).get("canary", {}).get("launches", [])
        return [list(map(list, launch)) for launch in got]

    def canary_unit(self, config: str) -> str:
        """What the recorded replies are made of: tokens (ids) or words (text)."""
        return str(self.data["configs"].get(config, {}).get("canary", {}).get("unit", "tokens"))

    def canary_asked(self, config: str) -> str | None:
        """The digest of the prompts and length the reference replies answered (canary.asked_id); None: unknown."""
        got = self.data["configs"].get(config, {}).get("canary", {}).get("asked")
        return str(got) if got is not None else None

    def add_canary(self, config: str, replies: Sequence[Sequence[Any]], unit: str, asked: str) -> None:
        """Append one launch's canary replies to the config's reference (the oldest kept first, up to the cap)."""
        entry = self._config(config).setdefault("canary", {"unit": unit, "asked": asked, "launches": []})
        if (entry.get("unit"), entry.get("asked")) != (unit, asked):
            # another kind of server, or other prompts: its replies start a new reference
            entry.clear()
            entry.update({"unit": unit, "asked": asked, "launches": []})
        if len(entry["launches"]) < CANARY_CAP:
            entry["launches"].append([list(r) for r in replies])
            self.changed.add(config)

    def accuracy(self, config: str) -> dict[str, Any] | None:
        """The config's recorded accuracy set: `set` (what was asked), `ids`, `right` (a 0/1 string), `tokens`."""
        got = self.data["configs"].get(config, {}).get("accuracy")
        return got if isinstance(got, dict) else None

    def set_accuracy(self, config: str, which: str, ids: Sequence[str], right: Sequence[bool],
                     tokens: Sequence[int]) -> None:
        """Record the config's accuracy reference (replacing the one before)."""
        self._config(config)["accuracy"] = {"set": which, "ids": list(ids),
                                            "right": "".join("1" if r else "0" for r in right),
                                            "tokens": list(tokens)}
        self.changed.add(config)

    def save(self, lock_timeout: float = 60.0) -> None:
        """Write the configs this run changed, under the file's lock and over a fresh read of it (as the baselines
        are written): two xdist workers recording two configs of one model both keep theirs."""
        if not self.changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=lock_timeout, mode=SHARED_MODE):
            now = _read(self.path)
            now["configs"].update({name: self.data["configs"][name] for name in self.changed})
            atomic_write(self.path, dumps(now))
        self.data = now
        self.changed = set()


def dumps(data: dict[str, Any]) -> str:
    """The file's text: indented, but a list of numbers (a reply's token ids) on one line, not one line a token.

    >>> print(dumps({"configs": {"t": {"canary": {"launches": [[[1, 2], [3]]]}}}}), end="")
    {
     "configs": {
      "t": {
       "canary": {
        "launches": [
         [
          [1,2],
          [3]
         ]
        ]
       }
      }
     }
    }
    """
    text = json.dumps(data, indent=1, sort_keys=True)
    return re.sub(r"\[\s+(-?\d[-\d.,\s]*?)\s+\]", lambda m: "[" + "".join(m.group(1).split()) + "]", text) + "\n"


def _is_list(x: Any, item: type | tuple[type, ...]) -> bool:
    return isinstance(x, list) and all(isinstance(i, item) and not isinstance(i, bool) for i in x)


def shape_problem(data: Any) -> str | None:
    """Why parsed JSON is not an answers file (None: it is one): every key the checks read, of the type they read,
    so that a file of another shape stops the run instead of switching its correctness check off."""
    if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
        return "no 'configs' object"
    for name, entry in data["configs"].items():
        if not isinstance(entry, dict):
            return f"configs.{name} is not an object"
        canary = entry.get("canary")
        if canary is not None:
            if not isinstance(canary, dict) or canary.get("unit") not in ("tokens", "words") \
                    or not isinstance(canary.get("asked"), str):
                return f"configs.{name}.canary lacks its unit (tokens or words) or its prompts' digest (asked)"
            launches = canary.get("launches")
            if not isinstance(launches, list) or not all(
                    isinstance(launch, list) and all(_is_list(r, (int, str)) for r in launch) for launch in launches):
                return f"configs.{name}.canary.launches is not a list of launches, each a reply per prompt"
            if len({len(launch) for launch in launches}) > 1:
                return f"configs.{name}.canary.launches hold different numbers of replies"
        acc = entry.get("accuracy")
        if acc is not None:
            ids, right, tokens = (acc.get(k) if isinstance(acc, dict) else None for k in ("ids", "right", "tokens"))
            if not (isinstance(acc, dict) and isinstance(acc.get("set"), str) and isinstance(ids, list)
                    and _is_list(ids, str) and isinstance(right, str) and set(right) <= {"0", "1"}
                    and isinstance(tokens, list) and _is_list(tokens, (int, float))
                    and len(right) == len(ids) == len(tokens)):
                return f"configs.{name}.accuracy lacks its set, or its ids, right and tokens differ in length"
    return None


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"configs": {}}
    try:
        loaded = json.loads(read_utf8(path))
        why = shape_problem(loaded)
        if why is not None:
            raise ValueError(why)
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise AnswersError(f"{path}: not an answers file ({exc}); restore it from git (git checkout -- {path.name}) "
                           "or delete it and record again with --update-baselines") from None
    except OSError as exc:
        raise AnswersError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return dict(loaded)
