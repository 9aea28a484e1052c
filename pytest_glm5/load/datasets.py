"""Prompt sets of natural text: what speculative decoding is judged on. Random token ids make a draft model guess
noise, so acceptance measured on them says nothing of production; a prompt set is real prose (questions, chat turns)
sent as text, and its digest joins the workload, so acceptance is compared only on the same text.

A set is a JSONL file, one prompt a line, in any of the shapes the field ships:
- ShareGPT: `{"conversations": [{"from": "human", "value": "..."}, ...]}` (the first human or user turn);
- MT-Bench: `{"turns": ["...", ...]}` (the first turn);
- plain: `{"prompt": "..."}` or `{"text": "..."}`.
`natural` (bundled, `load/datasets/natural.jsonl`, made by scripts/make_natural_prompts.py, CC0) holds 48 prompts:
24 GSM8K-style word problems and 24 multi-paragraph chat turns.

    >>> s = parse(['{"prompt": "Why is the sky blue?"}', '', '{"turns": ["Name three rivers.", "And two more."]}'],
    ...           "mine.jsonl")
    >>> s.prompts, s.identity
    (('Why is the sky blue?', 'Name three rivers.'), 'mine.jsonl@e2a9e8781792')
    >>> parse(['{"conversations": [{"from": "gpt", "value": "Hi"}]}'], "bad.jsonl")
    Traceback (most recent call last):
    ...
    pytest_glm5.load.datasets.DatasetError: bad.jsonl line 1: a ShareGPT conversation without a human or user turn
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..textfiles import read_utf8

BUNDLED = ("natural",)
MIN_PROMPTS = 1


class DatasetError(ValueError):
    """A prompt set that cannot be read or has a line of no known shape."""


@dataclass(frozen=True)
class PromptSet:
    """A prompt set's prompts, in file order, and what a bound measured on it is keyed by."""

    name: str
    prompts: tuple[str, ...]
    digest: str

    @property
    def identity(self) -> str:
        """`natural.jsonl@1a2b3c4d5e6f`: its file name and content, never where the checkout lives."""
        return f"{self.name}@{self.digest}"

    def take(self, count: int, offset: int = 0) -> list[str]:
        """`count` prompts from `offset` on, from the start again past the end (a point may ask more than it holds)."""
        n = len(self.prompts)
        return [self.prompts[(offset + i) % n] for i in range(count)]


def _prompt_of(row: Any) -> str:
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if "conversations" in row:
        turns = row["conversations"]
        if not isinstance(turns, list):
            raise ValueError("conversations is not a list")
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from", turn.get("role")) in ("human", "user"):
                return _text(turn.get("value", turn.get("content")))
        raise ValueError("a ShareGPT conversation without a human or user turn")
    if "turns" in row:
        turns = row["turns"]
        if not isinstance(turns, list) or not turns:
            raise ValueError("turns is not a non-empty list")
        return _text(turns[0])
    for key in ("prompt", "text"):
        if key in row:
            return _text(row[key])
    raise ValueError("no conversations, turns, prompt or text: not a ShareGPT, MT-Bench or plain prompt line")


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the prompt is not a non-empty string: {value!r:.40}")
    return value.strip()


def parse(lines: Iterable[str], name: str) -> PromptSet:
    """A prompt set from JSONL lines (blank lines skipped); DatasetError naming the first bad line."""
    prompts: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            prompts.append(_prompt_of(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{name} line {number}: not JSON ({exc.msg})") from None
        except ValueError as exc:
            raise DatasetError(f"{name} line {number}: {exc}") from None
    if len(prompts) < MIN_PROMPTS:
        raise DatasetError(f"{name} holds no prompt: one JSON object a line (ShareGPT, MT-Bench or "
                           '{"prompt": ...})')
    text = "\n".join(prompts).encode()
    return PromptSet(name, tuple(prompts), hashlib.sha256(text).hexdigest()[:12])


@functools.lru_cache(maxsize=8)
def load(name_or_path: str) -> PromptSet:
    """A bundled set by name (`natural`) or a JSONL file; DatasetError with the cause and the fix."""
    if not name_or_path.strip():
        raise DatasetError(f"prompt set: an empty name; give a bundled one ({', '.join(BUNDLED)}) or a JSONL path")
    if name_or_path in BUNDLED:
        res = resources.files("pytest_glm5.load").joinpath("datasets", f"{name_or_path}.jsonl")
        return parse(res.read_text(encoding="utf-8").splitlines(), f"{name_or_path}.jsonl")
    path = Path(name_or_path)
    try:
        text = read_utf8(path)
    except FileNotFoundError:
        raise DatasetError(f"prompt set {name_or_path}: no such file (bundled: {', '.join(BUNDLED)}; or a JSONL "
                           "path)") from None
    except UnicodeError as exc:  # its message names the file, the byte and the fix
        raise DatasetError(f"prompt set {exc}") from None
    except OSError as exc:
        raise DatasetError(f"prompt set {name_or_path}: cannot read it: {exc.strerror or exc}") from None
    return parse(text.splitlines(), path.name)
