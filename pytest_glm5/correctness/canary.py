"""The canary: a fixed set of short prompts answered greedily on every launch before the load, compared with the
replies recorded with the baselines. A build that is fast because it emits wrong tokens fails here in seconds.

Greedy output is not promised to be the same from launch to launch (batch-variant kernels break near-ties late in a
reply), so what is compared is calibrated, not guessed: from at least MIN_LAUNCHES reference launches, each prompt's
agreed prefix is the longest the references share with the first; the rule compares half the shortest agreed
prefix (unchanged launches agreed on all of it, launch after launch: a divergence inside its first half is no
late-token tie), leaves out a prompt the references disagree on at once, and allows one prompt to differ. With fewer
reference launches only a gross failure is called: more than half the prompts differing in their first piece.

>>> ref = [[(1, 2, 3, 4), (5, 6, 7, 8)]] * 5
>>> rule = calibrate(ref)
>>> rule.prefix, rule.allowed
(2, 0)
>>> check(rule, ref[0], [(1, 2, 3, 4), (5, 9, 7, 8)], ["a", "b"]).line()
"canary failed: 1 of 2 prompts diverged within their first 2 tokens (0 allowed; rule from 5 reference launches): \
prompt 2 'b' at token 1: 6 expected, 9 got"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..digests import digest

MIN_LAUNCHES = 5
MAX_TOKENS = 32
# Short, varied prompts: facts, counting, code, a list, a translation; the reply, not its quality, is compared.
PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "def fibonacci(n):",
    "The chemical symbol for gold is",
    "Translate to German: Good morning, how are you?",
    "List three primary colors:",
    "The square root of 144 is",
    "Once upon a time, in a small village,",
    "SELECT name FROM users WHERE",
    "Water boils at a temperature of",
    "The first president of the United States was",
    "Monday, Tuesday, Wednesday,",
    "In Python, to open a file you write",
    "The largest planet in the solar system is",
    "A haiku about the sea:",
    "2 + 2 =",
)



def asked_id(prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS) -> str:
    """What the canary asks, as a short digest recorded with its reference: replies to other prompts (or lengths)
    are never compared with them."""
    return digest([list(prompts), max_tokens])


Pieces = Sequence[Any]  # a reply as token ids (SGLang) or words (an OpenAI-style server)


def first_divergence(a: Pieces, b: Pieces) -> int | None:
    """Where two replies first differ (a shorter one differs where it ended); None when they are the same."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Rule:
    """What a launch's canary is held to: the pieces compared per prompt, how many prompts may differ, the prompts
    left out (their references disagree at once), and the reference launches it came from."""

    prefix: int
    allowed: int
    launches: int
    calibrated: bool
    left_out: tuple[int, ...] = ()

    def describe(self) -> str:
        """`rule from 5 reference launches` or why it is only a gross check."""
        if not self.calibrated:
            return (f"gross check only: {self.launches} of {MIN_LAUNCHES} reference launches recorded (record more "
                    "with --update-baselines --glm5-launches 5)")
        out = f"rule from {self.launches} reference launches"
        return out + (f"; {len(self.left_out)} prompt(s) left out, their references disagree at once"
                      if self.left_out else "")


def calibrate(reference: Sequence[Sequence[Pieces]]) -> Rule:
    """The rule the reference launches support (each a reply per prompt, the first the reference replies)."""
    launches = len(reference)
    n = len(reference[0]) if reference else 0
    if launches < MIN_LAUNCHES:
        return Rule(prefix=1, allowed=n // 2, launches=launches, calibrated=False)
    first = reference[0]
    agreed, split = [], []
    for p in range(n):
        cut = [first_divergence(first[p], other[p]) for other in reference[1:]]
        agreed.append(min((len(first[p]) if c is None else c) for c in cut))
        split.append(any(c is not None for c in cut))
    # Left out: references that part before their second piece. A reply every launch repeats whole is kept, however
    # short (a one-word reply, such as a random model's run-on string, is one piece).
    left_out = tuple(p for p in range(n) if split[p] and agreed[p] < 2)
    kept = [agreed[p] for p in range(n) if p not in left_out]
    prefix = max(1, min(kept) // 2) if kept else 1
    compared = n - len(left_out)
    return Rule(prefix=prefix, allowed=1 if compared >= 8 else 0, launches=launches, calibrated=True,
                left_out=left_out)


@dataclass(frozen=True)
class Divergence:
    """One prompt whose reply left the reference: where, and the pieces on each side."""

    prompt: int
    at: int
    expected: Any
    got: Any


@dataclass(frozen=True)
class CanaryCheck:
    """A launch's canary against its reference: the divergences inside the rule's prefix, and the call."""

    rule: Rule
    compared: int
    diverged: tuple[Divergence, ...]
    prompts: Sequence[str] = field(default=PROMPTS, repr=False)
    unit: str = "tokens"

    @property
    def ok(self) -> bool:
        """No more prompts diverged than the rule allows."""
        return len(self.diverged) <= self.rule.allowed

    def line(self) -> str:
        """One line: the call, the rule, and the first divergences by prompt and piece."""
        within = "their first piece" if not self.rule.calibrated else f"their first {self.rule.prefix} {self.unit}"
        if self.ok:
            return (f"canary: {self.compared - len(self.diverged)} of {self.compared} prompts agree on {within} "
                    f"({self.rule.describe()})")
        unit = self.unit.rstrip("s")
        shown = "; ".join(f"prompt {d.prompt + 1} {self.prompts[d.prompt][:40]!r} at {unit} {d.at}: {d.expected} "
                          f"expected, {d.got} got" for d in self.diverged[:3])
        more = f"; and {len(self.diverged) - 3} more" if len(self.diverged) > 3 else ""
        return (f"canary failed: {len(self.diverged)} of {self.compared} prompts diverged within {within} "
                f"({self.rule.allowed} allowed; {self.rule.describe()}): {shown}{more}")


def check(rule: Rule, reference: Sequence[Pieces], today: Sequence[Pieces], prompts: Sequence[str] = PROMPTS,
          unit: str = "tokens") -> CanaryCheck:
    """Today's replies against the reference replies under `rule`."""
    diverged = []
    compared = 0
    for p, (ref, got) in enumerate(zip(reference, today, strict=False)):
        if p in rule.left_out:
            continue
        compared += 1
        at = first_divergence(ref[:rule.prefix], got[:rule.prefix])
        if at is not None:
            diverged.append(Divergence(p, at, ref[at] if at < len(ref) else "(end)",
                                       got[at] if at < len(got) else "(end)"))
    return CanaryCheck(rule, compared, tuple(diverged), prompts, unit)
