"""An anytime-valid card: a confidence sequence for the rerun failure probability, valid at every
number of reruns at once, so that seeds may be added until the card looks good.

Reading the ordinary (fixed-N) bound after every batch of seeds and stopping when it first reads
``release-supported`` ships a recipe that is over budget far more often than δ: every look is
another chance for an unlucky run of successes. A *confidence sequence* ``(L_n, U_n)`` holds at
every ``n`` simultaneously,

    ``P(β <= U_n for every n >= 1) >= 1 - δ``  and  ``P(β >= L_n for every n >= 1) >= 1 - δ``,

so a sweep may look as often as it likes, stop the moment ``U_n <= ε`` (release-supported) or
``L_n > ε`` (strong-unsupported), and keep the guarantee. The looks need not be planned: the
bounds depend on ``(k, n)`` alone, and hold at any look, however the looks were chosen.

**Why one module of about 500 lines.** The mixture statistics, the anytime floor, the card of one
cell, the replay of an open-ended sweep and its exact operating characteristics all decide on the
same private quantities (``M_n^+``, ``M_n^-`` at ε, the cached bounds); a split would make those
public for one caller each. The floor's search, the binomial tails and the checks are shared with
the fixed-N card (:mod:`.floors`, :mod:`.tails`, :mod:`.checks`).


**Construction** (a one-sided beta-binomial mixture). For a candidate failure probability ``p``,
average the likelihood ratio of the observed failures against ``p`` over the alternatives on one
side of it, with a uniform prior:

    ``M_n^+(p) = (1/p) ∫_0^p θ^k (1 - θ)^(n - k) dθ / (p^k (1 - p)^(n - k))
              = P(Binomial(n + 1, p) >= k + 1) / ((n + 1) p P(Binomial(n, p) = k))``.

When the true failure probability is ``p``, ``M_n^+(p)`` is a nonnegative martingale starting at 1
(an average of likelihood ratios), and Ville's inequality gives ``P(M_n^+(p) >= 1/δ for some n) <= δ``.
So ``U_n`` = the smallest ``p`` at which ``M_n^+(p) >= 1/δ`` is an upper bound valid at every ``n``
at once. The lower bound mirrors it with the prior on ``[p, 1]``:
``M_n^-(p) = P(Binomial(n + 1, p) <= k) / ((n + 1) (1 - p) P(Binomial(n, p) = k))`` and ``L_n`` the
largest ``p`` with ``M_n^-(p) >= 1/δ``. Each bound carries the whole δ in its own tail, like the
fixed-N card. ``M_n^+`` increases in ``p`` above ``k/n`` and ``M_n^-`` decreases below it
(checked over a grid in the tests), so each bound is found by bisection over the floating-point
numbers, rounded to the conservative side; ``U_n = 1`` when ``k = n`` and ``L_n = 0`` when ``k = 0``.

**Its price.** ``U_n`` is wider than the fixed-N bound, so the anytime floor (the fewest reruns at
which a sweep with no failure is certified) is larger than ``N_min``: 34 against 22 at
ε = δ = 0.1. The anytime verdict is ``strong-unsupported`` when ``L_n > ε``,
``insufficient-evidence`` below the anytime floor, ``release-supported`` when ``U_n <= ε``,
``unsupported`` otherwise.

The scalar statistics are pure Python (the binomial terms of :mod:`.exact`), so ``recipe-audit
bound --anytime`` imports neither NumPy nor SciPy; :func:`stop_probabilities` (exact operating
characteristics of a sequential rule) uses NumPy and SciPy.

References: H. Robbins (1970), "Statistical methods related to the law of the iterated
logarithm", Ann. Math. Statist. 41(5), 1397-1409; J. Ville (1939), *Étude critique de la notion de
collectif*; S. R. Howard, A. Ramdas, J. McAuliffe and J. Sekhon (2021), "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2), 1055-1080.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

from recipe_audit.stats import exact
from recipe_audit.stats.checks import (
    MAX_RERUNS,
    MAX_RERUNS_TEXT,
    check_count,
    check_counts,
    check_delta,
    check_eps,
)
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.floors import checked_floor, first_passing, floor_of
from recipe_audit.stats.interval import Interval
from recipe_audit.stats.tails import (
    TailTooLong,
    finite,
    float_bits,
    float_from_bits,
    last_true,
    log_cdf,
    log_dbinom,
    log_sf,
    scipy_special,
)

__all__ = [
    "ANYTIME_METHOD",
    "ANYTIME_RULE",
    "AnytimeBound",
    "AnytimeLook",
    "AnytimeSequence",
    "anytime_bound",
    "anytime_bound_at",
    "anytime_lower",
    "anytime_sample_floor",
    "anytime_sample_floor_at",
    "anytime_sequence",
    "anytime_thresholds",
    "anytime_upper",
    "anytime_verdict",
    "check_max_reruns",
    "stop_probabilities",
]

#: How the bounds are built, in words (written on the card).
ANYTIME_METHOD = "confidence sequence: one-sided beta-binomial mixture (uniform prior), Ville's inequality"
#: The stopping rule of an open-ended sweep, in words.
ANYTIME_RULE = ("after every batch, stop when U_n <= eps (release-supported) or L_n > eps "
                "(strong-unsupported), else when the maximum number of reruns is reached")

_E_INV = math.exp(-1.0)


# ---------------------------------------------------------------------------------------------
# The mixture statistics, in logs
# ---------------------------------------------------------------------------------------------


def _log_pmf(k: int, n: int, p: float) -> float:
    """ln P(Binomial(n, p) = k) for ``0 < p < 1``."""
    if k == 0:
        return n * math.log1p(-p)
    if k == n:
        return n * math.log(p)
    return log_dbinom(k, n, p, 1.0 - p)


def _log_m_up(k: int, n: int, p: float) -> float:
    """ln M_n^+(p) for ``k / n < p < 1`` and ``k < n``."""
    if k == 0:
        log_tail = math.log(-math.expm1((n + 1) * math.log1p(-p)))
    else:
        try:  # P(X >= k + 1) = 1 - P(X <= k) for X ~ Binomial(n + 1, p), whose mean exceeds k
            log_tail = math.log(-math.expm1(log_cdf(k, n + 1, p)))
        except TailTooLong:
            # I_p(k + 1, n + 1 - k); SciPy's bdtrc takes n as a C int and gives NaN above 2**31 - 1
            log_tail = math.log(finite(float(scipy_special().betainc(float(k + 1), float(n + 1 - k), p)),
                                             f"The confidence sequence for {k} failures in {n} reruns"))
    return log_tail - math.log(n + 1) - math.log(p) - _log_pmf(k, n, p)


def _log_m_lo(k: int, n: int, p: float) -> float:
    """ln M_n^-(p) for ``0 < p < k / n`` and ``k > 0``."""
    if k == n:
        log_tail = math.log(-math.expm1((n + 1) * math.log(p)))
    else:
        try:  # P(X <= k) = 1 - P(X >= k + 1) for X ~ Binomial(n + 1, p), whose mean is below k + 1
            log_tail = math.log(-math.expm1(log_sf(k + 1, n + 1, p)))
        except TailTooLong:
            log_tail = math.log(finite(float(scipy_special().betaincc(float(k + 1), float(n + 1 - k), p)),
                                             f"The confidence sequence for {k} failures in {n} reruns"))
    return log_tail - math.log(n + 1) - math.log1p(-p) - _log_pmf(k, n, p)


def _upper(k: int, n: int, d: float) -> float:
    if k == n:
        return 1.0
    t = -math.log(d)
    # the largest float that is not rejected, plus one: the smallest rejected one
    last = last_true(float_bits(k / n), float_bits(1.0),
                           lambda b: _log_m_up(k, n, float_from_bits(b)) < t)
    return float_from_bits(last + 1)


def _lower(k: int, n: int, d: float) -> float:
    if k == 0:
        return 0.0
    t = -math.log(d)
    return float_from_bits(last_true(0, float_bits(k / n),
                                                 lambda b: _log_m_lo(k, n, float_from_bits(b)) >= t))


@lru_cache(maxsize=4096)
def _bounds(k: int, n: int, d: float) -> tuple[float, float]:
    return _upper(k, n, d), _lower(k, n, d)


def anytime_upper(k, n, delta=DEFAULT_DELTA) -> float:
    """The confidence sequence's upper bound ``U_n`` for ``k`` failures in ``n`` reruns.

    >>> round(anytime_upper(0, 34), 4), round(anytime_upper(3, 59), 4), anytime_upper(5, 5)
    (0.0999, 0.1528, 1.0)
    """
    k_i, n_i = check_counts(k, n)
    return _bounds(k_i, n_i, check_delta(delta))[0]


def anytime_lower(k, n, delta=DEFAULT_DELTA) -> float:
    """The confidence sequence's lower bound ``L_n`` for ``k`` failures in ``n`` reruns.

    >>> anytime_lower(0, 59), round(anytime_lower(10, 20), 4)
    (0.0, 0.2333)
    """
    k_i, n_i = check_counts(k, n)
    return _bounds(k_i, n_i, check_delta(delta))[1]


# ---------------------------------------------------------------------------------------------
# The anytime floor
# ---------------------------------------------------------------------------------------------


def _clean_certifies(n: int, e: float, d: float) -> bool:
    """``U_n(0, n) <= eps``, decided as ``M_n^+(eps) >= 1/delta`` with no failure."""
    return _log_m_up(0, n, e) >= -math.log(d)


_SCAN_MAX = 10**6


@lru_cache(maxsize=256)
def _floor(e: float, d: float) -> int:
    n_min = floor_of(e, d)  # no valid test certifies a clean sample below the fixed-N floor
    # For n <= 1/eps - 1, M^+(eps) <= (1 - eps)^-n <= e, so nothing is certified there when
    # delta < 1/e; and M^+(eps) increases with n from n = 1/eps - 2 on. Below that (delta >= 1/e
    # only) the floor is searched one rerun at a time.
    start = max(n_min, 1)
    if d >= _E_INV:
        stop = max(start, int(1.0 / e) + 1)
        if stop - start > _SCAN_MAX:
            raise StatsInputError(f"eps = {e!r} is too small for the anytime floor at delta = {d!r} "
                                  "(use delta below 0.36).")
        for n in range(start, stop + 1):
            if _clean_certifies(n, e, d):
                return n
        start = stop
    else:
        start = max(start, int(1.0 / e) - 1)
    floor = first_passing(lambda n: _clean_certifies(n, e, d), start - 1, start, limit=4 * MAX_RERUNS)
    if floor is None:
        raise StatsInputError(f"eps = {e!r} is too small to certify with at most {MAX_RERUNS_TEXT} "
                              "reruns in an open-ended sweep.")
    return floor


def _check_floor(e: float, d: float) -> int:
    return checked_floor(_floor(e, d), e, d, where=" in an open-ended sweep", name="its floor")


def anytime_sample_floor(eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> int:
    """The anytime floor: the fewest reruns at which a sweep with no failure reads ``U_n <= ε``.

    >>> anytime_sample_floor(0.1, 0.1), anytime_sample_floor(0.05, 0.05)
    (34, 88)
    """
    return anytime_sample_floor_at(check_eps(eps), check_delta(delta))


def anytime_sample_floor_at(e: float, d: float) -> int:
    """:func:`anytime_sample_floor` for ``eps`` and ``delta`` checked already."""
    return _check_floor(e, d)


# ---------------------------------------------------------------------------------------------
# The anytime card of one cell
# ---------------------------------------------------------------------------------------------


def _below(k: int, n: int, e: float, d: float) -> bool:
    """``U_n <= eps``, decided on the mixture at eps itself (U_n is its smallest rejected value)."""
    return k < n * e and _log_m_up(k, n, e) >= -math.log(d)


def _above(k: int, n: int, e: float, d: float) -> bool:
    """``L_n > eps``: the next float above eps is rejected (L_n is the largest rejected value)."""
    p = math.nextafter(e, 1.0)
    return p * n < k and _log_m_lo(k, n, p) >= -math.log(d)


def _verdict(k: int, n: int, e: float, d: float, floor: int) -> str:
    if _above(k, n, e, d):
        return exact.STRONG_UNSUPPORTED
    if n < floor:
        return exact.INSUFFICIENT
    return exact.SUPPORTED if _below(k, n, e, d) else exact.UNSUPPORTED


@dataclass(frozen=True)
class AnytimeBound:
    """The anytime card of one cell: ``k`` failures in ``n`` reruns.

    ``upper``, ``lower``: the confidence sequence's ``U_n`` and ``L_n`` (each valid at every ``n``
    at once with probability ``1 - delta``); ``sample_floor``: the anytime floor; ``verdict``: the
    anytime verdict; ``pointwise_*``: the fixed-N card on the same counts, valid only for an ``n``
    fixed before the sweep; ``method``: the construction, in words.
    """

    k: int
    n: int
    eps: float
    delta: float
    upper: float
    lower: float
    sample_floor: int
    verdict: str
    pointwise_upper: float
    pointwise_lower: float
    pointwise_sample_floor: int
    pointwise_verdict: str
    method: str = ANYTIME_METHOD

    @property
    def interval(self) -> Interval:
        """``[lower, upper]`` as the :class:`~recipe_audit.stats.interval.Interval` every result shares."""
        return Interval(self.lower, self.upper)

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return asdict(self)


def anytime_bound(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> AnytimeBound:
    """The anytime card for ``k`` failures in ``n`` reruns.

    >>> a = anytime_bound(0, 34)
    >>> a.verdict, a.sample_floor, a.pointwise_sample_floor
    ('release-supported', 34, 22)
    >>> anytime_bound(0, 30).verdict, anytime_bound(0, 30).pointwise_verdict
    ('insufficient-evidence', 'release-supported')
    """
    k_i, n_i = check_counts(k, n)
    return anytime_bound_at(k_i, n_i, check_eps(eps), check_delta(delta))


def anytime_bound_at(k: int, n: int, e: float, d: float) -> AnytimeBound:
    """:func:`anytime_bound` for counts, ``eps`` and ``delta`` checked already."""
    k_i, n_i = k, n
    floor = _check_floor(e, d)
    upper, lower = _bounds(k_i, n_i, d)
    pw = exact.tail_bound_at(k_i, n_i, e, d)
    v = _verdict(k_i, n_i, e, d, floor)
    return AnytimeBound(k=k_i, n=n_i, eps=e, delta=d, upper=exact.capped(upper, e, v), lower=lower,
                        sample_floor=floor, verdict=v, pointwise_upper=pw.upper,
                        pointwise_lower=pw.lower, pointwise_sample_floor=pw.sample_floor,
                        pointwise_verdict=pw.verdict)


def anytime_verdict(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> str:
    """The anytime verdict for ``k`` failures in ``n`` reruns.

    >>> anytime_verdict(0, 34), anytime_verdict(0, 33), anytime_verdict(8, 20)
    ('release-supported', 'insufficient-evidence', 'strong-unsupported')
    """
    k_i, n_i = check_counts(k, n)
    e, d = check_eps(eps), check_delta(delta)
    return _verdict(k_i, n_i, e, d, _check_floor(e, d))


def anytime_thresholds(n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> tuple[int, int]:
    """``(supported_max_k, strong_min_k)`` at ``n`` reruns: the anytime verdict is
    ``release-supported`` exactly for ``k <= supported_max_k`` (-1: never) and
    ``strong-unsupported`` exactly for ``k >= strong_min_k`` (``n + 1``: never).

    >>> anytime_thresholds(59), anytime_thresholds(20)
    ((1, 14), (-1, 7))
    """
    n_i = check_count("reruns n", n, minimum=1)
    e, d = check_eps(eps), check_delta(delta)
    return _thresholds(n_i, e, d)


@lru_cache(maxsize=4096)
def _thresholds(n: int, e: float, d: float) -> tuple[int, int]:
    floor = _check_floor(e, d)

    def supported(k: int) -> bool:
        return _verdict(k, n, e, d, floor) == exact.SUPPORTED

    def strong(k: int) -> bool:
        return _above(k, n, e, d)

    # U_n and L_n grow with k: bisection on k
    lo, hi = -1, min(n, int(n * e) + 1)  # supported needs k / n < U_n <= eps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if supported(mid) else (lo, mid)
    sup_max = lo
    lo, hi = int(n * e) - 1, n + 1  # strong needs L_n > eps, so k / n > eps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if strong(mid) else (mid, hi)
    return sup_max, hi


# ---------------------------------------------------------------------------------------------
# An open-ended sweep: looks after every batch
# ---------------------------------------------------------------------------------------------


def check_max_reruns(max_reruns, batch_size=1) -> tuple[int, int]:
    """Validate an open-ended sweep's maximum number of reruns and its batch size."""
    if max_reruns is None:
        raise StatsInputError("an open-ended (anytime) sweep needs a maximum number of reruns.")
    b = check_count("the batch size", batch_size, minimum=1)
    m = check_count("the maximum number of reruns", max_reruns, minimum=1)
    return m, b


