"""Speculative decoding as SGLang 0.5.23 runs EAGLE with GLM-5's own MTP layer (NEXTN is its alias): each decode
step drafts `speculative_num_steps` tokens with the draft layer, then one verify pass of the target model over the
`speculative_num_draft_tokens` candidates keeps the longest correct prefix plus one token of its own (the bonus).

What the emulator models, and why:
- A step costs the verify pass (a decode step over batch x draft tokens: more experts touched, more compute) plus
  the draft passes (one layer and the LM head each). So one stream gains from every accepted draft, and a full batch
  pays for drafts it throws away: the single-stream win and the high-concurrency loss are the same arithmetic.
- Acceptance is a property of the text, not of the launch: each draft is right with a chance drawn per prompt from
  how natural its words are (random token ids: the profile's `p_random`; prose: `p_natural`), and the draws of one
  request come from its prompt's hash, so one prompt accepts alike launch after launch (greedy decoding).
- What SGLang reports (tokenizer_manager.py `_calculate_spec_decoding_metrics`): per request spec_verify_ct (verify
  passes), spec_num_correct_drafts, spec_num_proposed_drafts = verify_ct x (draft tokens - 1), spec_accept_rate =
  correct / proposed, spec_accept_length = completion_tokens / verify_ct (the bonus and the prefill's first token
  included); the server's gauge sglang:spec_accept_length and counter sglang:spec_verify_calls_total.
- A build's faults: `accept_drop` (each draft right with (1 - drop) times the chance, at the same step cost),
  `draft_slowdown` (draft passes slower), `lossy` (that share of accepted drafts is not the target's token: a verify
  that accepts wrong drafts, fast and wrong).

>>> spec = Speculative(steps=3, topk=1, draft_tokens=4, draft_base_s=0.004, draft_token_s=2e-5,
...                    p_natural=0.8, p_random=0.3, jitter=0.0)
>>> round(spec.chance("The quick brown fox jumps over the lazy dog."), 3), round(spec.chance([17, 4242, 99]), 3)
(0.8, 0.3)
>>> round(spec.expected_length(0.8), 3)
2.952
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import SimRequest

ALGORITHMS = ("EAGLE", "NEXTN")  # SGLang resolves NEXTN to EAGLE (arg_groups/speculative_hook.py)
_WORD = re.compile(r"^[A-Za-z][a-z']*[.,;:!?]?$")
_EMULATED = re.compile(r"^w\d+$")  # the client's stand-in words for token ids (load/client.prompt_text)


@dataclass(frozen=True)
class Speculative:
    """One server's speculative decoding: its shape (SGLang's flags), its costs and its acceptance."""

    steps: int
    topk: int
    draft_tokens: int
    draft_base_s: float
    draft_token_s: float
    p_natural: float
    p_random: float
    jitter: float
    accept_drop: float = 0.0
    draft_factor: float = 1.0  # > 1: draft passes that much slower
    lossy: float = 0.0

    @property
    def max_accepted(self) -> int:
        """The most drafts one verify can accept: a chain of draft tokens - 1 (top-k 1) or of the steps."""
        return max(1, min(self.steps, self.draft_tokens - 1))

    def chance(self, prompt: str | Sequence[int | str]) -> float:
        """The chance each draft of this prompt's reply is right: by the share of its words that read as prose."""
        words = prompt.split() if isinstance(prompt, str) else [w for w in prompt if isinstance(w, str)]
        prose = sum(1 for w in words if _WORD.match(w) and not _EMULATED.match(w)) / len(words) if words else 0.0
        p = self.p_random + (self.p_natural - self.p_random) * prose
        if self.jitter:
            p += self.jitter * (2 * rng_of(prompt).random() - 1)
        p = min(0.98, max(0.0, p))
        # top-k > 1 verifies a tree: a position is right where any of its k candidates is.
        return (1.0 - (1.0 - p) ** self.topk) * (1.0 - self.accept_drop)

    def expected_length(self, p: float) -> float:
        """Tokens a verify pass yields on average at chance p (the bonus included)."""
        return sum(p ** i for i in range(self.max_accepted + 1))

    def accepted(self, rng: random.Random, p: float, room: int) -> int:
        """Drafts one verify accepts: the run of right drafts from the first, at most `room`."""
        n = 0
        while n < min(self.max_accepted, room) and rng.random() < p:
            n += 1
        return n

    def draft_s(self, batch: int) -> float:
        """Model seconds of the draft passes of one step over `batch` requests."""
        return self.steps * (self.draft_base_s + self.draft_token_s * batch) * self.draft_factor


_DRAFT_WORDS = ("the", "a", "and", "of", "to", "in", "is", "it", "that", "was")


def wrong_word(word: str, rng: random.Random) -> str:
    """A draft's word that the target would not have said (a lossy verify keeps it)."""
    return rng.choice([w for w in _DRAFT_WORDS if w != word])


def rng_of(prompt: str | Sequence[int | str]) -> random.Random:
    """A request's own draws, from its prompt: one prompt accepts alike on every launch."""
    text = prompt if isinstance(prompt, str) else "\x1f".join(map(str, prompt))
    return random.Random(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big"))


def resolve_speculative(profile: Mapping[str, Any], args: Mapping[str, Any], accept_drop: float = 0.0,
                        draft_slowdown: float = 1.0, lossy: float = 0.0) -> Speculative | None:
    """The server's speculative decoding from its SGLang args and the profile's `[speculative]`, or None when it
    runs none; ValueError where SGLang would refuse the args or the profile cannot model them."""
    algorithm = args.get("speculative_algorithm")
    if algorithm is None:
        return None
    if str(algorithm).upper() not in ALGORITHMS:
        raise ValueError(f"the emulator models --speculative-algorithm {' or '.join(ALGORITHMS)} (GLM-5's MTP "
                         f"layer), not {algorithm!r}")
    table = profile.get("speculative")
    if not isinstance(table, Mapping):
        raise ValueError(f"sim profile {profile.get('name')} has no [speculative] table: it cannot model "
                         "--speculative-algorithm")
    def given(dest: str, default: int) -> int:  # 0 is a value the check below refuses, never "unset"
        value = args.get(dest)
        return default if value is None else int(value)

    steps = given("speculative_num_steps", int(table.get("default_steps", 3)))
    topk = given("speculative_eagle_topk", 1)
    draft = given("speculative_num_draft_tokens", steps + 1)
    if steps < 1 or topk < 1 or draft < 2:
        raise ValueError(f"speculative decoding needs steps >= 1, top-k >= 1 and draft tokens >= 2, got steps "
                         f"{steps}, top-k {topk}, draft tokens {draft}")
    if topk == 1:
        draft = steps + 1  # SGLang adjusts it so, with a warning (speculative_hook.py _handle_eagle_family)
    return Speculative(steps=steps, topk=topk, draft_tokens=draft,
                       draft_base_s=float(table["draft_base_s"]), draft_token_s=float(table["draft_token_s"]),
                       p_natural=float(table["p_natural"]), p_random=float(table["p_random"]),
                       jitter=float(table.get("jitter", 0.0)), accept_drop=accept_drop,
                       draft_factor=1.0 / draft_slowdown, lossy=lossy)


def spec_meta(req: SimRequest, draft_tokens: int) -> dict[str, float | int]:
    """A request's speculative figures as SGLang's meta_info carries them (none before its first verify pass)."""
    if req.verify_ct <= 0:
        return {}
    proposed = req.verify_ct * (draft_tokens - 1)
    return {"spec_accept_rate": req.correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": req.generated / req.verify_ct,
            "spec_num_correct_drafts": req.correct_drafts, "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": req.verify_ct}
