"""A simultaneous one-sided upper band on the rerun failure curve: every τ at once, so the bar may
be chosen after looking at the data.

**Why one module of about 550 lines.** The band's exact coverage, its constants, its sample floor
and its bounds at bars are one calibration: the constants are solved on the coverage, the floor is
checked on the band itself and the bounds are read off its levels, so splitting them would put
private numbers on public doors; a sixth of the lines is this docstring's derivation.


Setting. ``n`` reruns give metrics ``X_1..X_n``; an unfinished rerun (NaN or ±inf) fails at every
bar. For a bar ``τ`` the failure probability of the next rerun is ``β(τ) = P(X < τ)`` (``P(X > τ)``
for lower-is-better metrics, handled by negating the metric) and the observed number of failures
is ``k(τ) = #{i : X_i < τ}`` (plus the unfinished reruns). A *band* is a nondecreasing sequence
``u_0 <= u_1 <= ... <= u_{n-1} <= u_n = 1`` with the claim

    ``β(τ) <= u_{k(τ)}`` for every real ``τ`` at once,

which must hold with probability at least ``1 - δ``. Then ``τ`` may be chosen after looking at the
data, and several bars may be read off together.

Exactness. For a continuous metric distribution the claim fails iff ``U_(j+1) > u_j`` for some
``j < n``, where ``U_(1) <= ... <= U_(n)`` are uniform order statistics; so its failure probability
is exactly ``1 - P(U_(i) <= u_{i-1}, i = 1..n)``, which :func:`band_coverage` computes. For any
other distribution (atoms: accuracy takes finitely many values; ties; unfinished reruns as a mass
at ``-inf``), the quantile coupling ``X_i = F^{-1}(U_i)`` gives ``k(τ) >= #{i : U_i < β(τ)}``, so
the claim can fail only where the uniform band fails at ``t = β(τ)``: the band stays valid and is
then conservative (coverage at least the continuous-case value).

Methods (``method=``):

* ``"exact-cp"`` (default for ``n <= EXACT_CP_MAX_N``): ``u_j`` is the one-sided Clopper–Pearson
  upper bound for ``j`` failures in ``n`` at a *local* level ``α`` (the ``1 - α`` quantile of
  ``Beta(j + 1, n - j)``, the exact distribution of ``U_(j+1)``), with ``α`` the largest level
  (bisection, to a relative 1e-7) whose exact simultaneous coverage is at least ``1 - δ``. An
  equal-local-level order-statistic band: tight in the tails, where failure budgets live.
* ``"exact-ks"``: the exact one-sided Kolmogorov–Smirnov band ``u_j = min(1, j/n + c)``,
  ``c = ksone.ppf(1 - δ, n)`` (Birnbaum & Tingey 1951). Uniform width, hence wide in the tails.
* ``"dkw"`` (labelled fallback): ``c = sqrt(ln(1/δ) / (2n))`` from the one-sided
  Dvoretzky–Kiefer–Wolfowitz inequality with Massart's constant (valid for ``δ <= 1/2``; for
  ``δ > 1/2`` the two-sided constant ``sqrt(ln(2/δ) / (2n))`` is used).
* ``"auto"``: ``exact-cp`` up to ``EXACT_CP_MAX_N`` reruns, ``exact-ks`` up to ``EXACT_KS_MAX_N``,
  ``dkw`` beyond (or when the exact KS constant cannot be computed).

Exact coverage (:func:`band_coverage`) uses Poissonization: the counts of a rate-``n`` Poisson
process on ``[0, 1]`` in the gaps between the band levels are independent, so a forward recursion
over the gaps (one convolution with a Poisson pmf per distinct level, then zeroing the counts that
break a constraint) gives ``P(constraints, N(1) = n)``; dividing by ``P(N(1) = n)`` de-Poissonizes.
Every term is a probability (no cancellation); cost ``O(n^2)`` per kernel length, ``O(n^3)`` worst
case.

References: Z. W. Birnbaum and F. H. Tingey (1951), "One-sided confidence contours for probability
distribution functions", Ann. Math. Statist. 22(4), 592-596. P. Massart (1990), "The tight constant
in the Dvoretzky-Kiefer-Wolfowitz inequality", Ann. Probab. 18(3), 1269-1283. M. Noé (1972), "The
calculation of distributions of two-sided Kolmogorov-Smirnov type statistics", Ann. Math. Statist.
43(1), 58-64. A. Moscovich and B. Nadler (2017), "Fast calculation of boundary crossing
probabilities for Poisson processes", Statist. Probab. Lett. 123, 177-182. A. B. Owen (1995),
"Nonparametric likelihood confidence bands for a distribution function", JASA 90(430), 516-521.
S. Aldor-Noiman, L. D. Brown, A. Buja, W. Rolke and R. A. Stine (2013), "The power to see: a new
graphical test of normality", Amer. Statist. 67(4), 249-260.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from recipe_audit.stats.array_checks import (
    check_metrics,
    check_positive_int,
    check_scalar_prob,
)
from recipe_audit.stats.bounds import upper_at
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.floors import checked_floor, first_passing, floor_of

__all__ = [
    "BAND_METHODS",
    "EXACT_CP_MAX_N",
    "EXACT_KS_MAX_N",
    "BandBounds",
    "SimultaneousBand",
    "band_bounds",
    "band_bounds_at",
    "band_coverage",
    "band_sample_floor",
    "band_sample_floor_at",
    "birnbaum_tingey_sf",
    "dkw_constant",
    "ks_constant",
    "simultaneous_band",
]

#: The band constructions, in order of preference.
BAND_METHODS = ("exact-cp", "exact-ks", "dkw")

#: Largest n for which ``method="auto"`` calibrates the exact Clopper–Pearson-shaped band.
EXACT_CP_MAX_N = 2000
#: Largest n for which ``method="auto"`` uses the exact KS band (DKW, labelled fallback, beyond).
EXACT_KS_MAX_N = 20000

_LABELS = {
    "exact-cp": "exact order-statistic band, Clopper–Pearson shape (equal local level, calibrated exactly)",
    "exact-ks": "exact one-sided Kolmogorov–Smirnov band (Birnbaum–Tingey)",
    "dkw": "DKW band, Massart constant (fallback)",
}
_COVERAGE_SLACK = 1e-10  # calibrated coverage must exceed 1 - delta by this much (rounding)


# ---------------------------------------------------------------------------------------------
# Exact coverage of an order-statistic band
# ---------------------------------------------------------------------------------------------


def _poisson_pmf(k, mu: float) -> np.ndarray:
    """``scipy.stats.poisson.pmf(k, mu)`` for whole ``k >= 0`` and ``mu >= 0``: scipy's own formula,
    ``exp(xlogy(k, mu) - gammaln(k + 1) - mu)`` clipped to [0, 1], the same numbers (tested) without
    the distribution's per-call argument handling (the band's coverage calls it thousands of
    times) or importing ``scipy.stats``."""
    k = np.asarray(k)
    return np.clip(np.exp(special.xlogy(k, mu) - special.gammaln(k + 1) - mu), 0, 1)


def _poisson_step(p: np.ndarray, mu: float) -> np.ndarray:
    """Counts after adding Poisson(mu) points, truncated to the length of ``p``."""
    size = p.size
    # the Poisson tail beyond mu + 15 sqrt(mu) + 40 is below 1e-40: leave it out of the kernel
    length = min(size, int(math.ceil(mu + 15.0 * math.sqrt(mu) + 40.0)))
    kernel = _poisson_pmf(np.arange(length), mu)
    return np.convolve(p, kernel)[:size]


def band_coverage(upper, n: int) -> float:
    """Exact ``P(U_(i) <= upper[i-1] for i = 1..n)`` for ``n`` iid uniforms on [0, 1].

    This is the simultaneous coverage, for a continuous metric, of the band ``β(τ) <= u_{k(τ)}``
    with ``u = upper`` (``upper[j]`` is the level for ``j`` observed failures, ``j = 0..n-1``;
    ``u_n = 1`` is implicit). ``upper`` must be nondecreasing; values outside [0, 1] are clipped.

    Poissonization (see the module docstring): a forward recursion over the gaps between the
    levels of a rate-``n`` Poisson process, then division by ``P(Poisson(n) = n)``.

    >>> round(band_coverage([0.5], 1), 12)          # one uniform below 0.5
    0.5
    >>> round(band_coverage([0.3, 0.8], 2), 12)     # 2 * (0.3 * 0.8 - 0.3**2 / 2)
    0.39

    References: Moscovich & Nadler (2017), Statist. Probab. Lett. 123, 177-182.
    """
    n = check_positive_int("n", n)
    return _coverage(np.asarray(upper, dtype=np.float64).ravel(), n)


def _coverage(upper: np.ndarray, n: int) -> float:
    """:func:`band_coverage` for a whole ``n`` checked already."""
    u = np.clip(upper, 0.0, 1.0)
    if u.size != n:
        raise StatsInputError(f"a band for n = {n} reruns needs {n} levels u_0..u_(n-1), got {u.size}.")
    if np.any(np.isnan(u)):
        raise StatsInputError("band levels must be numbers, got NaN.")
    if np.any(np.diff(u) < 0):
        raise StatsInputError("band levels must be nondecreasing in the number of failures.")
    p = np.zeros(n + 1)
    p[0] = 1.0
    prev = 0.0
    for i in range(1, n + 1):
        t = float(u[i - 1])
        if t >= 1.0:  # this and every later constraint holds: all n points lie in [0, 1]
            break
        if t > prev:
            p = _poisson_step(p, n * (t - prev))
            prev = t
        p[:i] = 0.0  # at least i points must lie below u_(i-1)
    p = _poisson_step(p, n * (1.0 - prev))
    return float(min(1.0, p[n] / _poisson_pmf(n, n)))


# ---------------------------------------------------------------------------------------------
# Band constants
# ---------------------------------------------------------------------------------------------


def birnbaum_tingey_sf(c: float, n: int) -> float:
    """``P(D_n^+ > c)`` by the Birnbaum–Tingey (1951) finite-sum formula (exact; for checks).

    ``P(D_n^+ > c) = c * sum_{j=0}^{floor(n(1-c))} C(n, j) (1 - c - j/n)^(n-j) (c + j/n)^(j-1)``
    for ``0 < c < 1``. Summed in log space; accurate for moderate ``n`` (tens to a few hundred).

    References: Birnbaum & Tingey (1951), Ann. Math. Statist. 22(4), 592-596.
    """
    n = check_positive_int("n", n)
    c = float(c)
    if c <= 0.0:
        return 1.0
    if c >= 1.0:
        return 0.0
    j = np.arange(0, math.floor(n * (1.0 - c)) + 1, dtype=np.float64)
    a = 1.0 - c - j / n
    keep = a > 0
    j, a = j[keep], a[keep]
    logs = (special.gammaln(n + 1) - special.gammaln(j + 1) - special.gammaln(n - j + 1)
            + (n - j) * np.log(a) + (j - 1) * np.log(c + j / n))
    return float(c * np.exp(logs).sum())


def ks_constant(n: int, delta: float) -> float:
    """``c = ksone.ppf(1 - delta, n)``: the exact one-sided KS band half-width (continuous F)."""
    return _ks(check_positive_int("n", n), check_scalar_prob("delta", delta))


def _ks(n: int, d: float) -> float:
    from scipy import stats

    return float(stats.ksone.ppf(1.0 - d, n))


def dkw_constant(n: int, delta: float) -> float:
    """One-sided DKW constant with Massart's tight constant: ``sqrt(ln(1/delta) / (2n))``.

    Massart's one-sided bound ``P(sup(F - F_n) > c) <= exp(-2 n c^2)`` needs ``exp(-2 n c^2) <= 1/2``,
    i.e. ``delta <= 1/2``; for larger ``delta`` the two-sided constant ``sqrt(ln(2/delta) / (2n))``
    is returned (always valid).

    References: Massart (1990), Ann. Probab. 18(3), 1269-1283.
    """
    return _dkw(check_positive_int("n", n), check_scalar_prob("delta", delta))


def _dkw(n: int, d: float) -> float:
    return math.sqrt(math.log((1.0 if d <= 0.5 else 2.0) / d) / (2.0 * n))


def _cp_levels(n: int, alpha: float) -> np.ndarray:
    return upper_at(np.arange(n, dtype=np.int64), np.full(n, n, dtype=np.int64), np.full(n, float(alpha)))


@lru_cache(maxsize=512)
def _cp_local_level(n: int, delta: float) -> tuple[float, float]:
    """Largest local level alpha (to a relative 1e-7) whose CP-shaped band has exact coverage
    >= 1 - delta (plus a 1e-10 rounding slack); returns (alpha, coverage)."""
    target = 1.0 - delta + _COVERAGE_SLACK

    def cov(a: float) -> float:
        return _coverage(_cp_levels(n, a), n)

    lo, hi = delta / n, delta  # Bonferroni: coverage(delta / n) >= 1 - delta
    c_lo = cov(lo)
    while c_lo < target:  # only rounding can bring Bonferroni below the target
        lo /= 2.0
        c_lo = cov(lo)
    if cov(hi) >= target:
        return hi, cov(hi)
    while hi / lo > 1.0 + 1e-7:
        mid = math.sqrt(lo * hi)
        c_mid = cov(mid)
        if c_mid >= target:
            lo, c_lo = mid, c_mid
        else:
            hi = mid
    return lo, c_lo


# ---------------------------------------------------------------------------------------------
# The band
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimultaneousBand:
    """A simultaneous upper band for ``n`` reruns at risk ``delta`` (see the module docstring).

    ``levels[j]`` (``j = 0..n``) bounds the failure probability at every bar where ``j`` reruns
    failed; ``levels[n] == 1``. ``c`` is the additive constant of the KS and DKW bands (None for
    ``exact-cp``), ``local_level`` the per-count level ``α`` of ``exact-cp`` (None otherwise).
    ``coverage`` is the exact simultaneous coverage for a continuous metric (at least
    ``1 - delta``; a discrete metric only raises it), None where it was not computed (DKW beyond
    ``EXACT_CP_MAX_N``). ``fallback`` is True for DKW.
    """

    method: str
    label: str
    n: int
    delta: float
    c: float | None
    local_level: float | None
    coverage: float | None
    fallback: bool
    levels: tuple[float, ...]

    def upper(self, k):
        """The band's upper bound for ``k`` observed failures (int or integer array)."""
        k_arr = np.asarray(k)
        if np.any((k_arr < 0) | (k_arr > self.n)):
            raise StatsInputError(f"failures must lie in 0..{self.n} for this band.")
        out = np.asarray(self.levels)[k_arr]
        return float(out) if out.ndim == 0 else out

    def max_certified_failures(self, eps: float) -> int:
        """Largest ``j`` with ``levels[j] <= eps`` (-1 when even ``j = 0`` cannot certify ``eps``)."""
        return self.certified_up_to(check_eps(eps))

    def certified_up_to(self, e: float) -> int:
        """:meth:`max_certified_failures` for an ``eps`` checked already."""
        return int(np.count_nonzero(np.asarray(self.levels) <= e)) - 1

    def to_dict(self) -> dict:
        """Plain-JSON representation (without the level table)."""
        return {"method": self.method, "label": self.label, "n": self.n, "delta": self.delta, "c": self.c,
                "local_level": self.local_level, "coverage": self.coverage, "fallback": self.fallback}