@dataclass(frozen=True)
class AnytimeLook:
    """One look of an open-ended sweep: ``k`` failures among the first ``n`` reruns."""

    n: int
    k: int
    upper: float
    lower: float
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AnytimeSequence:
    """An open-ended sweep replayed over its reruns in launch order, looking after every batch.

    ``looks``: every look up to and including the one where it stops; ``stop``: whether the rule
    stops it (``stop_reason``: the verdict that stopped it, ``"maximum"`` when ``max_reruns`` was
    reached, None while it would go on); ``card``: the anytime card at the last look.
    """

    eps: float
    delta: float
    batch_size: int
    max_reruns: int
    sample_floor: int
    looks: tuple[AnytimeLook, ...]
    stop: bool
    stop_reason: str | None
    card: AnytimeBound
    rule: str = ANYTIME_RULE
    method: str = ANYTIME_METHOD

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return {"eps": self.eps, "delta": self.delta, "batch_size": self.batch_size,
                "max_reruns": self.max_reruns, "sample_floor": self.sample_floor,
                "looks": [x.to_dict() for x in self.looks], "stop": self.stop, "stop_reason": self.stop_reason,
                "card": self.card.to_dict(), "rule": self.rule, "method": self.method}


def _stop_reason(verdict: str, n: int, max_reruns: int) -> str | None:
    if verdict in (exact.SUPPORTED, exact.STRONG_UNSUPPORTED):
        return verdict
    return "maximum" if n >= max_reruns else None


