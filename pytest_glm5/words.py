"""How the plugin's lines count things: a number with its noun, singular for one.

    >>> counted(1, "config"), counted(3, "regression"), counted(2, "launch", "launches")
    ('1 config', '3 regressions', '2 launches')
    >>> counted(0, "night")
    '0 nights'
"""

from __future__ import annotations


def counted(n: int, word: str, plural: str | None = None) -> str:
    """`n word`, with `plural` (default `word + "s"`) unless n is 1."""
    return f"{n} {word if n == 1 else plural or word + 's'}"
