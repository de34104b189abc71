"""The statistics of one cell, exactly and in pure Python: the sample floor ``N_min``, the one-sided
Clopper–Pearson bounds ``U`` and ``L`` for one ``(k, n)``, the verdict and ``tail_bound``.

Nothing here imports NumPy or SciPy for the counts a fine-tuning sweep has (``recipe-audit bound``
answers in well under a second); the array versions live in :mod:`.bounds`.

**The sample floor** is ``N_min = ceil(ln(delta) / ln(1 - eps))``, the smallest ``N`` with
``(1 - eps)**N <= delta``. It is computed in closed form, never by counting: the
logarithms are taken in decimal arithmetic with enough digits for the integer part to be exact, and
when the ratio is an integer up to that precision the comparison ``(1 - eps)**N <= delta`` is
decided exactly, in rational arithmetic. ``eps`` and ``delta`` are read as the numbers typed: a
decimal given as text (the command line's ``--delta 0.31381059609``), a ``Fraction`` or a
``Decimal`` exactly (:class:`Typed`); a float whose shortest decimal form has at most 15
significant digits as that decimal (every such decimal comes back from its float unchanged, so
``0.31381059609`` is 31381059609/10**11 however it arrived), any other float as the simplest
fraction that rounds to it (``1/3`` is 1/3, ``2**-50`` is 1/2**50). So an exact tie is a tie:
``sample_floor(0.3, 0.49) == 2`` because ``0.7**2 == 0.49``, and ``sample_floor(0.1, 0.9**11)``
typed as ``0.31381059609`` is 11.

**The bounds.** ``U`` is the ``1 - delta`` quantile of ``Beta(k + 1, n - k)``, i.e. the ``p`` with
``P(Binomial(n, p) <= k) = delta``; ``L`` is the ``delta`` quantile of ``Beta(k, n - k + 1)``, the
``p`` with ``P(Binomial(n, p) >= k) = delta``. The binomial tails are summed from the term next to
``k`` outwards, that term evaluated with Loader's saddle-point formula (relative accuracy about
1e-15 for every ``n``), and the quantile is the float found by bisection over the floating-point
numbers themselves: ``U`` is the smallest float with ``P(X <= k) <= delta``, ``L`` the largest with
``P(X >= k) <= delta`` (each rounded to the conservative side). The closed forms
``U(0, n) = 1 - delta**(1/n)`` (evaluated as ``-expm1(ln(delta) / n)``, accurate for any ``n``) and
``L(n, n) = delta**(1/n)`` are used at the ends. When a tail would need more than a few thousand
terms (``n`` in the hundreds of thousands with many failures) SciPy's incomplete beta functions
are used instead.

**The verdict** is decided on the same quantities: ``U <= eps`` is ``P(Binomial(n, eps) <= k) <=
delta`` (for ``k = 0`` it is ``n >= N_min``, exactly; for ``k >= 1`` a tail within rounding of
``delta`` is summed again in rational arithmetic, so an exact tie certifies), and the verdict, the
floor and the number of further clean reruns always agree. A tail that cannot be computed (a
NaN from a library routine) is refused with one sentence, never read as a verdict.

References: C. J. Clopper and E. S. Pearson (1934), Biometrika 26(4), 404-413; C. Loader (2000),
"Fast and accurate computation of binomial probabilities".
"""

from __future__ import annotations

import math
import numbers
import struct
from dataclasses import asdict, dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError

__all__ = [
    "release_rule",
    "INSUFFICIENT",
    "MAX_RERUNS",
    "REFUSED_SHIFT",
    "STRONG_UNSUPPORTED",
    "SUPPORTED",
    "UNSUPPORTED",
    "VERDICTS",
    "TailBound",
    "certifies",
    "check_delta",
    "check_eps",
    "lower_bound",
    "more_clean_reruns_needed",
    "sample_floor",
    "tail_bound",
    "upper_bound",
    "verdict",
]

INSUFFICIENT = "insufficient-evidence"
SUPPORTED = "release-supported"
STRONG_UNSUPPORTED = "strong-unsupported"
UNSUPPORTED = "unsupported"
REFUSED_SHIFT = "refused-shift"
VERDICTS = (INSUFFICIENT, SUPPORTED, STRONG_UNSUPPORTED, UNSUPPORTED, REFUSED_SHIFT)

