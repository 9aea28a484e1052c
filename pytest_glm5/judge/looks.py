"""Which look of a sequential test a verdict is, and the alpha that look may spend.

Within one run the looks are its launches (the nightly's rounds, the A/B's ABBA blocks) and alpha is spent over them
by an O'Brien-Fleming-type function (stats.spent): early looks get little, the last nearly all. With a history the
launches of a series carry across nights into one sample (judge/carry.py), re-tested every night: that night's looks
share alpha at Pocock's constant boundary (stats.night_level), computed for what the sample carries, so that each
night confirms a false regression with probability at most alpha, the bound the gate keeps.

    >>> round(Look(0.01, 1, 5).level, 10), round(Look(0.01, 1, 25, night=(1, 5)).level, 4)
    (8.4e-09, 0.0029)
    >>> round(Look(0.01, 11, 25, night=(1, 5)).level, 4)  # ten launches carried: the looks nearly coincide
    0.0049
"""

from __future__ import annotations

from dataclasses import dataclass

from .stats import night_level, spent


@dataclass(frozen=True)
class Look:
    """Which look of a sequential test this is, and the run's error settings."""

    alpha: float
    look: int = 1  # the sample's look: with a history its launches carry across nights (judge/carry.py)
    looks: int = 1
    effect: float = 0.05
    # With a history: tonight's look and the looks a night may take. Each night tests the whole sample at a level that
    # keeps that night's false regressions at alpha (stats.night_level, Pocock's boundary over tonight's looks), not
    # at what the sample's earlier nights left: the bound is on false nights, and a sample re-tested each night keeps
    # the power its launches have (scripts/simulate_nights.py; docs/night.md).
    night: tuple[int, int] | None = None

    @property
    def level(self) -> float:
        """This look's alpha: O'Brien-Fleming-type spending over the looks of one run; with a history, Pocock's
        boundary over tonight's looks of a sample that carries the earlier nights' launches."""
        if self.night is not None:
            return night_level(self.alpha, max(0, self.look - self.night[0]), self.night[1])
        return spent(self.alpha, self.look, self.looks)

    @property
    def last(self) -> bool:
        """No more launches may be added tonight."""
        return self.look >= self.looks or (self.night is not None and self.night[0] >= self.night[1])

    @property
    def left(self) -> int:
        """The looks left tonight."""
        return self.night[1] - self.night[0] if self.night is not None else self.looks - self.look
