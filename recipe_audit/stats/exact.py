"""The statistics of one cell, exactly and in pure Python: the one-sided Clopper–Pearson bounds
``U`` and ``L`` for one ``(k, n)``, the verdict, the further clean reruns needed and ``tail_bound``.

Nothing here imports NumPy or SciPy for the counts a fine-tuning sweep has (``recipe-audit bound``
answers in well under a second); the array versions live in :mod:`.bounds`. The numbers it takes
are checked in :mod:`.checks`, the sample floor ``N_min`` is computed in :mod:`.floors`, the binomial
tails are summed in :mod:`.tails`.

**The bounds.** ``U`` is the ``1 - delta`` quantile of ``Beta(k + 1, n - k)``, i.e. the ``p`` with
``P(Binomial(n, p) <= k) = delta``; ``L`` is the ``delta`` quantile of ``Beta(k, n - k + 1)``, the
``p`` with ``P(Binomial(n, p) >= k) = delta``. Each is the float found by bisection over the
floating-point numbers themselves: ``U`` is the smallest float with ``P(X <= k) <= delta``, ``L``
the largest with ``P(X >= k) <= delta`` (each rounded to the conservative side). The closed forms
``U(0, n) = 1 - delta**(1/n)`` (evaluated as ``-expm1(ln(delta) / n)``, accurate for any ``n``) and
``L(n, n) = delta**(1/n)`` are used at the ends. When a tail would need more than a few thousand
terms SciPy's incomplete beta functions are used instead.

**The verdict** is decided on the same quantities: ``U <= eps`` is ``P(Binomial(n, eps) <= k) <=
delta`` (for ``k = 0`` it is ``n >= N_min``, exactly; for ``k >= 1`` a tail within rounding of
``delta`` is summed again in rational arithmetic, so an exact tie certifies), and the verdict, the
floor and the number of further clean reruns always agree (that number is found by the one floor
search, :func:`~.floors.first_passing`). A tail that cannot be computed (a NaN from a library
routine) is refused with one sentence, never read as a verdict.

References: C. J. Clopper and E. S. Pearson (1934), Biometrika 26(4), 404-413; C. Loader (2000),
"Fast and accurate computation of binomial probabilities".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import lru_cache

from recipe_audit.stats.checks import check_counts, check_delta, check_eps, rational
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.floors import budget_floor, first_passing, floor_of
from recipe_audit.stats.interval import Interval
from recipe_audit.stats.tails import (
    MAX_TERMS,
    TailTooLong,
    finite,
    float_bits,
    float_from_bits,
    last_true,
    log_cdf,
    log_sf,
    scipy_special,
)

__all__ = [
    "release_rule",
    "INSUFFICIENT",
    "REFUSED_SHIFT",
    "STRONG_UNSUPPORTED",
    "SUPPORTED",
    "UNSUPPORTED",
    "VERDICTS",
    "TailBound",
    "certifies",
    "lower_at",
    "lower_bound",
    "more_clean_reruns_needed",
    "tail_bound",
    "tail_bound_at",
    "upper_at",
    "upper_bound",
    "verdict",
]

INSUFFICIENT = "insufficient-evidence"
SUPPORTED = "release-supported"
STRONG_UNSUPPORTED = "strong-unsupported"
UNSUPPORTED = "unsupported"
REFUSED_SHIFT = "refused-shift"
VERDICTS = (INSUFFICIENT, SUPPORTED, STRONG_UNSUPPORTED, UNSUPPORTED, REFUSED_SHIFT)

_MAX_SEARCH = 2**53  # further clean reruns are searched up to this total


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


def upper_at(k: int, n: int, d: float) -> float:
    """:func:`upper_bound` for counts and ``delta`` checked already (as :mod:`.checks` returns them)."""
    if k == n:
        return 1.0
    if k == 0:
        return clean_upper(n, d)
    return _upper_mid(k, n, d)


def upper_bound(k, n, delta) -> float:
    """One-sided exact upper bound ``U`` for ``k`` failures in ``n`` reruns (scalars).

    >>> round(upper_bound(3, 30, 0.1), 6), upper_bound(5, 5, 0.1)
    (0.209299, 1.0)
    """
    k_i, n_i = check_counts(k, n)
    return upper_at(k_i, n_i, check_delta(delta))


def lower_at(k: int, n: int, d: float) -> float:
    """:func:`lower_bound` for counts and ``delta`` checked already (as :mod:`.checks` returns them)."""
    if k == 0:
        return 0.0
    if k == n:
        return d ** (1.0 / n)
    return _lower_mid(k, n, d)


def lower_bound(k, n, delta) -> float:
    """One-sided exact lower bound ``L`` for ``k`` failures in ``n`` reruns (scalars).

    >>> round(lower_bound(3, 30, 0.1), 6), lower_bound(0, 5, 0.1)
    (0.037308, 0.0)
    """
    k_i, n_i = check_counts(k, n)
    return lower_at(k_i, n_i, check_delta(delta))


#: The size of the exact rational sum a tie is decided by (bits of the binomial's denominator).
_EXACT_TIE_BITS = 400_000
_TIE_BAND = 1e-9  # tails this close to delta (relatively) are summed again exactly


def _split(n: int, en: int, an: int, lo: int, hi: int) -> tuple[int, int, int]:
    """Binary splitting of ``sum_{j=lo+1}^{hi} prod_{i=lo+1}^{j} p_i / q_i`` with ``p_i = (n - i + 1) en``
    and ``q_i = i an`` (the ratio of consecutive binomial terms): ``(prod p, prod q, T)``, the sum
    being ``T / prod q``. Its cost is a few products of the final size, not ``k`` of them."""
    if hi - lo == 1:
        p = (n - hi + 1) * en
        return p, hi * an, p
    mid = (lo + hi) // 2
    p1, q1, t1 = _split(n, en, an, lo, mid)
    p2, q2, t2 = _split(n, en, an, mid, hi)
    return p1 * p2, q1 * q2, t1 * q2 + p1 * t2


def _exact_cdf_at_most(k: int, n: int, E: Fraction, D: Fraction) -> bool | None:
    """``P(Binomial(n, E) <= k) <= D`` in integer arithmetic, on the exact numbers ``E`` and ``D``
    (:func:`rational`); None when the sum would be too large to take (more than ``MAX_TERMS``
    terms, or a denominator ``c**n`` of more than ``_EXACT_TIE_BITS`` bits)."""
    if n * max(E.denominator.bit_length(), 1) > _EXACT_TIE_BITS or k > MAX_TERMS:
        return None
    return _exact_sum_at_most(k, n, E, D)


@lru_cache(maxsize=64)
def _exact_sum_at_most(k: int, n: int, E: Fraction, D: Fraction) -> bool:
    """With ``E = e/c`` and ``1 - E = a/c``: ``P(X <= k) = a**n (1 + T/Q) / c**n``, where ``T/Q``
    sums the ratios of the terms to the first (:func:`_split`), so the test is one comparison of
    integers: well under a second for every sum :func:`_exact_cdf_at_most` takes."""
    en, an, c = E.numerator, (1 - E).numerator, E.denominator  # E and 1 - E share a denominator
    q, t = (1, 0) if k == 0 else _split(n, en, an, 0, k)[1:]
    return an**n * (q + t) * D.denominator <= D.numerator * q * c**n


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
        decided = _exact_cdf_at_most(k, n, rational(e), rational(d))
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
    return _verdict(k_i, n_i, e, d, floor_of(e, d), lower_at(k_i, n_i, d))


def more_needed(k: int, n: int, e: float, d: float, n_min: int) -> int:
    """:func:`more_clean_reruns_needed` for checked counts, ``eps``, ``delta`` and their floor."""
    lo = max(0, n_min - n)  # below this many more, N < N_min
    if k == 0 or certifies_at(k, n + lo, e, d, n_min):
        return lo
    more = first_passing(lambda m: certifies_at(k, n + m, e, d, n_min), lo, max(2 * lo, lo + 1),
                         limit=_MAX_SEARCH - n)
    if more is None:
        raise StatsInputError(
            f"{k} failures in {n} reruns cannot be certified at eps = {e!r} with fewer than 2^53 reruns.")
    return more


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


#: How far above ε the float of a certified bound may lie (an exact tie, rounded up) to be stated as ε.
_TIE_ROUNDING = 1e-9


def capped(upper: float, eps: float, verdict: str) -> float:
    """``upper`` as stated beside ``verdict``: a certified ``U`` is at most ε exactly, so where its
    float (rounded up) lies just above ε, at an exact tie, ε is stated instead; else ``upper``.
    Never a cap: a certified bound further above ε than rounding is an error of the caller (the
    bound was taken at another level than the one that certified it), not a number to state."""
    if verdict == SUPPORTED and upper > eps:
        if upper > eps * (1 + _TIE_ROUNDING):
            raise AssertionError(f"a certified upper bound {upper!r} lies above eps = {eps!r}: it is not the "
                                 "bound at the level that certified it")
        return float(eps)
    return upper


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

    @property
    def interval(self) -> Interval:
        """``[lower, upper]`` as the :class:`~recipe_audit.stats.interval.Interval` every result shares."""
        return Interval(self.lower, self.upper)

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
    return tail_bound_at(k_i, n_i, check_eps(eps), check_delta(delta))


def tail_bound_at(k: int, n: int, e: float, d: float) -> TailBound:
    """:func:`tail_bound` for counts, ``eps`` and ``delta`` checked already (as :mod:`.checks`
    returns them: at a card's door, :func:`~recipe_audit.stats.options.audit_options`)."""
    n_min = budget_floor(e, d)
    lower = lower_at(k, n, d)
    v = _verdict(k, n, e, d, n_min, lower)
    return TailBound(
        k=k, n=n, eps=e, delta=d, upper=capped(upper_at(k, n, d), e, v), lower=lower, sample_floor=n_min,
        more_clean_reruns_needed=more_needed(k, n, e, d, n_min), verdict=v,
    )
