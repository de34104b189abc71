"""Exact one-sided Clopper–Pearson bounds on a rerun failure probability (SPEC 1.3, 1.4).

The number of failing reruns is modelled as ``k ~ Binomial(n, beta)``. At confidence ``1 - delta``:

* upper bound ``U`` = the ``1 - delta`` quantile of ``Beta(k + 1, n - k)``; ``U = 1`` when ``k == n``;
* lower bound ``L`` = the ``delta`` quantile of ``Beta(k, n - k + 1)``; ``L = 0`` when ``k == 0``.

Both bounds are **one-sided**: the whole ``delta`` sits in one tail. (A two-sided exact interval at
level ``1 - 2*delta`` has the same two ends; scipy's ``binomtest(...).proportion_ci`` at
``confidence_level=1 - delta`` is two-sided and therefore a *different*, wider pair.)

References: C. J. Clopper and E. S. Pearson (1934), "The use of confidence or fiducial limits
illustrated in the case of the binomial", Biometrika 26(4), 404-413.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special

from ._validate import check_counts, check_prob, check_scalar_prob
from .errors import StatsInputError

__all__ = [
    "TailBound",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "more_clean_reruns_needed",
    "sample_floor",
    "tail_bound",
]


def _result(out: np.ndarray, *inputs: np.ndarray):
    """Return a Python float when every input was a scalar, else the array."""
    if all(np.ndim(x) == 0 for x in inputs):
        return float(out)
    return out


def _root(delta: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``delta ** (1 / n)`` elementwise with Python's float power, for 1-D arrays of equal length.

    Used for the closed-form bounds so that a scalar call, an array call and :func:`sample_floor`
    give bit-identical values (NumPy's vectorised ``power`` may differ from ``**`` in the last bit).
    """
    if delta.size == 0:
        return np.empty(0)
    pairs = np.stack([delta.astype(np.float64), n.astype(np.float64)], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    vals = np.array([float(d) ** (1.0 / float(m)) for d, m in uniq])
    return vals[inverse.ravel()]


def _flat_inputs(k, n, delta):
    """Validate a bound's inputs; return their broadcast shape and ``k``, ``n``, ``delta`` as flat arrays."""
    k_arr, n_arr = check_counts(k, n)
    d_arr = check_prob("delta", delta)
    shape = np.broadcast_shapes(k_arr.shape, n_arr.shape, d_arr.shape)
    k1, n1, d1 = (np.broadcast_to(x, shape).ravel() for x in (k_arr, n_arr, d_arr))
    return shape, k1, n1, d1


def clopper_pearson_upper(k, n, delta):
    """One-sided exact upper confidence bound ``U`` on the failure probability.

    ``U`` is the ``1 - delta`` quantile of ``Beta(k + 1, n - k)`` (``1.0`` when ``k == n``), so that
    ``P(beta <= U) >= 1 - delta`` with the whole ``delta`` in the upper tail. For ``k == 0`` it is
    evaluated in closed form, ``U = 1 - delta**(1/n)``.

    Parameters
    ----------
    k, n : int or integer array
        Failures and reruns, ``0 <= k <= n``, ``n >= 1``; broadcast together with ``delta``.
    delta : float or array, strictly inside (0, 1)
        Statistical risk.

    Returns
    -------
    float when all inputs are scalars, otherwise an ndarray of the broadcast shape.

    Raises
    ------
    StatsInputError
        On non-integer counts, ``k > n``, ``n < 1`` or ``delta`` outside (0, 1).

    References: Clopper & Pearson (1934), Biometrika 26(4), 404-413.
    """
    shape, k1, n1, d1 = _flat_inputs(k, n, delta)
    kf, nf = k1.astype(np.float64), n1.astype(np.float64)
    with np.errstate(all="ignore"):
        # Beta(k+1, n-k) upper quantile; the second shape is clamped only where k == n (set below).
        out = np.asarray(special.betainccinv(kf + 1.0, np.maximum(nf - kf, 1.0), d1), dtype=np.float64)
    k0 = k1 == 0
    out[k0] = 1.0 - _root(d1[k0], n1[k0])  # SPEC 1.4 closed form 1 - delta**(1/n)
    out[k1 == n1] = 1.0
    return _result(out.reshape(shape), k, n, delta)


def clopper_pearson_lower(k, n, delta):
    """One-sided exact lower confidence bound ``L`` on the failure probability.

    ``L`` is the ``delta`` quantile of ``Beta(k, n - k + 1)`` (``0.0`` when ``k == 0``), so that
    ``P(beta >= L) >= 1 - delta`` with the whole ``delta`` in the lower tail. For ``k == n`` it is
    evaluated in closed form, ``L = delta**(1/n)``.

    Parameters, shapes and errors as :func:`clopper_pearson_upper`.

    References: Clopper & Pearson (1934), Biometrika 26(4), 404-413.
    """
    shape, k1, n1, d1 = _flat_inputs(k, n, delta)
    kf, nf = k1.astype(np.float64), n1.astype(np.float64)
    with np.errstate(all="ignore"):
        # Beta(k, n-k+1) lower quantile; the first shape is clamped only where k == 0 (set below).
        out = np.asarray(special.betaincinv(np.maximum(kf, 1.0), nf - kf + 1.0, d1), dtype=np.float64)
    kn = k1 == n1
    out[kn] = _root(d1[kn], n1[kn])  # closed form delta**(1/n)
    out[k1 == 0] = 0.0
    return _result(out.reshape(shape), k, n, delta)


def _clean_upper(n: int, delta: float) -> float:
    """U(k=0, n) exactly as :func:`clopper_pearson_upper` computes it (no validation)."""
    return 1.0 - float(delta) ** (1.0 / float(n))


def sample_floor(eps, delta) -> int:
    """Smallest number of reruns ``N_min`` at which ``k = 0`` can certify ``U <= eps`` (SPEC 1.4).

    ``N_min = ceil(ln(delta) / ln(1 - eps))``. The candidate from that formula is corrected by
    evaluating the ``k = 0`` bound itself (``U = 1 - delta**(1/N)``, as computed by
    :func:`clopper_pearson_upper`): the result is the smallest ``N`` with ``U(0, N) <= eps``, so
    floating-point error in the logarithms cannot move it, and ``k = 0, N = N_min`` is always
    ``release-supported``.

    >>> sample_floor(0.10, 0.10), sample_floor(0.05, 0.05)
    (22, 59)
    """
    e = check_scalar_prob("eps", eps)
    d = check_scalar_prob("delta", delta)
    ratio = math.log(d) / math.log1p(-e)
    cand = max(1, math.ceil(ratio))
    while cand > 1 and _clean_upper(cand - 1, d) <= e:
        cand -= 1
    while _clean_upper(cand, d) > e:
        cand += 1
    return cand


def _supported(k: int, n: int, eps: float, delta: float, n_min: int) -> bool:
    return n >= n_min and float(clopper_pearson_upper(k, n, delta)) <= eps


def more_clean_reruns_needed(k, n, eps=0.10, delta=0.10) -> int:
    """How many further reruns, all without failure, would make ``(k, n)`` release-supported.

    The smallest ``m >= 0`` with ``n + m >= N_min`` and ``U(k, n + m) <= eps``; ``0`` when already
    supported. Found by an exact search over the bound (``U`` falls as clean reruns are added, so
    the answer always exists for finite ``k``).
    """
    k_arr, n_arr = check_counts(k, n)
    if k_arr.ndim or n_arr.ndim:
        raise StatsInputError("more_clean_reruns_needed takes a single k and a single n, not arrays.")
    e = check_scalar_prob("eps", eps)
    d = check_scalar_prob("delta", delta)
    k_i, n_i = int(k_arr), int(n_arr)
    n_min = sample_floor(e, d)
    lo = max(0, n_min - n_i)  # below this many more, N < N_min
    if _supported(k_i, n_i + lo, e, d, n_min):
        return lo
    hi = max(lo + 1, 1)
    while not _supported(k_i, n_i + hi, e, d, n_min):
        lo = hi
        hi *= 2
    # invariant: not supported at lo, supported at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _supported(k_i, n_i + mid, e, d, n_min):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class TailBound:
    """The recipe-card bound for one cell (SPEC 1.3–1.5).

    Fields: ``k`` failures out of ``n`` reruns (unfinished reruns counted as failures), ``eps``
    (failure budget ε_ship), ``delta`` (statistical risk δ_stat), one-sided ``upper`` (U) and
    ``lower`` (L) Clopper–Pearson bounds at confidence ``1 - delta``, ``sample_floor`` (N_min),
    ``more_clean_reruns_needed`` (0 when already supported) and the SPEC 1.5 ``verdict``.
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


def tail_bound(k, n, eps=0.10, delta=0.10) -> TailBound:
    """Compute the one-sided Clopper–Pearson card for ``k`` failures in ``n`` reruns.

    Scalars only (use :func:`clopper_pearson_upper` / :func:`~recipe_audit.stats.verdicts.verdict_array`
    for arrays). The whole ``delta`` is in one tail for each bound.

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
    from .verdicts import verdict as _verdict  # local import: verdicts depends on this module

    k_arr, n_arr = check_counts(k, n)
    if k_arr.ndim or n_arr.ndim:
        raise StatsInputError(
            "tail_bound takes a single k and a single n; use clopper_pearson_upper for arrays."
        )
    e = check_scalar_prob("eps", eps)
    d = check_scalar_prob("delta", delta)
    k_i, n_i = int(k_arr), int(n_arr)
    return TailBound(
        k=k_i,
        n=n_i,
        eps=e,
        delta=d,
        upper=float(clopper_pearson_upper(k_i, n_i, d)),
        lower=float(clopper_pearson_lower(k_i, n_i, d)),
        sample_floor=sample_floor(e, d),
        more_clean_reruns_needed=more_clean_reruns_needed(k_i, n_i, e, d),
        verdict=_verdict(k_i, n_i, e, d),
    )
