"""What the emulated model says: greedy text that depends only on the prompt and the seed (the "weights"), the
generated questions answered right as often as the profile states, and the correctness faults of a build.

- A generated arithmetic question (correctness.questions) gets a short worked reply ending "The answer is N.";
  whether N is right is drawn once per question and seed, with the profile's `[answers] accuracy`.
- Any other text prompt gets a stream of words drawn from its hash: the same prompt, the same reply.
- `garbage`: each token replaced by a random one with that chance, at full speed (a fast and wrong build).
- `garbage_late`: the same, only in the second half of a reply, where the answer is.
- `nondeterminism`: that share of requests diverges at one late token to a near-tie word (as batch-variant
  kernels do), the answer kept: a canary calibrated on reference launches must not call it a failure.
- `changed_from`: every reply longer than N words is changed from word N on, on every launch (a systematic late
  change: a kernel that breaks past a sequence length); an answer past word N moves with it.
- `off_by_one`: every arithmetic answer is one more than the model's, the working and every other reply unchanged.

>>> q = "Question: Eli reads 10 pages a day for 3 days, then 40 more pages. How many pages in all?"
>>> Answers(seed=0, accuracy=1.0, off_by_one=True).reply(q, 64)[-1]
'71.'
>>> Answers(seed=0, changed_from=2).reply("The capital of France is", 4)[2:] != Answers(seed=0).reply(
...     "The capital of France is", 4)[2:]
True

>>> a = Answers(seed=0, accuracy=1.0)
>>> words = a.reply("Question: Eli reads 10 pages a day for 3 days, then 40 more pages. How many pages in all?", 64)
>>> " ".join(words[-4:])
'The answer is 70.'
>>> a.reply("The capital of France is", 5) == Answers(seed=0, accuracy=0.5).reply("The capital of France is", 5)
True
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field

from ..correctness.questions import solve

_FILLER = ("first", "we", "take", "the", "numbers", "then", "multiply", "add", "and", "subtract", "so", "that",
           "gives", "each", "step", "carefully", "now", "check", "it", "again", "total", "count", "per", "left")
_VOCAB = ("alpha", "beta", "gamma", "delta", "river", "stone", "light", "north", "blue", "seven", "paper", "glass",
          "wind", "cloud", "iron", "salt", "field", "tower", "maple", "quiet", "signal", "orbit", "ember", "frost")


def _rng(*parts: object) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def token_id(word: str, vocab: int = 9973) -> int:
    """The emulated tokenizer's id of a word (one token a word)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % vocab


@dataclass
class Answers:
    """The emulated model's replies, and the build's correctness faults."""

    seed: int = 0
    accuracy: float = 0.9
    garbage: float = 0.0
    garbage_late: float = 0.0
    nondeterminism: float = 0.0
    changed_from: int = 0  # 0: off; else every reply changed from this word on
    off_by_one: bool = False
    eos_per_token: float = 0.0  # a reply without an answer ends at an EOS drawn from its prompt (greedy: the same)
    fault_rng: random.Random = field(default_factory=random.SystemRandom)  # per launch: faults are not weights

    def _clean(self, prompt: str, max_new: int, ignore_eos: bool) -> tuple[list[str], int]:
        """The greedy reply and where its answer starts (its length when it has none); made to ignore EOS, it goes
        on past its end to max_new."""
        words, answer_at = self._own(prompt, max_new)
        if ignore_eos and len(words) < max_new:
            more = _rng("more", self.seed, prompt)
            words += [more.choice(_VOCAB) for _ in range(max_new - len(words))]
        return words, answer_at

    def _own(self, prompt: str, max_new: int) -> tuple[list[str], int]:
        answer = solve(prompt)
        rng = _rng("reply", self.seed, prompt)
        if answer is None:
            n = max_new
            if self.eos_per_token > 0:
                u = _rng("eos", self.seed, prompt).random()
                n = max(1, min(max_new, int(math.log(max(u, 1e-12)) / math.log(1 - self.eos_per_token)) + 1))
            return [rng.choice(_VOCAB) for _ in range(n)], n
        right = _rng("right", self.seed, prompt).random() < self.accuracy
        given = answer if right else str(int(answer) + _rng("wrong", self.seed, prompt).choice((-10, -2, -1, 1, 3)))
        if self.off_by_one:
            given = str(int(given) + 1)
        work = [rng.choice(_FILLER) for _ in range(rng.randint(12, 24))]
        tail = ["The", "answer", "is", f"{given}."]
        words = (work + tail)[-max_new:] if max_new < len(work) + len(tail) else work + tail
        return words, max(0, len(words) - len(tail))

    def reply(self, prompt: str, max_new: int, ignore_eos: bool = False) -> list[str]:
        """The words this launch answers `prompt` with (at most `max_new`; exactly, when EOS is ignored), faults
        applied."""
        words, answer_at = self._clean(prompt, max_new, ignore_eos)
        if self.nondeterminism and words and self.fault_rng.random() < self.nondeterminism:
            # A near-tie flips one late word of the working (or of a reply without an answer); the rest follows it.
            late = max(1, (3 * answer_at) // 4)
            if late < answer_at:
                at = self.fault_rng.randrange(late, answer_at)
                words = words[:at] + [self.fault_rng.choice(_FILLER) for _ in range(answer_at - at)] + \
                    words[answer_at:]
        if self.changed_from and len(words) > self.changed_from:
            # The same words in another order from there: systematic, launch after launch, never random.
            at = self.changed_from
            words = words[:at] + [w for w in reversed(words[at:])] if len(set(words[at:])) > 1 else \
                words[:at] + [f"{w}s" for w in words[at:]]
        for rate, start in ((self.garbage, 0), (self.garbage_late, len(words) // 2)):
            if rate:
                words = [w if i < start or self.fault_rng.random() >= rate else f"#{self.fault_rng.randrange(10**6)}"
                         for i, w in enumerate(words)]
        return words