@lru_cache(maxsize=512)
def _band(n: int, delta: float, method: str) -> SimultaneousBand:
    c = alpha = cov = None
    if method == "exact-cp":
        alpha, cov = _cp_local_level(n, delta)
        u = _cp_levels(n, alpha)
    elif method in ("exact-ks", "dkw"):
        c = _ks(n, delta) if method == "exact-ks" else _dkw(n, delta)
        if not (math.isfinite(c) and c > 0.0):
            raise StatsInputError(f"the {method} constant could not be computed for n = {n}.")
        u = np.minimum(1.0, np.arange(n) / n + c)
        cov = _coverage(u, n) if n <= EXACT_CP_MAX_N else None
    else:
        raise StatsInputError(f"unknown band method {method!r}; use one of {', '.join(BAND_METHODS)} or 'auto'.")
    levels = tuple(np.asarray(u, dtype=np.float64).tolist()) + (1.0,)
    return SimultaneousBand(method=method, label=_LABELS[method], n=n, delta=delta, c=c, local_level=alpha,
                            coverage=cov, fallback=method == "dkw", levels=levels)


def simultaneous_band(n: int, delta: float = DEFAULT_DELTA, method: str = "auto") -> SimultaneousBand:
    """The simultaneous upper band for ``n`` reruns at risk ``delta`` (cached).

    ``method="auto"`` picks ``exact-cp`` for ``n <= EXACT_CP_MAX_N``, ``exact-ks`` up to
    ``EXACT_KS_MAX_N`` (scipy's exact ``ksone`` becomes slow beyond), and ``dkw`` (labelled
    fallback) beyond that or if the exact KS constant cannot be computed.

    >>> b = simultaneous_band(59, 0.10)
    >>> b.method, b.coverage >= 0.9, b.levels[0] > 1 - 0.10 ** (1 / 59)
    ('exact-cp', True, True)

    References: Birnbaum & Tingey (1951); Massart (1990); Moscovich & Nadler (2017).
    """
    return _band_of(check_positive_int("n", n), check_delta(delta), method)


