"""Exact one-sided Clopper–Pearson bounds on a rerun failure probability.

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

import numpy as np
from scipy import special

from recipe_audit.stats import exact as _exact
from recipe_audit.stats import floors
from recipe_audit.stats.array_checks import check_count_arrays, check_delta_array

__all__ = [
    "TailBound",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "more_clean_reruns_needed",
    "sample_floor",
    "tail_bound",
    "upper_at",
]


def _result(out: np.ndarray, *inputs: np.ndarray):
    """Return a Python float when every input was a scalar, else the array."""
    if all(np.ndim(x) == 0 for x in inputs):
        return float(out)
    return out


def _closed(delta: np.ndarray, n: np.ndarray, f) -> np.ndarray:
    """``f(n, delta)`` elementwise in Python floats, for 1-D arrays of equal length.

    Used for the closed-form bounds so that an array call and the scalar functions of
    :mod:`.exact` (``tail_bound``) give bit-identical values (NumPy's vectorised ``power`` and
    ``expm1`` may differ from :mod:`math` in the last bit).
    """
    if delta.size == 0:
        return np.empty(0)
    pairs = np.stack([delta.astype(np.float64), n.astype(np.float64)], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    vals = np.array([f(int(m), float(d)) for d, m in uniq])
    return vals[inverse.ravel()]


def _root(delta: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``delta ** (1 / n)`` elementwise (``L`` at ``k == n``)."""
    return _closed(delta, n, lambda m, d: d ** (1.0 / m))


def _clean(delta: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``1 - delta ** (1 / n)`` elementwise, as ``-expm1(ln(delta) / n)`` (``U`` at ``k == 0``)."""
    return _closed(delta, n, _exact.clean_upper)


def _flat_inputs(k, n, delta):
    """Validate a bound's inputs; return their broadcast shape and ``k``, ``n``, ``delta`` as flat arrays."""
    k_arr, n_arr = check_count_arrays(k, n)
    d_arr = check_delta_array(delta)
    shape = np.broadcast_shapes(k_arr.shape, n_arr.shape, d_arr.shape)
    k1, n1, d1 = (np.broadcast_to(x, shape).ravel() for x in (k_arr, n_arr, d_arr))
    return shape, k1, n1, d1


def clopper_pearson_upper(k, n, delta):
    """One-sided exact upper confidence bound ``U`` on the failure probability.

    ``U`` is the ``1 - delta`` quantile of ``Beta(k + 1, n - k)`` (``1.0`` when ``k == n``), so that
    ``P(beta <= U) >= 1 - delta`` with the whole ``delta`` in the upper tail. For ``k == 0`` it is
    evaluated in closed form, ``U = 1 - delta**(1/n)`` (computed as ``-expm1(ln(delta) / n)``, which
    keeps its precision for large ``n``).

    Parameters
    ----------
    k, n : int or integer array
        Failures and reruns, ``0 <= k <= n``, ``n >= 1``; broadcast together with ``delta``.
    delta : float or array, strictly inside (0, 0.5)
        Statistical risk (a one-sided bound at confidence below one half is not a bound).

    Returns
    -------
    float when all inputs are scalars, otherwise an ndarray of the broadcast shape.

    Raises
    ------
    StatsInputError
        On non-integer counts, ``k > n``, ``n < 1``, ``n`` above ``MAX_RERUNS`` (10^15) or
        ``delta`` outside (0, 0.5).

    References: Clopper & Pearson (1934), Biometrika 26(4), 404-413.
    """
    shape, k1, n1, d1 = _flat_inputs(k, n, delta)
    return _result(upper_at(k1, n1, d1).reshape(shape), k, n, delta)


def upper_at(k1: np.ndarray, n1: np.ndarray, d1: np.ndarray) -> np.ndarray:
    """:func:`clopper_pearson_upper` for flat arrays of equal length (int64 counts, float64 risks)
    checked already; a new float64 array."""
    kf, nf = k1.astype(np.float64), n1.astype(np.float64)
    with np.errstate(all="ignore"):
        # Beta(k+1, n-k) upper quantile; the second shape is clamped only where k == n (set below).
        out = np.asarray(special.betainccinv(kf + 1.0, np.maximum(nf - kf, 1.0), d1), dtype=np.float64)
    k0 = k1 == 0
    out[k0] = _clean(d1[k0], n1[k0])  # closed form 1 - delta**(1/n)
    out[k1 == n1] = 1.0
    return out


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


# The scalar statistics of one cell (tail_bound, ...) live in .exact and .floors, in pure Python;
# they are re-exported here, where they always were.
sample_floor = floors.sample_floor
more_clean_reruns_needed = _exact.more_clean_reruns_needed
tail_bound = _exact.tail_bound
TailBound = _exact.TailBound
