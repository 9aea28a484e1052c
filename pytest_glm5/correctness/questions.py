"""Question sets with exact answers, and the grading of an answer text.

Two sources: a generated set of arithmetic word problems (deterministic per seed, any size, no download: the
emulator and CI), and a GSM8K-style JSONL file the user points to on the real box (each line
`{"question": ..., "answer": "... #### 72"}`, as openai/grade-school-math ships it).

>>> q = generate(1, seed=0)[0]
>>> q.id, q.answer
('gen-0-0', '43')
>>> grade("Ava has 3 boxes ... so she has 1,480 pens. The answer is 1480.")
'1480'
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..textfiles import read_utf8

# The prompt asks for the phrase the grader looks for first; a model that answers in its own words is graded by
# its last number (GSM8K's own convention, "#### 72", is read too).
INSTRUCTION = "Solve the problem. End your reply with \"The answer is N.\" where N is a number.\n"


@dataclass(frozen=True)
class Question:
    """One question: its id (stable across runs: the pairing key), the prompt text and the exact answer."""

    id: str
    text: str
    answer: str

    @property
    def prompt(self) -> str:
        """What is sent: the instruction, the question, an answer cue."""
        return f"{INSTRUCTION}Question: {self.text}\nAnswer:"


class QuestionsError(ValueError):
    """A question file that cannot be read: the message names the file, the line and the fix."""


_NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena")
_ITEMS = ("pens", "apples", "stamps", "marbles", "books", "shells", "cards", "coins")
# Each template: text with {name}, {item}, {a}, {b}, {c}, and the exact answer from a, b, c.
_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("{name} has {a} boxes of {item} with {b} {item} in each box, and gives away {c} {item}. How many {item} are "
     "left?", "a*b-c"),
    ("{name} buys {a} packs of {item} at {b} dollars a pack and pays with {c} dollars more than the total. How many "
     "dollars did {name} pay?", "a*b+c"),
    ("{name} reads {a} pages a day for {b} days, then {c} more pages. How many pages in all?", "a*b+c"),
    ("{name} shares {a} {item} equally among {b} friends, then finds {c} more {item}. How many {item} does each "
     "friend get, plus the found ones?", "a//b+c"),
)


def _value(expr: str, a: int, b: int, c: int) -> int:
    return {"a*b-c": a * b - c, "a*b+c": a * b + c, "a//b+c": a // b + c}[expr]


def generate(n: int, seed: int = 0) -> list[Question]:
    """`n` arithmetic word problems, the same for the same seed on every machine (random.Random is stable)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text, expr = _TEMPLATES[rng.randrange(len(_TEMPLATES))]
        a, b = rng.randint(2, 40), rng.randint(2, 12)
        if expr == "a//b+c":
            a = b * rng.randint(2, 30)  # shared equally: a whole number each
        c = rng.randint(1, a * b - 1 if expr == "a*b-c" else 50)
        words = {"name": rng.choice(_NAMES), "item": rng.choice(_ITEMS), "a": a, "b": b, "c": c}
        out.append(Question(f"gen-{seed}-{i}", text.format(**words), str(_value(expr, a, b, c))))
    return out


def solve(text: str) -> str | None:
    """The exact answer of a generated question from its text (None: not one of ours); the emulator's "model"."""
    for template, expr in _TEMPLATES:
        pattern = re.escape(template)
        for key in ("name", "item"):
            pattern = pattern.replace(re.escape("{" + key + "}"), r"[A-Za-z]+")
        for key in "abc":
            pattern = pattern.replace(re.escape("{" + key + "}"), rf"(?P<{key}>\d+)", 1)
            pattern = pattern.replace(re.escape("{" + key + "}"), r"\d+")
        m = re.search(pattern, text)
        if m:
            return str(_value(expr, int(m["a"]), int(m["b"]), int(m["c"])))
    return None


def load_jsonl(path: Path) -> list[Question]:
    """GSM8K's JSONL: `question`, and `answer` whose last line is `#### N` (a bare number is taken as it is)."""
    try:
        text = read_utf8(path)
    except UnicodeError as exc:  # its message names the file, the byte and the fix
        raise QuestionsError(f"question file {exc}") from None
    except OSError as exc:
        raise QuestionsError(f"cannot read the question file {path}: {exc.strerror or exc}") from None
    out = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text, answer = str(row["question"]), str(row["answer"])
        except (ValueError, KeyError, TypeError) as exc:
            raise QuestionsError(f"{path}:{no}: not a GSM8K line ({exc.__class__.__name__}: {exc}); each line must "
                                 "be a JSON object with \"question\" and \"answer\" (\"... #### 72\")") from None
        gold = answer.rsplit("####", 1)[-1] if "####" in answer else answer
        number = _number(gold)
        if number is None:
            raise QuestionsError(f"{path}:{no}: answer {answer[-40:]!r} has no number after '####'")
        out.append(Question(f"{path.stem}-{no}", text, number))
    if not out:
        raise QuestionsError(f"{path}: no questions (an empty file); point --glm5-accuracy-set at GSM8K's "
                             "test.jsonl or use generated:N")
    return out


_NUM = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?")


def _number(text: str) -> str | None:
    """The last number in `text`, as a canonical string: commas, a dollar sign and trailing zeros dropped."""
    found = _NUM.findall(text)
    if not found:
        return None
    raw = found[-1].replace(",", "").replace("$", "").replace(" ", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    if not math.isfinite(value):
        return str(raw)  # past a float (a broken build's digit run): compared as written, a wrong answer, no crash
    return str(int(value)) if value == int(value) else f"{value:g}"


_CUES = (re.compile(r"answer is[:\s]*([^\n]*)", re.I), re.compile(r"####\s*([^\n]*)"))


def grade(text: str) -> str | None:
    """The answer a reply gives: the number after its last "The answer is" (or "####"), else its last number."""
    for cue in _CUES:
        hits = cue.findall(text)
        if hits:
            number = _number(hits[-1])
            if number is not None:
                return number
    return _number(text)


def correct(reply: str, question: Question) -> bool:
    """Whether a reply's graded answer equals the question's exact answer."""
    return grade(reply) == question.answer