def _band_of(n: int, d: float, method: str) -> SimultaneousBand:
    """:func:`simultaneous_band` for ``n`` and ``delta`` checked already."""
    if method != "auto":
        return _band(n, d, method)
    try:
        return _band(n, d, _auto_method(n))
    except StatsInputError:  # the exact KS constant could not be computed
        return _band(n, d, "dkw")


def _levels0(n: int, delta: float, method: str) -> float:
    """The band's bound with no failure, ``levels[0]`` (KS and DKW: ``min(1, c)``, no band built)."""
    if method == "exact-ks":
        return min(1.0, _ks(n, delta))
    if method == "dkw":
        return min(1.0, _dkw(n, delta))
    return _band(n, delta, method).levels[0]


#: The floor :func:`_floor` finds at the options most cards are computed at (the defaults, eps =
#: delta = 0.10), kept so that the first card of a process does not search for it again (about ten
#: bands built). Like every floor it is checked on the band itself before it is used
#: (:func:`band_sample_floor_at`: levels[0] <= eps at the floor and > eps one rerun below, which,
#: levels[0] decreasing with n, only the smallest such n passes); tests/stats/test_stats_band.py
#: compares each entry with the search.
FOUND_FLOORS = {(DEFAULT_EPS, DEFAULT_DELTA, "exact-cp"): 46}


