"""Argument types shared by every ``recipe-audit`` subcommand (argparse ``type=`` callables).

Each rejects bad text with one short phrase; argparse prefixes the option name."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(check: Callable[[float], bool] | None = None, requirement: str = "", *,
           integer: bool = False) -> Callable[[str], float]:
    """A parser for finite numbers (whole ones with ``integer``) that pass ``check``; the
    error says ``"<text> <requirement>"``."""

    def parse(text: str):
        try:
            v = int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if check is not None and not check(v):
            raise argparse.ArgumentTypeError(f"{text} {requirement}")
        return v

    return parse


finite = number()
probability = number(lambda v: 0 < v < 1, "must lie strictly between 0 and 1")
positive = number(lambda v: v > 0, "must be a positive number")
count = number(lambda v: v >= 0, "is negative", integer=True)
