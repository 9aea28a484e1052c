"""The emulator's prefix cache: SGLang's radix cache as the scheduler sees it, in blocks of BLOCK tokens.

A prompt is a chain of block hashes (each block's hash covers every token before it, so a block matches only after
the same prefix); a request admitted to the batch skips the prefill of its longest cached prefix (all but its last
token: one token is always computed, as SGLang does) and puts its blocks in the cache at once, so requests of one
batch that share a prefix compute it once (SGLang's in-batch prefix caching defers them for that). The cache holds
the KV pool's tokens, least recently used out first; /flush_cache empties it.

    >>> c = PrefixCache(capacity_tokens=1024)
    >>> a = blocks_of(list(range(100)))
    >>> c.admit(a, 100), c.admit(a, 100), c.admit(blocks_of(list(range(40)) + [7] * 60), 100)
    (0, 96, 32)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK = 16


def blocks_of(tokens: Sequence[int | str]) -> tuple[int, ...]:
    """The chained hashes of a prompt's whole blocks (a partial last block is never cached)."""
    out: list[int] = []
    h = 0
    for i in range(0, len(tokens) - BLOCK + 1, BLOCK):
        h = hash((h, tuple(tokens[i:i + BLOCK])))
        out.append(h)
    return tuple(out)


class PrefixCache:
    """Block hashes held, least recently used first."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = max(0, capacity_tokens // BLOCK)
        self._held: OrderedDict[int, None] = OrderedDict()

    def admit(self, blocks: Sequence[int], prompt_len: int) -> int:
        """The tokens of this prompt already cached (its longest held prefix, less its last token); its blocks are
        held from now on."""
        hit = 0
        for b in blocks:
            if b not in self._held:
                break
            hit += 1
        for b in blocks:
            self._held[b] = None
            self._held.move_to_end(b)
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return min(hit * BLOCK, max(0, prompt_len - 1))

    def flush(self) -> None:
        """Empty it (/flush_cache)."""
        self._held.clear()
