"""Accuracy judged per question against the reference: a one-sided exact McNemar test, and an output-length guard.

Accuracy is paired: the same questions on both sides, so only the questions that changed sides carry evidence.
`b` = right in the reference and wrong today, `c` = wrong in the reference and right today; with no change each
discordant question is a fair coin, so P(B >= b | b + c) under Binomial(b + c, 1/2) is the exact one-sided p
(Kübler et al., "When LLMs get significantly worse"; vLLM RFC 34333). Its false-alarm rate is at most alpha
(tests/test_correctness.py measures it over 2,000 null runs). Beside it, MLPerf's rule: mean answer tokens within
+-10% of the reference, so a shorter answer cannot buy speed unseen.

>>> r = judge_accuracy([True] * 90 + [False] * 10, [True] * 80 + [False] * 20, [50.0] * 100, [50.0] * 100, 0.01)
>>> r.line()
'accuracy 80.0% vs 90.0% (-10.0 points): 10 questions lost, 0 gained, one-sided McNemar p=0.00098 < 0.01: a drop'
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# scipy.stats is imported in the functions that use it: it costs about 0.45 s, which a collection, a plan, a
# usage error or `glm5 --help` never needs.
LENGTH_TOLERANCE = 0.10  # MLPerf's: mean output length within +-10% of the reference


def mcnemar_p(lost: int, gained: int) -> float:
    """One-sided exact McNemar: the chance of losing at least `lost` of the `lost + gained` discordant questions
    when nothing changed (1.0 when none changed side)."""
    from scipy import stats as sps
    n = lost + gained
    if n == 0:
        return 1.0
    return float(sps.binom.sf(lost - 1, n, 0.5))


@dataclass(frozen=True)
class Accuracy:
    """One launch's accuracy against its reference: the counts, the p, the length guard, the decision."""

    right: int
    right_ref: int
    n: int
    lost: int
    gained: int
    p: float
    alpha: float
    mean_tokens: float
    mean_tokens_ref: float

    @property
    def dropped(self) -> bool:
        """Accuracy fell beyond chance at the run's alpha."""
        return self.p < self.alpha

    @property
    def length_change(self) -> float:
        """Relative change of the mean answer length (0.0 without a reference length)."""
        return self.mean_tokens / self.mean_tokens_ref - 1 if self.mean_tokens_ref > 0 else 0.0

    @property
    def length_moved(self) -> bool:
        """Mean answer tokens outside +-10% of the reference's."""
        return abs(self.length_change) > LENGTH_TOLERANCE

    @property
    def failed(self) -> bool:
        """Fails the run: a drop, or answers whose length moved."""
        return self.dropped or self.length_moved

    def line(self) -> str:
        """One line a person reads: accuracy today and in the reference, the questions that moved, p, the call."""
        acc, ref = 100 * self.right / self.n, 100 * self.right_ref / self.n
        head = (f"accuracy {acc:.1f}% vs {ref:.1f}% ({acc - ref:+.1f} points): {self.lost} questions lost, "
                f"{self.gained} gained, one-sided McNemar p={self.p:.2g}")
        call = f" < {self.alpha:g}: a drop" if self.dropped else f" >= {self.alpha:g}: no drop shown"
        length = ""
        if self.length_moved:
            length = (f"; mean answer {self.mean_tokens:.0f} tokens vs {self.mean_tokens_ref:.0f} "
                      f"({self.length_change:+.0%}, beyond +-{LENGTH_TOLERANCE:.0%}: a shorter or longer answer "
                      "changes what the speed measures)")
        return head + call + length


def judge_accuracy(ref: Sequence[bool], today: Sequence[bool], ref_tokens: Sequence[float],
                   tokens: Sequence[float], alpha: float) -> Accuracy:
    """Today's per-question results against the reference's (the same questions, in the same order)."""
    if len(ref) != len(today):
        raise ValueError(f"paired accuracy needs the same questions: {len(ref)} in the reference, {len(today)} today")
    lost = sum(1 for r, t in zip(ref, today, strict=True) if r and not t)
    gained = sum(1 for r, t in zip(ref, today, strict=True) if t and not r)
    mean = sum(tokens) / len(tokens) if tokens else 0.0
    mean_ref = sum(ref_tokens) / len(ref_tokens) if ref_tokens else 0.0
    return Accuracy(sum(today), sum(ref), len(today), lost, gained, mcnemar_p(lost, gained), alpha, mean, mean_ref)


def power(n: int, accuracy: float, drop: float, alpha: float, flip: float = 0.02, sims: int = 2000,
          seed: int = 0) -> float:
    """The chance the test finds a drop of `drop` (absolute) at accuracy `accuracy` over `n` questions, when
    besides the drop a share `flip` of questions is answered afresh (right with chance `accuracy`, whatever it was:
    run-to-run noise that loses and gains alike), by simulation (the docs' sizes-and-power table)."""
    rng = random.Random(seed)
    found = 0
    for _ in range(sims):
        ref = [rng.random() < accuracy for _ in range(n)]
        today = []
        for r in ref:
            t = rng.random() < accuracy if rng.random() < flip else r
            if t and rng.random() < drop / accuracy:
                t = False
            today.append(t)
        lost = sum(1 for r, t in zip(ref, today, strict=True) if r and not t)
        gained = sum(1 for r, t in zip(ref, today, strict=True) if t and not r)
        found += mcnemar_p(lost, gained) < alpha
    return found / sims