@lru_cache(maxsize=256)
def _floor(eps: float, delta: float, method: str, cap: int | None = None) -> int | None:
    """Smallest n (at most ``cap``) with levels[0] <= eps for one fixed method, None when there is
    none up to ``cap``; levels[0] decreases with n (tested), so the one floor search
    (:func:`~.floors.first_passing`: doubling, then bisection) finds it (:data:`FOUND_FLOORS`: found
    already)."""
    found = FOUND_FLOORS.get((eps, delta, method))
    if found is not None and (cap is None or found <= cap):
        return found
    lo = floor_of(eps, delta) - 1  # the pointwise floor: no band certifies below it
    if cap is not None and lo >= cap:  # nor up to the cap: no band of that size is built
        return None
    if lo >= 1 and _levels0(lo, delta, method) <= eps:
        raise AssertionError("a simultaneous band certified below the pointwise sample floor")
    if method == "dkw":
        return _dkw_floor(eps, delta)
    return first_passing(lambda n: _levels0(n, delta, method) <= eps, lo, max(lo + 1, 2), limit=cap)


#: The most reruns at which a method's sample floor is searched (the DKW floor is a closed form).
_METHOD_MAX_N = {"exact-cp": EXACT_CP_MAX_N, "exact-ks": EXACT_KS_MAX_N, "dkw": None}

