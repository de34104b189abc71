"""Sample floors: the fewest reruns at which a sweep with no failure certifies the failure budget.

**The fixed-N floor** is ``N_min = ceil(ln(delta) / ln(1 - eps))``, the smallest ``N`` with
``(1 - eps)**N <= delta`` (:func:`sample_floor`). It is computed in closed form, never by counting:
the logarithms are taken in decimal arithmetic with enough digits for the integer part to be exact,
and when the ratio is an integer up to that precision the comparison ``(1 - eps)**N <= delta`` is
decided exactly, in rational arithmetic, on the numbers ``eps`` and ``delta`` stand for
(:func:`~.checks.rational`). So an exact tie is a tie: ``sample_floor(0.3, 0.49) == 2`` because
``0.7**2 == 0.49``, and ``sample_floor(0.1, 0.9**11)`` typed as ``0.31381059609`` is 11.

**The one floor search.** Where no closed form exists (the anytime floor of the confidence
sequence, the simultaneous band's floor, the further clean reruns a count with failures needs),
the floor is the smallest count at which a test that is false below some count and true from
there on passes: :func:`first_passing` finds it by doubling from a start, then bisecting, and every
such floor in the package is found by it. A floor beyond ``MAX_RERUNS`` is refused with one
sentence (:func:`checked_floor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

from recipe_audit.stats.checks import (
    MAX_RERUNS,
    MAX_RERUNS_TEXT,
    approx_count,
    check_delta,
    check_eps,
    rational,
)
from recipe_audit.stats.errors import StatsInputError

__all__ = ["budget_floor", "checked_floor", "first_passing", "floor_of", "sample_floor"]


def _log(x: Fraction) -> Decimal:
    """ln(x) for ``0 < x < 1`` in the current decimal context (relative error ~ 10**-prec)."""
    if x <= Fraction(1, 2):
        return (Decimal(x.numerator) / Decimal(x.denominator)).ln()
    e = 1 - x  # ln(1 - e) = -(e + e**2/2 + ...), no cancellation for small e
    ed = Decimal(e.numerator) / Decimal(e.denominator)
    total, power, j = Decimal(0), Decimal(1), 1
    while True:
        power *= ed
        term = power / j
        if total + term == total:
            return -total
        total += term
        j += 1


def _powers_at_most(a: Fraction, m: int, d: Fraction) -> bool:
    """``a**m <= d`` exactly, for ``0 < a, d < 1``; in rational arithmetic when an exact tie is
    possible (``a**m == d`` needs ``den(a)**m == den(d)``), else by logarithms with growing precision
    (then the two sides differ, so some precision decides)."""
    if m * (a.denominator.bit_length() - 1) <= d.denominator.bit_length() + 1:
        return a**m <= d
    prec = 60
    while prec <= 20000:
        with localcontext() as ctx:
            ctx.prec = prec + len(str(m))
            diff = m * _log(a) - _log(d)
            bound = Decimal(10) ** (len(str(m)) + 4 - prec) * (abs(m * _log(a)) + abs(_log(d)) + 1)
            if abs(diff) > bound:
                return diff < 0
        prec *= 2
    return a**m <= d  # unreachable in practice: exact, however slow


def floor_of(e: float, d: float) -> int:
    """``N_min`` for the numbers ``e`` and ``d`` stand for (:func:`rational`); ``e`` and ``d`` are
    already checked (:func:`sample_floor` checks them first)."""
    return _floor_exact(rational(e), rational(d), float(e), float(d))


@lru_cache(maxsize=256)
def _floor_exact(E: Fraction, D: Fraction, e: float, d: float) -> int:
    A = 1 - E
    # digits of the ratio's integer part, from the floats (log1p keeps tiny eps accurate)
    digits = max(0, math.ceil(math.log10(-math.log(d)) - math.log10(-math.log1p(-e)))) + 2
    with localcontext() as ctx:
        ctx.prec = 40 + digits
        ratio = _log(D) / _log(A)
        m = int(ratio.to_integral_value(rounding="ROUND_HALF_EVEN"))
        near = abs(ratio - m) <= ratio * Decimal(10) ** (digits - ctx.prec + 8) + Decimal(10) ** (-30)
        if not near:
            return max(1, int(ratio.to_integral_value(rounding="ROUND_CEILING")))
    if m < 1:
        return 1
    return m if _powers_at_most(A, m, D) else m + 1


def sample_floor(eps, delta) -> int:
    """Smallest number of reruns ``N_min`` at which ``k = 0`` certifies ``U <= eps``.

    ``N_min = ceil(ln(delta) / ln(1 - eps))``, the smallest ``N`` with ``(1 - eps)**N <= delta``,
    computed in closed form with an exact decision at ties (see the module docstring): no loop,
    any ``eps`` in (0, 1) (``eps = 1e-12`` gives 2302585092993 at once). At ``N = N_min`` and
    ``k = 0`` the verdict is always ``release-supported``.

    >>> sample_floor(0.10, 0.10), sample_floor(0.05, 0.05), sample_floor(0.3, 0.49)
    (22, 59, 2)
    """
    return floor_of(check_eps(eps), check_delta(delta))


def first_passing(passes: Callable[[int], bool], failing: int, start: int, limit: int | None = None) -> int | None:
    """The one floor search: the smallest count ``n`` in ``(failing, limit]`` with ``passes(n)``.

    ``passes`` is false up to some count and true from there on; ``passes(failing)`` is known to be
    false (or ``failing`` lies below every count that matters) and is not asked. The search asks
    ``start`` (``> failing``) first, doubles while the count fails (never beyond ``limit``), then
    bisects between the last failing and the first passing count. None when ``passes(limit)`` is
    false (no ``limit``: it searches until a count passes).

    >>> first_passing(lambda n: n * n >= 50, 0, 1), first_passing(lambda n: n >= 9, 0, 1, limit=8)
    (8, None)
    """
    lo, hi = failing, start
    while not passes(hi):
        if limit is not None and hi >= limit:
            return None
        lo, hi = hi, 2 * hi if limit is None else min(2 * hi, limit)
    while hi - lo > 1:  # passes(lo) is false, passes(hi) is true
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


def checked_floor(floor: int, e: float, d: float, where: str = "", name: str = "the sample floor") -> int:
    """``floor`` when at most ``MAX_RERUNS``, else the one sentence that refuses ``eps`` (``where``:
    the kind of sweep, ``name``: how the sentence names the floor)."""
    if floor > MAX_RERUNS:
        raise StatsInputError(
            f"eps = {e!r} is too small to certify with at most {MAX_RERUNS_TEXT} reruns{where} "
            f"({name} at delta = {d!r} is {approx_count(floor)} reruns).")
    return floor


def budget_floor(e: float, d: float) -> int:
    """The fixed-N floor of an already checked ``eps`` and ``delta``, refusing a budget no count up
    to ``MAX_RERUNS`` could certify."""
    return checked_floor(floor_of(e, d), e, d)
