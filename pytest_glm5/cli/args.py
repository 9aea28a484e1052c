"""The argparse types every `glm5` command shares: each check's ValueError becomes argparse's one-line error
naming the option."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from ..settings import parse_ratio, parse_url

T = TypeVar("T")


def int_list(text: str) -> list[int]:
    """Comma-separated positive integers (`1,2,256`)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= low, else argparse's one-line error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a settings check: its ValueError becomes argparse's one-line error."""

    def run(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} {exc}") from None

    return run


url = checked(parse_url)  # a server's base URL, checked as --sglang-url is
ratio = checked(parse_ratio)  # bench_serving's --random-range-ratio: a number in [0, 1]