#: Counts up to here are exact in a float, so a floor's neighbour ``n - 1`` is a different number.
_FLOAT_EXACT = 2**52


def _dkw_floor(eps: float, delta: float) -> int:
    """The DKW band's floor in closed form, ``ceil(ln(1/delta) / (2 eps^2))`` (``ln(2/delta)`` for
    ``delta > 1/2``), corrected on the constant itself where floats tell ``n`` from ``n - 1``: no
    band is built, so the cost does not grow with ``1/eps``."""
    log_term = math.log((1.0 if delta <= 0.5 else 2.0) / delta)
    x = log_term / (2.0 * eps) / eps  # eps * eps underflows for tiny eps
    if not math.isfinite(x):
        raise StatsInputError(f"eps = {eps!r} is too small: the band's sample floor is beyond every float.")
    n = max(1, math.ceil(x))
    if n < _FLOAT_EXACT:
        while n > 1 and _dkw(n - 1, delta) <= eps:
            n -= 1
        while _dkw(n, delta) > eps:
            n += 1
    return n


def _auto_method(n: int) -> str:
    return "exact-cp" if n <= EXACT_CP_MAX_N else "exact-ks" if n <= EXACT_KS_MAX_N else "dkw"


def _auto_floor(eps: float, delta: float) -> int:
    """Floor of ``method="auto"``: exact-cp up to EXACT_CP_MAX_N reruns, exact-ks up to
    EXACT_KS_MAX_N, DKW beyond (each later band is wider, so its floor is larger)."""
    floor = _floor(eps, delta, "exact-cp", EXACT_CP_MAX_N)
    if floor is None:
        floor = _floor(eps, delta, "exact-ks", EXACT_KS_MAX_N)
        floor = None if floor is None else max(floor, EXACT_CP_MAX_N + 1)
    if floor is None:
        floor = max(_floor(eps, delta, "dkw"), EXACT_KS_MAX_N + 1)
    return floor


