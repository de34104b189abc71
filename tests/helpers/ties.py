"""Exact ties at the sample floor, enumerated: ``δ = (1 - ε)**n`` exactly, for every ε of three
decimals (0.001 to 0.999) and every ``n`` with ``δ < 1/2``. At such a δ the floor is ``n``, not
``n + 1`` (``(1 - ε)**n <= δ`` holds with equality), so a door that reads δ as any other number
than the decimal typed moves the floor.

- :func:`repr_exact_ties`: the ties whose δ, written out exactly, is a float's shortest ``repr``
  with 16 or 17 significant digits (``0.85**8 = 0.2724905250390625``): typed in Python, in YAML or
  in a Hydra override, the float's ``repr`` is all that arrives, and it is exactly the tie. 374 of
  them (n from 6 to 53); reading such a float as "the simplest fraction that rounds to it" moved
  174 of them one rerun too high.
- :func:`decimal_ties`: the ties whose δ has at most 17 decimals (4,060 of them). Each is the
  exact decimal of its float's shortest ``repr`` but one, ``0.9**17 = 0.16677181699666569``: the
  float nearest to it is also nearest to ``0.16677181699666568``, its shortest ``repr``, a smaller
  δ (floor 18). No float can carry that tie; typed as text (the command line, or a string in
  Python) it is exact.

Each tie is ``(eps, n, delta)`` with ``eps`` and ``delta`` the decimals as text.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

_HALF = Fraction(1, 2)
_N_MAX = 120  # (1 - eps)**n has more than 17 significant digits beyond n = 56 unless 1 - eps is 10**-j


def _decimal(x: Fraction) -> tuple[str, int, int] | None:
    """``x`` (in (0, 1)) written out exactly with its number of decimals and of significant digits;
    None when ``x`` is no finite decimal."""
    den, twos, fives = x.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return None
    places = max(twos, fives)
    digits = str(x.numerator * 10**places // x.denominator)
    return "0." + digits.rjust(places, "0"), places, len(digits)


@cache
def _floor_ties() -> tuple[tuple[str, int, str, int, int, bool], ...]:
    """Every ``(eps, n, delta, decimals, significant digits, delta is its float's repr)``."""
    out = []
    for j in range(1, 1000):
        eps = Fraction(j, 1000)
        a = 1 - eps
        d = a
        for n in range(1, _N_MAX + 1):
            if n > 1:
                d *= a
            if d >= _HALF:
                continue
            text, places, digits = _decimal(d)
            if places > 17 and digits > 17:
                continue
            is_repr = Fraction(repr(float(d))) == d
            out.append((f"{j / 1000!r}", n, text, places, digits, is_repr))
    return tuple(out)


def repr_exact_ties() -> list[tuple[str, int, str]]:
    """The ties whose δ is a float's shortest ``repr`` with 16 or 17 significant digits."""
    return [(e, n, repr(float(d))) for e, n, d, _, digits, is_repr in _floor_ties() if is_repr and digits >= 16]


def decimal_ties() -> list[tuple[str, int, str]]:
    """The ties whose δ has at most 17 decimals."""
    return [(e, n, d) for e, n, d, places, _, _ in _floor_ties() if places <= 17]