def anytime_sequence(failures: Sequence[bool], eps=DEFAULT_EPS, delta=DEFAULT_DELTA, batch_size=5,
                     max_reruns=None) -> AnytimeSequence:
    """Replay an open-ended sweep: ``failures`` are the reruns' outcomes in launch order (True =
    failed, an unfinished rerun included); the sweep looks after every ``batch_size`` reruns (and at
    the last one given) and stops by :data:`ANYTIME_RULE`.

    >>> s = anytime_sequence([False] * 50, batch_size=5, max_reruns=200)
    >>> s.stop, s.stop_reason, [x.n for x in s.looks][-1]
    (True, 'release-supported', 35)
    """
    m, b = check_max_reruns(max_reruns, batch_size)
    if isinstance(failures, (str, bytes)) or not isinstance(failures, Sequence) and not hasattr(failures, "__len__"):
        raise StatsInputError("failures must be a sequence of booleans (True = the rerun failed).")
    outcomes = list(failures)
    if not outcomes:
        raise StatsInputError("an open-ended sweep needs at least one rerun to look at.")
    if any(not isinstance(x, (bool,)) and type(x).__name__ != "bool_" for x in outcomes):
        raise StatsInputError("failures must be booleans (True = the rerun failed).")
    if len(outcomes) > m:
        raise StatsInputError(f"the sweep has {len(outcomes)} reruns, more than its maximum of {m}.")
    e, d = check_eps(eps), check_delta(delta)
    floor = _check_floor(e, d)
    looks = []
    k = 0
    reason = None
    for n, failed in enumerate(outcomes, start=1):
        k += bool(failed)
        if n % b and n != len(outcomes):
            continue
        upper, lower = _bounds(k, n, d)
        v = _verdict(k, n, e, d, floor)
        looks.append(AnytimeLook(n=n, k=k, upper=upper, lower=lower, verdict=v))
        reason = _stop_reason(v, n, m)
        if reason is not None:
            break
    last = looks[-1]
    return AnytimeSequence(eps=e, delta=d, batch_size=b, max_reruns=m, sample_floor=floor, looks=tuple(looks),
                           stop=reason is not None, stop_reason=reason, card=anytime_bound(last.k, last.n, e, d))


