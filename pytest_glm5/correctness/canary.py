"""The canary: a fixed set of short prompts answered greedily on every launch before the load, compared with the
replies recorded with the baselines. A build that is fast because it emits wrong tokens fails here in seconds.

Greedy output is not promised to be the same from launch to launch (batch-variant kernels break near-ties late in a
reply), so what is compared is calibrated, not guessed: from at least MIN_LAUNCHES reference launches, each prompt's
agreed prefix is the longest the references share with the first. Early: half the shortest agreed prefix (unchanged
launches agreed on all of it, launch after launch: a divergence there is no late-token tie), one prompt allowed to
differ. Late: the rest of each prompt's agreed prefix, where a launch of the same build diverges only by a tie the
references happened not to meet. Tonight's launch and the R reference launches are alike (exchangeable), so each
prompt diverges before its agreed prefix with probability at most 1/R; the late divergences allowed are the
Binomial(prompts, 1/R) count exceeded with probability LATE_ALPHA at most, whatever the engine's ties. A build that
changes every reply at the same late token fails; a few late ties do not. A prompt the references disagree on at
once is left out. With fewer reference launches only a gross failure is called: more than half the prompts
differing in their first piece.

>>> ref = [[(1, 2, 3, 4)] * 16] * 5
>>> rule = calibrate(ref)
>>> rule.prefix, rule.allowed, rule.late_allowed
(2, 1, 9)
>>> check(rule, ref[0], [(1, 9, 3, 4)] * 2 + [(1, 2, 3, 4)] * 14).line().split(": prompt")[0]
'canary failed: 2 of 16 prompts diverged within their first 2 tokens (1 allowed; rule from 5 reference launches)'
>>> check(rule, ref[0], [(1, 2, 3, 9)] * 9 + [(1, 2, 3, 4)] * 7).line()
'canary: 16 of 16 prompts agree on their first 2 tokens; 9 diverged later within their agreed replies (9 allowed) \
(rule from 5 reference launches)'
>>> check(rule, ref[0], [(1, 2, 3, 9)] * 16).line().split(": prompt")[0]
'canary failed: 16 of 16 prompts diverged late within their agreed replies (9 allowed: 5 reference launches; rule \
from 5 reference launches)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..digests import digest

MIN_LAUNCHES = 5
MAX_TOKENS = 32
LATE_ALPHA = 1e-3  # an unchanged build's late ties exceed the late allowance at most this often (exchangeability)
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
    agreed: tuple[int, ...] = ()  # each prompt's agreed prefix: compared whole (calibrated rules)
    late_allowed: int = 0  # prompts that may diverge beyond `prefix` within their agreed prefix

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
                left_out=left_out, agreed=tuple(agreed), late_allowed=late_allowance(compared, launches))


def late_allowance(prompts: int, launches: int, alpha: float = LATE_ALPHA) -> int:
    """The fewest late divergences an unchanged build exceeds with probability at most `alpha`: tonight's launch is
    one more draw beside the `launches` references, so a prompt's reply leaves its agreed prefix (the references'
    earliest parting) with probability at most 1/launches, and the count is at most Binomial(prompts, 1/launches).

    >>> late_allowance(16, 5), late_allowance(16, 12), late_allowance(16, 100)
    (9, 6, 2)
    """
    q = 1.0 / max(1, launches)
    tail = 1.0
    for k in range(prompts + 1):
        tail -= math.comb(prompts, k) * q ** k * (1 - q) ** (prompts - k)
        if tail <= alpha:
            return k
    return prompts


@dataclass(frozen=True)
class Divergence:
    """One prompt whose reply left the reference: where, and the pieces on each side."""

    prompt: int
    at: int
    expected: Any
    got: Any
    late: bool = False  # beyond the rule's early prefix, inside the prompt's agreed prefix


@dataclass(frozen=True)
class CanaryCheck:
    """A launch's canary against its reference: the divergences inside the rule's prefix, and the call."""

    rule: Rule
    compared: int
    diverged: tuple[Divergence, ...]
    prompts: Sequence[str] = field(default=PROMPTS, repr=False)
    unit: str = "tokens"

    @property
    def early(self) -> tuple[Divergence, ...]:
        """The divergences inside the rule's early prefix."""
        return tuple(d for d in self.diverged if not d.late)

    @property
    def late(self) -> tuple[Divergence, ...]:
        """The divergences beyond it, inside their prompts' agreed prefixes."""
        return tuple(d for d in self.diverged if d.late)

    @property
    def ok(self) -> bool:
        """No more prompts diverged early, nor late, than the rule allows."""
        return len(self.early) <= self.rule.allowed and len(self.late) <= self.rule.late_allowed

    def line(self) -> str:
        """One line: the call, the rule, and the first divergences by prompt and piece."""
        within = "their first piece" if not self.rule.calibrated else f"their first {self.rule.prefix} {self.unit}"
        late = (f"; {len(self.late)} diverged later within their agreed replies ({self.rule.late_allowed} allowed)"
                if self.late else "")
        if self.ok:
            return (f"canary: {self.compared - len(self.early)} of {self.compared} prompts agree on {within}{late} "
                    f"({self.rule.describe()})")
        unit = self.unit.rstrip("s")
        early_failed = len(self.early) > self.rule.allowed
        failed = self.early if early_failed else self.late
        shown = "; ".join(f"prompt {d.prompt + 1} {self.prompts[d.prompt][:40]!r} at {unit} {d.at}: {d.expected} "
                          f"expected, {d.got} got" for d in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        if not early_failed:
            return (f"canary failed: {len(self.late)} of {self.compared} prompts diverged late within their agreed "
                    f"replies ({self.rule.late_allowed} allowed: {self.rule.launches} reference launches; "
                    f"{self.rule.describe()}): {shown}{more}")
        return (f"canary failed: {len(self.early)} of {self.compared} prompts diverged within {within} "
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
        # Calibrated: the prompt's whole agreed prefix (its late part against the late allowance); else the first.
        upto = max(rule.prefix, rule.agreed[p]) if rule.calibrated and p < len(rule.agreed) else rule.prefix
        at = first_divergence(ref[:upto], got[:upto])
        if at is not None:
            diverged.append(Divergence(p, at, ref[at] if at < len(ref) else "(end)",
                                       got[at] if at < len(got) else "(end)", late=at >= rule.prefix))
    return CanaryCheck(rule, compared, tuple(diverged), prompts, unit)