def band_sample_floor(eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA, method: str = "auto") -> int:
    """Smallest ``n`` at which a perfect sample (no failure at any τ) lets the band certify ``eps``:
    the smallest ``n`` with ``levels[0] <= eps`` for :func:`simultaneous_band` ``(n, delta, method)``.

    A method named explicitly is searched only up to the size ``method="auto"`` would use it for
    (``EXACT_CP_MAX_N``, ``EXACT_KS_MAX_N``; DKW has a closed form), so the time does not grow with
    ``1/eps``: an ``eps`` it cannot certify within that is refused. So is an ``eps`` whose floor lies
    beyond ``MAX_RERUNS`` (10^15) reruns, in one sentence (the pointwise floor, which no band
    certifies below, is checked first: ``eps = 5e-324`` is refused before any band is searched).

    Found by bisection on ``n`` starting from the pointwise floor ``N_min`` (no band can certify
    below it, since its local level is at most ``delta``), and checked on the band itself:
    ``levels[0] <= eps`` at the floor and ``> eps`` one rerun below. ``levels[0]`` decreases with
    ``n`` for every method (tested), so the bisection finds the smallest such ``n``.

    >>> band_sample_floor(0.10, 0.10), floor_of(0.10, 0.10)  # the pointwise floor is 22
    (46, 22)
    """
    e = check_eps(eps)
    d = check_delta(delta)
    if method not in ("auto", *BAND_METHODS):
        raise StatsInputError(f"unknown band method {method!r}; use one of {', '.join(BAND_METHODS)} or 'auto'.")
    return band_sample_floor_at(e, d, method)


