"""The numbers a statistic of one cell takes, checked in pure Python: counts ``k`` and ``n``, the
failure budget ``eps`` and the risk ``delta``, each refused with one sentence
(:class:`~recipe_audit.stats.errors.StatsInputError`). NumPy scalars and 0-d arrays are accepted,
arrays are not (the array statistics check theirs in :mod:`.array_checks`).

``eps`` and ``delta`` are read as the numbers typed: a decimal given as text (the command line's
``--delta 0.31381059609``), a ``Fraction`` or a ``Decimal`` exactly (:class:`Typed`); a float as the
exact decimal of its shortest ``repr`` (:func:`rational`), which is what was typed wherever a float
came from a decimal in Python source, a YAML file or a Hydra override: ``0.2724905250390625``
(``0.85**8``, 16 digits) is that decimal however it arrived, so every door gives one answer. The
sample floor and the verdict's exact ties read these numbers.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from recipe_audit.stats.errors import StatsInputError

__all__ = [
    "DELTA_RULE",
    "MAX_RERUNS",
    "MAX_RERUNS_TEXT",
    "Typed",
    "approx_count",
    "check_count",
    "check_counts",
    "check_delta",
    "check_eps",
    "rational",
    "scaled",
]

#: The most reruns a count may hold (every count up to it is an exact float, far below 2**53).
MAX_RERUNS = 10**15
MAX_RERUNS_TEXT = "10^15"


def _show(value) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        text = str(value) if value.bit_length() < 200 else f"a {len(str(abs(value)))}-digit number"
        return text
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(name: str, value, what: str):
    """``value`` as a Python scalar: NumPy scalars and 0-d arrays are unwrapped, arrays refused."""
    ndim = getattr(value, "ndim", None)
    if ndim is not None and not isinstance(value, (int, float)):
        if ndim != 0:
            raise StatsInputError(f"{name} must be {what}, got an array of shape {tuple(value.shape)}.")
        value = value.item()
    return value


def check_count(name: str, value, minimum: int = 0) -> int:
    """A whole number in ``[minimum, MAX_RERUNS]`` as ``int`` (integral floats are accepted)."""
    value = _scalar(name, value, "a whole number")
    if isinstance(value, bool):
        raise StatsInputError(f"{name} must be a whole number, got the boolean {value}.")
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value) == math.floor(value):
        v = int(value)
    else:
        raise StatsInputError(f"{name} must be a whole number, got {_show(value)}.")
    if v < minimum:
        if minimum == 0:
            raise StatsInputError(f"{name} cannot be negative, got {_show(v)}.")
        raise StatsInputError(f"{name} must be at least {minimum}, got {_show(v)}.")
    if v > MAX_RERUNS:
        raise StatsInputError(f"{name} must be at most {MAX_RERUNS_TEXT}, got {_show(v)}.")
    return v


def check_counts(k, n) -> tuple[int, int]:
    """Failures ``k`` and reruns ``n`` with ``0 <= k <= n``, ``1 <= n <= MAX_RERUNS``."""
    k_i = check_count("failures k", k)
    n_i = check_count("reruns n", n, minimum=1)
    if k_i > n_i:
        raise StatsInputError(f"failures k ({k_i}) cannot exceed reruns n ({n_i}).")
    return k_i, n_i


class Typed(float):
    """A number that remembers the exact value it was given as: ``Typed("0.31381059609")`` is the
    float nearest to it, and its :attr:`exact` is ``Fraction(31381059609, 10**11)``, the decimal
    typed (text, a ``Fraction``, a ``Decimal`` or an ``int``). Arithmetic on it gives plain floats;
    the floor and the verdict's ties read :attr:`exact` (:func:`rational`).

    >>> d = Typed("0.31381059609")
    >>> d == 0.31381059609, d.exact == Fraction(9, 10) ** 11, repr(d)
    (True, True, '0.31381059609')
    """

    exact: Fraction

    def __new__(cls, value):
        if isinstance(value, Typed):
            return value
        if isinstance(value, str):
            try:
                frac = Fraction(value.strip().replace("_", ""))
            except (ValueError, ZeroDivisionError):
                raise StatsInputError(f"{_show(value)} is not a number.") from None
        elif isinstance(value, float):
            frac = rational(value)
        else:
            frac = Fraction(value)
        self = super().__new__(cls, float(frac))
        self.exact = frac
        return self

    def __reduce__(self):
        return (Typed, (self.exact,))


def _real(name: str, value, requirement: str) -> float:
    value = _scalar(name, value, "a single number")
    if isinstance(value, Typed):
        return value
    if isinstance(value, (str, Decimal, Fraction)):
        try:
            return Typed(value)  # its float is checked: 1e-400 is 0.0, 0.99999999999999999 is 1.0
        except (StatsInputError, ValueError, ArithmeticError):  # text that is no number, a Decimal NaN
            raise StatsInputError(f"{name} must be a number {requirement}, got {_show(value)}.") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StatsInputError(f"{name} must be a number {requirement}, got {_show(value)}.")
    return float(value)


def check_eps(eps) -> float:
    """The failure budget: a finite number strictly between 0 and 1."""
    e = _real("eps", eps, "strictly between 0 and 1")
    if not 0.0 < e < 1.0:
        raise StatsInputError(f"eps must lie strictly between 0 and 1, got {e!r}.")
    return e


DELTA_RULE = ("a one-sided bound at confidence 1 - delta below one half is no bound "
              "(the lower bound could exceed the upper)")


def check_delta(delta) -> float:
    """The statistical risk: a finite number strictly between 0 and 0.5."""
    d = _real("delta", delta, "strictly between 0 and 0.5")
    if not 0.0 < d < 0.5:
        if 0.0 < d < 1.0:
            raise StatsInputError(f"delta must lie strictly between 0 and 0.5, got {d!r}: {DELTA_RULE}.")
        raise StatsInputError(f"delta must lie strictly between 0 and 0.5, got {d!r}.")
    return d


def rational(x: float) -> Fraction:
    """The exact number ``x`` stands for: a :class:`Typed` number's own value (a ``Fraction``, a
    ``Decimal`` or an ``int``: itself); for a float, the exact decimal of its shortest ``repr``
    (``0.3`` -> 3/10, ``0.2724905250390625`` -> 2724905250390625/10**16, ``1/3`` ->
    3333333333333333/10**16), the decimal a person typed to get that float. A number no float holds
    (1/3, 2**-50 written out) keeps its exact value given as text, a ``Fraction`` or a ``Decimal``.

    >>> rational(0.2724905250390625) == Fraction(17, 20) ** 8
    True
    """
    if isinstance(x, Typed):
        return x.exact
    if isinstance(x, (Fraction, Decimal, int)) and not isinstance(x, bool):
        return Fraction(x)
    return _rational_float(float(x))


@lru_cache(maxsize=1024)
def _rational_float(x: float) -> Fraction:
    return Fraction(repr(x))


def scaled(delta: float, m: int) -> float:
    """``delta / m`` as the exact number it stands for (:class:`Typed`): the family-wise risk δ/M
    keeps the decimal typed, so its floor's ties are ties.

    >>> scaled(Typed("0.1"), 3).exact
    Fraction(1, 30)
    """
    return delta if m == 1 else Typed(rational(delta) / m)


def approx_count(n: int) -> str:
    """A large count, briefly: 2.3e+16 (also beyond the float range)."""
    return f"{float(n):.3g}" if n < 10**300 else f"{Decimal(n).normalize():.2g}"
