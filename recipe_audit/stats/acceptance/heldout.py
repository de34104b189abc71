"""Diagnostic (a): the question-clustered paired bootstrap on the held-out split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recipe_audit.stats.acceptance.names import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    FAIL,
    PASS,
    SENSITIVITY_LEVEL,
)
from recipe_audit.stats.acceptance.records import GapEstimates, PairedRecords, gap_estimates, gaps
from recipe_audit.stats.array_checks import check_positive_int, check_scalar_prob, make_rng
from recipe_audit.stats.interval import Interval

# Budget (resamples x units) of one chunk of the vectorised bootstrap: small enough that the chunk's
# temporaries stay in cache and are reused (large fresh arrays cost more in page faults than the
# arithmetic), large enough that the Python loop over chunks is negligible.
_CHUNK_CELLS = 1 << 16


def percentile_interval(draws: np.ndarray, level: float) -> Interval:
    """Two-sided percentile interval: the ``(1 − level)/2`` and ``(1 + level)/2`` quantiles of
    ``draws`` (numpy's default linear interpolation; the percentages are rounded to 10 decimals
    so that 0.95 gives exactly 2.5 and 97.5), NaN draws ignored.

    >>> percentile_interval(np.arange(101.0), 0.9)
    Interval(lower=5.0, upper=95.0)
    """
    lv = check_scalar_prob("level", level)
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return Interval(float("nan"), float("nan"))
    lo, hi = np.percentile(d, [round(50.0 * (1.0 - lv), 10), round(50.0 * (1.0 + lv), 10)])
    return Interval(float(lo), float(hi))


@dataclass(frozen=True, eq=False)
class BootstrapDistribution:
    """Bootstrap draws of Δgap and Δdeploy (each shape (B,)), with how they were drawn."""

    delta_gap: np.ndarray
    delta_deploy: np.ndarray
    unit: str
    n_units: int
    B: int
    seed: int | None
    rng: str

    def interval(self, level: float, what: str = "delta_gap") -> Interval:
        return percentile_interval(getattr(self, what), level)


def cluster_bootstrap(records: PairedRecords, *, B: int = DEFAULT_RESAMPLES, rng=None,
                      unit: str = "question") -> BootstrapDistribution:
    """Paired cluster bootstrap of Δgap and Δdeploy, vectorised.

    Resample ``b`` draws ``U`` units with replacement: row ``b`` of
    ``rng.integers(0, U, size=(B, U))`` (drawn in chunks of rows, which consumes the generator
    exactly as one ``rng.integers(0, U, size=U)`` call per resample does). A drawn unit brings all
    its items in both cells and both framings, so the resample is paired. Rates are pooled over the
    resampled items: ``r = (C @ S) / (C @ N)`` with ``C`` the (B, U) multiplicity matrix.

    Parameters
    ----------
    records : PairedRecords
    B : int
        Resamples (default 5,000).
    rng : numpy.random.Generator, int seed, or None (meaning ``default_rng(0)``)
    unit : ``"question"`` (the default: a question's templates are not independent) or ``"item"`` (each (question, template) independent; too
        narrow when templates of a question are correlated, offered only as a comparison).
    """
    B = check_positive_int("B", B)
    gen, seed, info = make_rng(rng)
    S, N = records.unit_sums(unit)
    U = S.shape[0]
    dg = np.empty(B)
    dd = np.empty(B)
    chunk = max(1, _CHUNK_CELLS // max(U, 1))
    for start in range(0, B, chunk):
        m = min(chunk, B - start)
        idx = gen.integers(0, U, size=(m, U))
        flat = (idx + (U * np.arange(m))[:, None]).ravel()
        C = np.bincount(flat, minlength=m * U).reshape(m, U).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = (C @ S) / (C @ N)
        _, _, dg[start:start + m], dd[start:start + m] = gaps(r)
    return BootstrapDistribution(delta_gap=dg, delta_deploy=dd, unit=unit, n_units=U, B=B, seed=seed, rng=info)


@dataclass(frozen=True)
class GateA(GapEstimates):
    """Diagnostic (a): the question-clustered paired bootstrap on the held-out split.

    ``ci_gap``/``ci_deploy`` are percentile intervals at ``level``; ``ci_gap_sensitivity`` at
    ``sensitivity_level`` (68 %) feeds the threshold-sensitivity table. ``item_ci_gap`` and
    ``item_ci_deploy`` come from item-level resampling ((question, template) units) with the same
    seed: a labelled comparison only, too narrow when templates are correlated.
    """

    ci_gap: Interval
    ci_deploy: Interval
    ci_gap_sensitivity: Interval
    level: float
    sensitivity_level: float
    B: int
    seed: int | None
    rng: str
    n_questions: int
    n_items: int
    n_nan_resamples: int
    item_ci_gap: Interval | None = None
    item_ci_deploy: Interval | None = None
    item_n_units: int | None = None

    @property
    def status_sensitivity(self) -> str:
        """The status read at ``sensitivity_level`` instead of ``level``."""
        return PASS if self.ci_gap_sensitivity[1] < 0 else FAIL


def gate_a(records: PairedRecords, *, B: int = DEFAULT_RESAMPLES, rng=None, level: float = DEFAULT_LEVEL,
           sensitivity_level: float = SENSITIVITY_LEVEL, item_level: bool = True) -> GateA:
    """Diagnostic (a) on the held-out records of one defense/baseline pair.

    **Pass** iff the upper end of the ``level`` percentile interval of Δgap (question-clustered,
    paired, ``B`` resamples) is below 0. When ``rng`` is an int seed (or None, meaning 0) the
    item-level comparison uses a fresh generator with the same seed; with a Generator it continues
    that generator's stream.
    """
    lv = check_scalar_prob("level", level)
    slv = check_scalar_prob("sensitivity_level", sensitivity_level)
    gen, seed, info = make_rng(rng)
    dist = cluster_bootstrap(records, B=B, rng=gen, unit="question")
    ci = dist.interval(lv)
    item_ci = item_dep = None
    item_units = None
    if item_level:
        gen2 = np.random.default_rng(seed) if seed is not None else gen
        idist = cluster_bootstrap(records, B=B, rng=gen2, unit="item")
        item_ci, item_dep, item_units = idist.interval(lv), idist.interval(lv, "delta_deploy"), idist.n_units
    return GateA(
        status=PASS if ci[1] < 0 else FAIL, **gap_estimates(records.rates()), ci_gap=ci, ci_deploy=dist.interval(lv, "delta_deploy"),
        ci_gap_sensitivity=dist.interval(slv), level=lv, sensitivity_level=slv, B=dist.B, seed=seed, rng=info,
        n_questions=records.n_questions, n_items=records.n_items,
        n_nan_resamples=int(np.count_nonzero(~np.isfinite(dist.delta_gap))),
        item_ci_gap=item_ci, item_ci_deploy=item_dep, item_n_units=item_units,
    )