def band_sample_floor_at(e: float, d: float, method: str = "auto") -> int:
    """:func:`band_sample_floor` for ``eps``, ``delta`` and a method checked already."""
    # no band certifies below the pointwise floor: past the rerun limit, refused before any search
    checked_floor(floor_of(e, d), e, d, where=" with a simultaneous band",
                  name="the pointwise sample floor, below the band's,")
    if method == "auto":
        floor = _auto_floor(e, d)
    else:
        floor = _floor(e, d, method, _METHOD_MAX_N[method])
        if floor is None:
            raise StatsInputError(
                f"the {method} band cannot certify eps = {e!r} with up to {_METHOD_MAX_N[method]} reruns, the most "
                "it is calibrated for (a band of that size takes too long to build); use the auto or dkw method.")

    def lev0(n: int) -> float:
        return _levels0(n, d, _auto_method(n) if method == "auto" else method)

    if floor < _FLOAT_EXACT and (lev0(floor) > e or (floor > 1 and lev0(floor - 1) <= e)):
        raise AssertionError("band sample floor failed its check")
    return checked_floor(floor, e, d, where=" with a simultaneous band", name="the band's sample floor")


# ---------------------------------------------------------------------------------------------
# Bounds at bars
# ---------------------------------------------------------------------------------------------


def _failure_counts(metrics: np.ndarray, taus: np.ndarray, higher_is_better: bool) -> np.ndarray:
    finite = np.sort(metrics[np.isfinite(metrics)])
    n_bad = metrics.size - finite.size
    if higher_is_better:
        below = np.searchsorted(finite, taus, side="left")  # #{x < tau}
    else:
        below = finite.size - np.searchsorted(finite, taus, side="right")  # #{x > tau}
    return below + n_bad


@dataclass(frozen=True)
class BandBounds:
    """Simultaneous and pointwise upper bounds on the failure probability at the bars ``taus``.

    ``k[i]`` failures at ``taus[i]`` (unfinished reruns and the ``n_extra_failures`` counted as
    failures at every bar) out of ``n``; ``upper[i]`` is the band's bound (valid for all bars at
    once), ``pointwise_upper[i]`` the Clopper–Pearson bound ``U(k, n)`` (valid for one bar fixed in
    advance). ``certified_tau_limit``: the band certifies ``eps`` at every bar up to (lower-is-better:
    down to) this value, None when it certifies none; ``sample_floor`` is the band's floor (None
    when asked ``with_floor=False``).
    """

    taus: tuple[float, ...]
    k: tuple[int, ...]
    n: int
    eps: float
    upper: tuple[float, ...]
    pointwise_upper: tuple[float, ...]
    certified: tuple[bool, ...]
    certified_tau_limit: float | None
    higher_is_better: bool
    sample_floor: int | None
    n_extra_failures: int
    band: SimultaneousBand

    def to_dict(self) -> dict:
        """Plain-JSON representation."""
        return {"taus": list(self.taus), "k": list(self.k), "n": self.n, "eps": self.eps,
                "upper": list(self.upper), "pointwise_upper": list(self.pointwise_upper),
                "certified": list(self.certified), "certified_tau_limit": self.certified_tau_limit,
                "higher_is_better": self.higher_is_better, "sample_floor": self.sample_floor,
                "n_extra_failures": self.n_extra_failures, "band": self.band.to_dict()}