# ---------------------------------------------------------------------------------------------
# Exact operating characteristics of a sequential rule
# ---------------------------------------------------------------------------------------------


def stop_probabilities(beta: float, looks, supported_max_k, strong_min_k) -> dict:
    """Exact probabilities of a sequential rule that looks at the reruns counts ``looks``
    (increasing), ships at look ``j`` when ``k <= supported_max_k[j]`` and stops as bad when
    ``k >= strong_min_k[j]``, for reruns failing independently with probability ``beta``.

    Forward recursion over the distribution of failures among the sweeps still running (a
    binomial step between looks, then the stopped mass removed). Returns ``p_supported`` (the
    probability it ever ships), ``p_strong``, ``p_neither`` (it reaches the last look undecided)
    and ``mean_reruns`` (the expected reruns it launches).

    >>> r = stop_probabilities(0.0, [5, 10, 15], [-1, 0, 0], [6, 11, 16])
    >>> r["p_supported"], r["mean_reruns"]
    (1.0, 10.0)
    """
    import numpy as np
    from scipy import stats

    b = float(beta)
    if not 0.0 <= b <= 1.0:
        raise StatsInputError(f"the failure probability must lie in [0, 1], got {beta!r}.")
    ns = np.asarray(looks, dtype=np.int64)
    a = np.asarray(supported_max_k, dtype=np.int64)
    s = np.asarray(strong_min_k, dtype=np.int64)
    if ns.ndim != 1 or ns.size == 0 or np.any(np.diff(ns) <= 0) or ns[0] < 1:
        raise StatsInputError("looks must be increasing numbers of reruns, starting at 1 or more.")
    if a.shape != ns.shape or s.shape != ns.shape:
        raise StatsInputError("the thresholds need one value per look.")
    dist = np.zeros(int(ns[-1]) + 1)
    dist[0] = 1.0
    prev = 0
    p_sup = p_strong = mean = 0.0
    for j, n in enumerate(ns):
        step = int(n) - prev
        dist = np.convolve(dist, stats.binom.pmf(np.arange(step + 1), step, b))[: dist.size]
        prev = int(n)
        ks = np.arange(dist.size)
        ship = dist[ks <= a[j]].sum()
        bad = dist[ks >= s[j]].sum()
        p_sup += ship
        p_strong += bad
        mean += int(n) * (ship + bad)
        dist[(ks <= a[j]) | (ks >= s[j])] = 0.0
    rest = float(dist.sum())
    mean += int(ns[-1]) * rest
    return {"p_supported": float(p_sup), "p_strong": float(p_strong), "p_neither": rest, "mean_reruns": float(mean)}
