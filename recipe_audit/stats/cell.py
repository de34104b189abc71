"""Every statistic a recipe card states for one cell, each computed once.

A card states, for one cell (the reruns of one recipe on one audit set) at each of its bars τ:
which reruns fail τ, the exact tail bound and its verdict (:func:`.exact.tail_bound`), what the
comparison rules decide (:mod:`.rules`) and the simultaneous band read at τ (:mod:`.band`).
:func:`cell_statistics` computes them in one call: the failures and the tail bound once per τ;
the statistics of the practice rules, which do not depend on τ (the mean, median, sd and the
bootstrap's resamples), once per cell; the band once, read at every τ. The card
(:mod:`recipe_audit.cards.build`) renders the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recipe_audit.stats import exact
from recipe_audit.stats.array_checks import check_metrics, check_positive_int, check_tau, make_rng
from recipe_audit.stats.band import BAND_METHODS, BandBounds, band_bounds_at
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.rules import (
    PracticeStatistics,
    RuleDecisions,
    decisions_at,
    failure_mask_at,
    practice_at,
)

__all__ = ["CellStatistics", "cell_statistics", "cell_statistics_at"]


@dataclass(frozen=True)
class CellStatistics:
    """The statistics of one cell at the bars ``taus``: per bar, ``failed`` (which reruns fail
    it, in rerun order), ``bounds`` (the :class:`~.exact.TailBound` of its failures) and
    ``rules`` (the five rules' :class:`~.rules.RuleDecisions`, whose card numbers are the bound's:
    ``upper`` as the card states it, the card rule shipping exactly when the verdict is
    ``release-supported``); once for the cell, ``practice`` (what the practice rules read) and
    ``band`` (the simultaneous band, read at every bar)."""

    taus: tuple[float, ...]
    failed: tuple[np.ndarray, ...]
    bounds: tuple[exact.TailBound, ...]
    rules: tuple[RuleDecisions, ...]
    practice: PracticeStatistics
    band: BandBounds


def cell_statistics(metrics, taus, *, eps: float = DEFAULT_EPS, delta: float = DEFAULT_DELTA,
                    higher_is_better: bool = True, B: int = 2000, rng=None, band_method: str = "auto",
                    n_extra_failures: int = 0) -> CellStatistics:
    """The statistics a card states for the cell of ``metrics`` (one per rerun; NaN/inf: reruns
    that did not finish, failures at every bar) at each bar of ``taus``.

    ``B`` and ``rng`` are the bootstrap's (:func:`~.rules.practice_statistics`); ``band_method``
    and ``n_extra_failures`` the band's (:func:`~.band.band_bounds`: reruns with no metric counted
    as failures at every bar, for the band only).

    >>> cs = cell_statistics([0.9] * 30 + [0.5], [0.7, 0.95])
    >>> [b.k for b in cs.bounds], [b.verdict for b in cs.bounds], cs.band.k
    ([1, 31], ['unsupported', 'strong-unsupported'], (1, 31))
    """
    m = check_metrics(metrics)
    t = tuple(check_tau(x) for x in taus)
    e, d = check_eps(eps), check_delta(delta)
    B = check_positive_int("B", B)
    extra = check_positive_int("n_extra_failures", n_extra_failures, minimum=0)
    if band_method not in ("auto", *BAND_METHODS):
        raise StatsInputError(f"unknown band method {band_method!r}; use one of {', '.join(BAND_METHODS)} or 'auto'.")
    if m.size + extra < 1:
        raise StatsInputError("a band needs at least one rerun.")
    return cell_statistics_at(m, t, e, d, bool(higher_is_better), B, make_rng(rng), band_method, extra)


def cell_statistics_at(m: np.ndarray, taus: tuple[float, ...], e: float, d: float, hib: bool, B: int,
                       rng: tuple[np.random.Generator, int | None, str], band_method: str = "auto",
                       n_extra_failures: int = 0) -> CellStatistics:
    """:func:`cell_statistics` for inputs checked already (at a card's door: the audit options by
    :func:`~recipe_audit.stats.options.audit_options`, the card's own by
    :class:`~recipe_audit.cards.model.CardOptions`): a 1-D float array, finite bars, ``eps``,
    ``delta``, the direction, a resample count, a generator with its seed and words
    (:func:`~.array_checks.make_rng`), a band method and the extra failures (at least one rerun)."""
    generator, seed, info = rng
    practice = practice_at(m, hib, B, generator, seed, info)
    failed = tuple(failure_mask_at(m, x, hib) for x in taus)
    bounds = tuple(exact.tail_bound_at(int(np.count_nonzero(f)), m.size, e, d) for f in failed)
    rules = tuple(decisions_at(practice, x, e, d, b.k, b.n, upper=b.upper, lower=b.lower,
                               sample_floor=b.sample_floor, card_verdict=b.verdict,
                               card_ships=b.verdict == exact.SUPPORTED) for x, b in zip(taus, bounds, strict=True))
    band = band_bounds_at(m, np.asarray(taus, dtype=np.float64), e, d, hib, band_method, n_extra_failures)
    return CellStatistics(taus, failed, bounds, rules, practice, band)
