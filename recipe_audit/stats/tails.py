"""Binomial tails in pure Python, and the bisection over floating-point numbers the bounds use.

Each tail is summed from the term next to ``k`` outwards, that term evaluated with Loader's
saddle-point formula (relative accuracy about 1e-15 for every ``n``). When a tail would need more
than a few thousand terms (``n`` in the hundreds of thousands with many failures) the sum raises
:class:`TailTooLong` and the caller asks SciPy's incomplete beta functions instead
(:func:`scipy_special`, imported only then). A bound is the float found by bisection over the
floating-point numbers themselves (:func:`last_true` on :func:`float_bits`), so it is rounded to
the conservative side by construction.

Reference: C. Loader (2000), "Fast and accurate computation of binomial probabilities".
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext

from recipe_audit.stats.errors import StatsInputError

__all__ = ["MAX_TERMS", "TailTooLong", "finite", "float_bits", "float_from_bits", "last_true", "log_cdf", "log_dbinom",
           "log_sf", "scipy_special"]

_LN_SQRT_2PI = 0.918938533204672741780329736406  # ln(sqrt(2 pi))
_LN_2PI = 2 * _LN_SQRT_2PI
MAX_TERMS = 4000  # beyond this many terms a tail is left to SciPy


def _stirlerr_table() -> tuple[float, ...]:
    """``ln(n!) - ((n + 1/2) ln n - n + ln sqrt(2 pi))`` for n = 0..15, to full precision."""
    out = [0.0]
    with localcontext() as ctx:
        ctx.prec = 40
        half_ln_2pi = Decimal("0.9189385332046727417803297364056176398614")
        for n in range(1, 16):
            dn = Decimal(n)
            val = Decimal(math.factorial(n)).ln() - ((dn + Decimal("0.5")) * dn.ln() - dn + half_ln_2pi)
            out.append(float(val))
    return tuple(out)


_SFERR: tuple[float, ...] = ()


def _stirlerr(n: int) -> float:
    global _SFERR
    if n <= 15:
        if not _SFERR:
            _SFERR = _stirlerr_table()
        return _SFERR[n]
    nn = float(n) * float(n)
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    if n > 500:
        return (s0 - s1 / nn) / n
    if n > 80:
        return (s0 - (s1 - s2 / nn) / nn) / n
    if n > 35:
        return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _bd0(x: float, m: float) -> float:
    """``x ln(x/m) + m - x``, accurately also when ``x`` is close to ``m`` (Loader)."""
    if abs(x - m) < 0.1 * (x + m):
        v = (x - m) / (x + m)
        s = (x - m) * v
        ej = 2.0 * x * v
        v2 = v * v
        for j in range(1, 1000):
            ej *= v2
            s1 = s + ej / (2 * j + 1)
            if s1 == s:
                return s1
            s = s1
        return s
    return x * math.log(x / m) + m - x


def log_dbinom(x: int, n: int, p: float, q: float) -> float:
    """ln P(Binomial(n, p) = x) for ``1 <= x <= n - 1``, ``0 < p < 1``, ``q = 1 - p``."""
    lc = _stirlerr(n) - _stirlerr(x) - _stirlerr(n - x) - _bd0(float(x), n * p) - _bd0(float(n - x), n * q)
    lf = _LN_2PI + math.log(x) + math.log1p(-x / n)
    return lc - 0.5 * lf


class TailTooLong(Exception):
    """The tail needs more terms than the pure-Python sum takes: SciPy computes it."""


def log_cdf(k: int, n: int, p: float) -> float:
    """ln P(Binomial(n, p) <= k) for ``1 <= k <= n - 1`` where ``n p >= k`` (terms fall below k)."""
    q = 1.0 - p
    r = q / p
    s = t = 1.0
    j = k
    while j > 0:
        ratio = j / (n - j + 1) * r
        t *= ratio
        s += t
        j -= 1
        if ratio < 1.0 and t <= s * (1.0 - ratio) * 2.0**-56:
            break
        if k - j > MAX_TERMS:
            raise TailTooLong
    return log_dbinom(k, n, p, q) + math.log(s)


def log_sf(k: int, n: int, p: float) -> float:
    """ln P(Binomial(n, p) >= k) for ``1 <= k <= n - 1`` where ``n p <= k`` (terms fall above k)."""
    q = 1.0 - p
    r = p / q
    s = t = 1.0
    j = k
    while j < n:
        ratio = (n - j) / (j + 1) * r
        t *= ratio
        s += t
        j += 1
        if ratio < 1.0 and t <= s * (1.0 - ratio) * 2.0**-56:
            break
        if j - k > MAX_TERMS:
            raise TailTooLong
    return log_dbinom(k, n, p, q) + math.log(s)


def float_bits(x: float) -> int:
    """The float's bit pattern as a signed integer (ordered like the non-negative floats)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def float_from_bits(b: int) -> float:
    """The float whose bit pattern is ``b`` (the inverse of :func:`float_bits`)."""
    return struct.unpack("<d", struct.pack("<q", b))[0]


def scipy_special():
    """``scipy.special``, imported only when a tail is too long for the pure-Python sum."""
    from scipy import special

    return special


def last_true(lo: int, hi: int, pred) -> int:
    """Bisection over float bit patterns: the largest ``b`` in ``[lo, hi)`` with ``pred(b)``,
    given ``pred(lo)`` and not ``pred(hi)`` and ``pred`` true below its boundary only."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid
    return lo


def finite(value: float, what: str) -> float:
    """``value`` when it is a number; a NaN (a library routine out of its range) is refused with
    one sentence rather than read as a bound or a verdict."""
    if math.isnan(value):
        raise StatsInputError(f"{what} could not be computed exactly here; no verdict is given rather "
                              "than a wrong one.")
    return value