#: The most reruns a count may hold (every count up to it is an exact float, far below 2**53).
MAX_RERUNS = 10**15
MAX_RERUNS_TEXT = "10^15"
_MAX_SEARCH = 2**53  # further clean reruns are searched up to this total


# ---------------------------------------------------------------------------------------------
# Input checks (pure Python: NumPy scalars and 0-d arrays are accepted, arrays are not)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The sample floor, exactly
# ---------------------------------------------------------------------------------------------


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in ``[lo, hi]`` (``0 <= lo <= hi``)."""
    fl = lo.numerator // lo.denominator
    if fl == lo or fl + 1 <= hi:
        return Fraction(fl if fl == lo else fl + 1)
    return fl + 1 / _simplest_between(1 / (hi - fl), 1 / (lo - fl))


def rational(x: float) -> Fraction:
    """The exact number ``x`` stands for, ``0 < x < 1``: a :class:`Typed` number's own value; for a
    float, its shortest decimal form when that has at most 15 significant digits (``0.3`` -> 3/10,
    ``0.31381059609`` -> 31381059609/10**11: every decimal of up to 15 digits comes back from its
    float unchanged, so this is the decimal typed), else the simplest fraction that rounds to it
    (``1/3`` -> 1/3, ``2**-50`` -> 1/2**50)."""
    if isinstance(x, Typed):
        return x.exact
    return _rational_float(float(x))


@lru_cache(maxsize=1024)
def _rational_float(x: float) -> Fraction:
    text = repr(x)
    mantissa = text.split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    if len(mantissa) <= 15 and "inf" not in text and "nan" not in text:
        return Fraction(text)
    return _simplest(x)


def _simplest(x: float) -> Fraction:
    """The simplest fraction that rounds to the float ``x`` (``1/3`` -> 1/3)."""
    exact = Fraction(x)
    below, above = math.nextafter(x, 0.0), math.nextafter(x, 1.0)
    lo = (exact + Fraction(below)) / 2
    hi = (exact + Fraction(above)) / 2
    best = _simplest_between(lo, hi)
    return best if float(best) == x and best > 0 else exact


def scaled(delta: float, m: int) -> float:
    """``delta / m`` as the exact number it stands for (:class:`Typed`): the family-wise risk δ/M
    keeps the decimal typed, so its floor's ties are ties.

    >>> scaled(Typed("0.1"), 3).exact
    Fraction(1, 30)
    """
    return delta if m == 1 else Typed(rational(delta) / m)


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


# ---------------------------------------------------------------------------------------------
# Binomial tails (Loader's saddle-point terms, summed outwards from k)
# ---------------------------------------------------------------------------------------------

_LN_SQRT_2PI = 0.918938533204672741780329736406  # ln(sqrt(2 pi))
_LN_2PI = 2 * _LN_SQRT_2PI
_MAX_TERMS = 4000  # beyond this many terms a tail is left to SciPy


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
        if k - j > _MAX_TERMS:
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
        if j - k > _MAX_TERMS:
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


def _upper_mid(k: int, n: int, d: float) -> float:
    """U for ``1 <= k <= n - 1``: the smallest float p with P(X <= k) <= delta."""
    ld = math.log(d)
    try:
        # P(X <= k) >= 1/2 > delta at p = k/n (the median is <= k)
        below = last_true(float_bits(k / n), float_bits(1.0), lambda b: log_cdf(k, n, float_from_bits(b)) > ld)
        return float_from_bits(below + 1)
    except TailTooLong:
        return finite(float(scipy_special().betainccinv(float(k + 1), float(n - k), d)),
                      f"The upper bound for {k} failures in {n} reruns")


def _lower_mid(k: int, n: int, d: float) -> float:
    """L for ``1 <= k <= n - 1``: the largest float p with P(X >= k) <= delta."""
    ld = math.log(d)
    try:
        # P(X >= k) >= 1/2 > delta at p = k/n
        return float_from_bits(last_true(0, float_bits(k / n), lambda b: log_sf(k, n, float_from_bits(b)) <= ld))
    except TailTooLong:
        return finite(float(scipy_special().betaincinv(float(k), float(n - k + 1), d)),
                      f"The lower bound for {k} failures in {n} reruns")


def clean_upper(n: int, d: float) -> float:
    """U(0, n) = 1 - delta**(1/n), evaluated without cancellation."""
    return -math.expm1(math.log(d) / n)


def upper_bound(k, n, delta) -> float:
    """One-sided exact upper bound ``U`` for ``k`` failures in ``n`` reruns (scalars).

    >>> round(upper_bound(3, 30, 0.1), 6), upper_bound(5, 5, 0.1)
    (0.209299, 1.0)
    """
    k_i, n_i = check_counts(k, n)
    d = check_delta(delta)
    if k_i == n_i:
        return 1.0
    if k_i == 0:
        return clean_upper(n_i, d)
    return _upper_mid(k_i, n_i, d)


def lower_bound(k, n, delta) -> float:
    """One-sided exact lower bound ``L`` for ``k`` failures in ``n`` reruns (scalars).

    >>> round(lower_bound(3, 30, 0.1), 6), lower_bound(0, 5, 0.1)
    (0.037308, 0.0)
    """
    k_i, n_i = check_counts(k, n)
    d = check_delta(delta)
    if k_i == 0:
        return 0.0
    if k_i == n_i:
        return d ** (1.0 / n_i)
    return _lower_mid(k_i, n_i, d)


def finite(value: float, what: str) -> float:
    """``value`` when it is a number; a NaN (a library routine out of its range) is refused with
    one sentence rather than read as a bound or a verdict."""
    if math.isnan(value):
        raise StatsInputError(f"{what} could not be computed exactly here; no verdict is given rather "
                              "than a wrong one.")
    return value


#: The size of the exact rational sum a tie is decided by (bits of the binomial's denominator).
_EXACT_TIE_BITS = 400_000
_TIE_BAND = 1e-9  # tails this close to delta (relatively) are summed again exactly


def _exact_cdf_at_most(k: int, n: int, e: float, d: float) -> bool | None:
    """``P(Binomial(n, E) <= k) <= D`` in rational arithmetic, on the numbers ``e`` and ``d`` stand
    for (:func:`rational`); None when the sum would be too large to take."""
    E, D = rational(e), rational(d)
    if n * max(E.denominator.bit_length(), 1) > _EXACT_TIE_BITS or k > _MAX_TERMS:
        return None
    A = 1 - E
    num_e, num_a, den = E.numerator, A.numerator, E.denominator  # E and A share a denominator
    total, c = 0, 1
    for j in range(k + 1):
        total += c * num_e**j * num_a ** (n - j)
        c = c * (n - j) // (j + 1)
    return Fraction(total, den**n) <= D


def _below_budget(k: int, n: int, e: float, d: float) -> bool:
    """``U(k, n) <= eps`` for ``1 <= k``, decided as ``P(Binomial(n, eps) <= k) <= delta``; a tail
    within rounding of ``delta`` is decided again in rational arithmetic (an exact tie certifies),
    or refused (:class:`StatsInputError`) where that sum would be too large to take."""
    if k >= n or n * e <= k:  # U = 1, or the median of Binomial(n, eps) is <= k: P(X <= k) >= 1/2
        return False
    try:
        gap = log_cdf(k, n, e) - math.log(d)
    except TailTooLong:
        tail = finite(float(scipy_special().betaincc(float(k + 1), float(n - k), e)),
                      f"P(Binomial({n}, eps) <= {k})")
        gap = math.log(tail) - math.log(d) if tail > 0 else -math.inf
    if abs(gap) <= _TIE_BAND:
        decided = _exact_cdf_at_most(k, n, e, d)
        if decided is None:  # too close to delta for floating point, too large to sum exactly
            raise StatsInputError(
                f"P(Binomial({n}, eps) <= {k}) is within a relative {_TIE_BAND:g} of delta, too close to "
                f"decide in floating point and too large to sum exactly at N = {n}, k = {k}; no verdict "
                "is given rather than a possibly wrong one (a slightly different eps or delta decides it).")
        return decided
    return gap <= 0


def release_rule(k, n, upper, eps, n_min):
    """The release rule, stated once: ``N >= N_min`` and ``U <= eps`` (vectorised over ``k``,
    ``n`` and ``upper``, the upper bound ``U(k, n)``). At ``k = 0``, ``U <= eps`` holds exactly when
    ``N >= N_min``, so zero failures are decided on the floor, not on the rounded ``U``.

    >>> release_rule([0, 0, 1], [22, 21, 38], [0.0999, 0.1035, 0.0998], 0.1, 22).tolist()
    [True, False, True]
    """
    import numpy as np  # only the vectorised callers need it; the scalar path stays NumPy-free

    k, n, upper = np.asarray(k), np.asarray(n), np.asarray(upper)
    return (n >= n_min) & ((upper <= eps) | (k == 0))


def certifies_at(k: int, n: int, e: float, d: float, n_min: int) -> bool:
    """:func:`release_rule` for one ``(k, n)``, with ``U <= eps`` decided on the exact binomial
    tail (``P(Binomial(n, eps) <= k) <= delta``) rather than on a computed ``U``."""
    if n < n_min:
        return False
    return True if k == 0 else _below_budget(k, n, e, d)


def certifies(k, n, eps, delta) -> bool:
    """Whether ``k`` failures in ``n`` reruns certify the budget: ``N >= N_min`` and ``U <= eps``
    (the card's comparison rule, and ``release-supported`` unless ``L > eps``, which cannot hold
    together with ``U <= eps``)."""
    k_i, n_i = check_counts(k, n)
    e, d = check_eps(eps), check_delta(delta)
    return certifies_at(k_i, n_i, e, d, floor_of(e, d))


def _verdict(k: int, n: int, e: float, d: float, n_min: int, lower: float) -> str:
    if lower > e:
        return STRONG_UNSUPPORTED  # wins over insufficient-evidence
    if n < n_min:
        return INSUFFICIENT
    return SUPPORTED if certifies_at(k, n, e, d, n_min) else UNSUPPORTED


def verdict(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> str:
    """The verdict for ``k`` failures in ``n`` reruns (unfinished reruns count as failures).

    >>> verdict(0, 22), verdict(0, 21), verdict(5, 5), verdict(3, 30)
    ('release-supported', 'insufficient-evidence', 'strong-unsupported', 'unsupported')
    """
    k_i, n_i = check_counts(k, n)
    e, d = check_eps(eps), check_delta(delta)
    return _verdict(k_i, n_i, e, d, floor_of(e, d), lower_bound(k_i, n_i, d))


def more_needed(k: int, n: int, e: float, d: float, n_min: int) -> int:
    """:func:`more_clean_reruns_needed` for checked counts, ``eps``, ``delta`` and their floor."""
    lo = max(0, n_min - n)  # below this many more, N < N_min
    if k == 0:
        return lo
    if certifies_at(k, n + lo, e, d, n_min):
        return lo
    hi = max(2 * lo, lo + 1)
    while not certifies_at(k, n + hi, e, d, n_min):
        lo = hi
        hi *= 2
        if n + hi > _MAX_SEARCH:
            raise StatsInputError(
                f"{k} failures in {n} reruns cannot be certified at eps = {e!r} with fewer than 2^53 reruns.")
    while hi - lo > 1:  # not certified at lo, certified at hi
        mid = (lo + hi) // 2
        if certifies_at(k, n + mid, e, d, n_min):
            hi = mid
        else:
            lo = mid
    return hi


def budget_floor(e: float, d: float) -> int:
    """:func:`check_budget` for an already checked ``eps`` and ``delta``."""
    n_min = floor_of(e, d)
    if n_min > MAX_RERUNS:
        raise StatsInputError(
            f"eps = {e!r} is too small to certify with at most {MAX_RERUNS_TEXT} reruns "
            f"(the sample floor at delta = {d!r} is {approx_count(n_min)} reruns).")
    return n_min


def check_budget(eps: float, delta: float) -> int:
    """The sample floor, refusing a budget no count up to ``MAX_RERUNS`` could certify."""
    return budget_floor(check_eps(eps), check_delta(delta))


def approx_count(n: int) -> str:
    """A large count, briefly: 2.3e+16 (also beyond the float range)."""
    return f"{float(n):.3g}" if n < 10**300 else f"{Decimal(n).normalize():.2g}"


def more_clean_reruns_needed(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> int:
    """How many further reruns, all without failure, would make ``(k, n)`` release-supported.

    The smallest ``m >= 0`` with ``n + m >= N_min`` and ``U(k, n + m) <= eps``; ``0`` when already
    supported. ``max(0, N_min - n)`` for ``k = 0``; otherwise an exact search over the bound
    (``U`` falls as clean reruns are added). Refuses an ``eps`` whose floor exceeds ``MAX_RERUNS``.

    >>> more_clean_reruns_needed(3, 30), more_clean_reruns_needed(0, 21)
    (35, 1)
    """
    k_i, n_i = check_counts(k, n)
    e, d = check_eps(eps), check_delta(delta)
    return more_needed(k_i, n_i, e, d, budget_floor(e, d))


def capped(upper: float, eps: float, verdict: str) -> float:
    """``upper`` as stated beside ``verdict``: a certified ``U`` is at most ε exactly, so where its
    float (rounded up) lies just above ε, at an exact tie, ε is stated instead; else ``upper``."""
    return float(eps) if verdict == SUPPORTED and upper > eps else upper


def shown_beside(value: float, eps: float, above: bool, digits: int = 4, fixed: bool = False) -> str:
    """A bound as printed beside its verdict, never contradicting it: ``digits`` significant
    digits (``fixed``: decimals), more when fewer would read on the wrong side of ε (``above``:
    the verdict says the bound exceeds ε). At an exact tie the float can read above ε while the exact bound equals it:
    then ``"<ε> = ε (tie; certified)"``.

    >>> shown_beside(0.0994, 0.1, above=False), shown_beside(0.10004, 0.1, above=True)
    ('0.0994', '0.10004')
    >>> shown_beside(0.30000000000000004, 0.3, above=False)
    '0.3'
    >>> shown_beside(0.1004, 0.1, above=True, digits=3, fixed=True)
    '0.1004'
    >>> shown_beside(0.125, 0.12, above=False)    # only where the float of U and ε part
    '0.12 = ε (tie; certified)'
    """
    if not math.isfinite(value):
        return str(value)
    for d in range(digits, 18 if not fixed else 24):
        text = f"{value:.{d}f}" if fixed else f"{value:.{d}g}"
        if (float(text) > eps) == above:
            return text
    if not above:
        return f"{eps!r} = ε (tie; certified)"
    return f"{value!r} (> ε)"


@dataclass(frozen=True)
class TailBound:
    """The recipe-card bound for one cell.

    Fields: ``k`` failures out of ``n`` reruns (unfinished reruns counted as failures), ``eps``
    (failure budget ε_ship), ``delta`` (statistical risk δ_stat), one-sided ``upper`` (U) and
    ``lower`` (L) Clopper–Pearson bounds at confidence ``1 - delta`` (``upper`` is ε itself where
    the verdict certifies an exact tie whose float lies just above ε, :func:`capped`),
    ``sample_floor`` (N_min),
    ``more_clean_reruns_needed`` (0 when already supported) and the ``verdict``.
    """

    k: int
    n: int
    eps: float
    delta: float
    upper: float
    lower: float
    sample_floor: int
    more_clean_reruns_needed: int
    verdict: str

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return asdict(self)


def tail_bound(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> TailBound:
    """Compute the one-sided Clopper–Pearson card for ``k`` failures in ``n`` reruns.

    Scalars only (use :func:`~recipe_audit.stats.bounds.clopper_pearson_upper` /
    :func:`~recipe_audit.stats.verdicts.verdict_array` for arrays). The whole ``delta`` is in one
    tail for each bound. Counts go up to ``MAX_RERUNS`` (10^15); ``delta`` must be below 0.5.

    >>> tb = tail_bound(0, 22, eps=0.10, delta=0.10)
    >>> round(tb.upper, 4), tb.sample_floor, tb.verdict
    (0.0994, 22, 'release-supported')
    >>> tail_bound(0, 21).verdict
    'insufficient-evidence'
    >>> tb = tail_bound(3, 30)
    >>> round(tb.upper, 4), round(tb.lower, 4), tb.verdict, tb.more_clean_reruns_needed
    (0.2093, 0.0373, 'unsupported', 35)

    References: Clopper & Pearson (1934), Biometrika 26(4), 404-413.
    """
    for name, value in (("k", k), ("n", n)):
        if getattr(value, "ndim", 0) and not isinstance(value, (int, float)):
            raise StatsInputError(
                f"tail_bound takes a single k and a single n, not an array {name}; "
                "use clopper_pearson_upper for arrays.")
    k_i, n_i = check_counts(k, n)
    e, d = check_eps(eps), check_delta(delta)
    n_min = budget_floor(e, d)
    upper = upper_bound(k_i, n_i, d)
    lower = lower_bound(k_i, n_i, d)
    v = _verdict(k_i, n_i, e, d, n_min, lower)
    return TailBound(
        k=k_i, n=n_i, eps=e, delta=d, upper=capped(upper, e, v), lower=lower, sample_floor=n_min,
        more_clean_reruns_needed=more_needed(k_i, n_i, e, d, n_min), verdict=v,
    )
