"""The recipe-card verdicts: exactly one per cell.

=========================  ===================================================================
``insufficient-evidence``  ``N < N_min``
``release-supported``      ``N >= N_min`` and ``U <= eps``
``strong-unsupported``     ``L > eps``; takes precedence over ``insufficient-evidence``
``unsupported``            otherwise
``refused-shift``          asked about an audit set the recipe was not measured on;
                           never produced by :func:`verdict`, which only sees counts
=========================  ===================================================================

``U`` and ``L`` are the one-sided Clopper–Pearson bounds at confidence ``1 - delta``
(:mod:`recipe_audit.stats.bounds`). ``release-supported`` and ``strong-unsupported`` cannot both
hold, because ``L <= U``.
"""

from __future__ import annotations

import numpy as np

from recipe_audit.stats import exact
from recipe_audit.stats.array_checks import check_count_arrays
from recipe_audit.stats.bounds import clopper_pearson_lower, clopper_pearson_upper, sample_floor
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.exact import INSUFFICIENT, STRONG_UNSUPPORTED, SUPPORTED, UNSUPPORTED, VERDICTS

# the verdict strings are :mod:`.exact`'s (``stats.SUPPORTED`` ...); this module exports the array verdict
__all__ = ["verdict", "verdict_array"]

def verdict_array(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> np.ndarray:
    """Vectorised :func:`verdict`: ``k`` and ``n`` broadcast together; ``eps``, ``delta`` scalars.

    Returns a NumPy string array of the broadcast shape of ``k`` and ``n``.
    """
    k_arr, n_arr = check_count_arrays(k, n)
    e = check_eps(eps)
    d = check_delta(delta)
    kb, nb = np.broadcast_arrays(k_arr, n_arr)
    n_min = sample_floor(e, d)
    upper = np.asarray(clopper_pearson_upper(kb, nb, d))
    lower = np.asarray(clopper_pearson_lower(kb, nb, d))
    out = np.full(kb.shape, UNSUPPORTED, dtype=f"<U{max(len(v) for v in VERDICTS)}")
    supported = np.asarray(exact.release_rule(kb, nb, upper, e, n_min))
    # a bound within rounding of eps: decided as the scalar verdict decides it, on the exact tail
    near = (kb >= 1) & (nb >= n_min) & (np.abs(upper - e) <= 1e-9 * e)
    for idx in np.argwhere(near):
        i = tuple(idx)
        supported[i] = exact.certifies(int(kb[i]), int(nb[i]), e, d)
    out[supported] = SUPPORTED
    out[nb < n_min] = INSUFFICIENT
    out[lower > e] = STRONG_UNSUPPORTED  # last: wins over insufficient-evidence
    return out


def verdict(k, n, eps=DEFAULT_EPS, delta=DEFAULT_DELTA) -> str:
    """The verdict for ``k`` failures in ``n`` reruns (unfinished reruns count as failures);
    the same as ``tail_bound(k, n, eps, delta).verdict`` (:func:`.exact.verdict`).

    >>> verdict(0, 22), verdict(0, 21), verdict(5, 5), verdict(3, 30)
    ('release-supported', 'insufficient-evidence', 'strong-unsupported', 'unsupported')
    """
    k_arr, n_arr = check_count_arrays(k, n)
    if k_arr.ndim or n_arr.ndim:
        raise StatsInputError("verdict takes a single k and a single n; use verdict_array for arrays.")
    return exact.verdict(int(k_arr), int(n_arr), eps, delta)