def band_bounds(metrics, taus, *, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA, higher_is_better: bool = True,
                method: str = "auto", n_extra_failures: int = 0, with_floor: bool = True) -> BandBounds:
    """Per-bar simultaneous upper bounds from one cell's reruns.

    Parameters
    ----------
    metrics : 1-D float array
        One metric per rerun; NaN/±inf are unfinished reruns (failures at every bar).
    taus : float or 1-D array
        Bars at which to read the band (it holds at every bar at once, these are just read out).
    eps, delta : float in (0, 1)
        Failure budget (for ``certified`` and ``certified_tau_limit``) and risk of the band.
    higher_is_better : bool
        False: a rerun fails when its metric is above the bar.
    method : str
        See :func:`simultaneous_band`.
    n_extra_failures : int
        Reruns with no metric counted as failures at every bar (e.g. the unlaunched remainder of a
        curtailed sweep, for a worst-case completion); ``n = len(metrics) + n_extra_failures``.
    with_floor : bool
        False: leave ``sample_floor`` None (a plot of the band needs only its levels, and the floor
        is a search over bands of other sizes).

    Examples
    --------
    >>> bb = band_bounds([0.9] * 50, [0.7, 0.95])
    >>> bb.k, bb.certified, bb.certified_tau_limit, bb.sample_floor
    ((0, 50), (True, False), 0.9, 46)
    """
    m = check_metrics(metrics)
    extra = check_positive_int("n_extra_failures", n_extra_failures, minimum=0)
    t = np.atleast_1d(np.asarray(taus, dtype=np.float64))
    if t.ndim != 1 or not np.all(np.isfinite(t)):
        raise StatsInputError("the bars tau must be finite numbers.")
    e = check_eps(eps)
    d = check_delta(delta)
    if m.size + extra < 1:
        raise StatsInputError("a band needs at least one rerun.")
    return band_bounds_at(m, t, e, d, bool(higher_is_better), method, extra, with_floor)


def band_bounds_at(m: np.ndarray, t: np.ndarray, e: float, d: float, hib: bool, method: str = "auto",
                   extra: int = 0, with_floor: bool = True) -> BandBounds:
    """:func:`band_bounds` for inputs checked already: a float array ``m`` and a 1-D array of finite
    bars ``t``, ``eps``, ``delta``, the direction, the method and the extra failures (at least one
    rerun in all)."""
    n = m.size + extra
    band = _band_of(n, d, method)
    k = _failure_counts(m, t, hib) + extra
    upper = np.asarray(band.upper(k))
    # U(k, n) depends on k alone: computed once per distinct count (many bars share one), the
    # same numbers elementwise
    distinct, where = np.unique(k, return_inverse=True)
    d_n = np.full(distinct.size, d, dtype=np.float64)
    pointwise = upper_at(distinct.astype(np.int64), np.full(distinct.size, n, dtype=np.int64), d_n)[
        where.reshape(k.shape)]
    j = band.certified_up_to(e)
    # every bar with k(tau) <= j is certified: higher-is-better, tau <= the (j+1)-th smallest value
    eff = np.where(np.isfinite(m), m, -np.inf if hib else np.inf)
    eff = np.concatenate([eff, np.full(extra, -np.inf if hib else np.inf)])
    eff = np.sort(eff) if hib else -np.sort(-eff)
    limit = None
    if 0 <= j < n and np.isfinite(eff[j]):
        limit = float(eff[j])
    return BandBounds(
        taus=tuple(t.tolist()), k=tuple(k.tolist()), n=n, eps=e,
        upper=tuple(upper.tolist()), pointwise_upper=tuple(np.atleast_1d(pointwise).tolist()),
        certified=tuple((upper <= e).tolist()), certified_tau_limit=limit, higher_is_better=hib,
        sample_floor=band_sample_floor_at(e, d, method) if with_floor else None, n_extra_failures=extra, band=band,
    )
