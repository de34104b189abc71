"""The one interval type every result of stats states its bounds in: :class:`Interval`, a lower
and an upper end (the card's ``L`` and ``U``, the confidence sequence's ``L_n`` and ``U_n``, the
acceptance gates' percentile intervals). Pure Python, like :mod:`.exact`.

>>> Interval(0.037, 0.209).upper, tuple(Interval(0.1, 0.2))
(0.209, (0.1, 0.2))
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Interval"]


class Interval(NamedTuple):
    """An interval ``[lower, upper]``: a tuple of its two ends (so ``ci[1]`` and ``lo, hi = ci``
    read it as before, and JSON writes it as the list ``[lower, upper]``), each also by name."""

    lower: float
    upper: float
