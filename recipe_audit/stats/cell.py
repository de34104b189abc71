"""Every statistic a recipe card states for one cell, each computed once.

A card states, for one cell (the reruns of one recipe on one audit set) at each of its bars τ:
which reruns fail τ, the exact tail bound and its verdict (:func:`.exact.tail_bound`), what the
comparison rules decide (:mod:`.rules`) and the simultaneous band read at τ (:mod:`.band`).
:func:`cell_statistics` computes them in one call: the failures and the tail bound once per τ;
the statistics of the practice rules, which do not depend on τ (the mean, median, sd and the
bootstrap's resamples), once per cell; the band once, read at every τ.

:func:`cell_readings_at` is the one call a card makes per cell: those statistics (the pointwise
reading), and on top of them the readings the card asks for at each bar: the verdict at the planned
N of a curtailed sweep (:mod:`.curtail`), the confidence sequence of an open-ended sweep with the
looks it took (:mod:`.anytime`), and the cell's reading as a member of a family of recipes
(:mod:`.family`, given the member's seat in the family's test). The card
(:mod:`recipe_audit.cards.build`) renders the result.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from recipe_audit.stats import checks, exact
from recipe_audit.stats.anytime import AnytimeBound, anytime_bound_at
from recipe_audit.stats.array_checks import check_metrics, check_positive_int, check_tau, make_rng
from recipe_audit.stats.band import BAND_METHODS, BandBounds, band_bounds_at
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.curtail import CurtailState, curtail_state_at
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.family import FamilyMember, FamilySeat, member_at
from recipe_audit.stats.rules import (
    PracticeStatistics,
    RuleDecisions,
    decisions_at,
    failure_mask_at,
    practice_at,
)

__all__ = ["CellReadings", "CellStatistics", "cell_readings_at", "cell_statistics", "cell_statistics_at",
           "failure_counts_at"]


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


def failure_counts_at(m: np.ndarray, taus: tuple[float, ...], hib: bool) -> tuple[int, ...]:
    """How many of the reruns ``m`` fail each bar of ``taus`` (checked inputs): what a family's test
    needs of each member before any member is read (:func:`~.family.family_seats_at`)."""
    return tuple(int(np.count_nonzero(failure_mask_at(m, x, hib))) for x in taus)


@dataclass(frozen=True)
class CellReadings:
    """Every reading a card states for one cell, per bar of ``statistics.taus``:

    * ``statistics``: the pointwise reading (:class:`CellStatistics`: failures, tail bound, rules,
      band);
    * ``curtailed``: the :class:`~.curtail.CurtailState` at the planned N of a curtailed sweep
      (None: not curtailed);
    * ``anytime``: the confidence sequence's :class:`~.anytime.AnytimeBound` of the cell, and
      ``looks`` its bounds at each look the sweep took (empty tuples: not read as open-ended);
    * ``family``: the :class:`~.family.FamilyMember` of the cell in its family (None: no family
      at that bar), at the planned N for a curtailed cell (the unlaunched reruns failing for ``U``,
      ``L`` and the verdict from the failures seen), and ``family_upper`` its upper bound at δ/M
      where Holm's step-down certified it at its own, larger level (None otherwise: ``family[i].upper``
      is at δ/M); ``family_anytime``: the confidence sequence at δ/M of an open-ended cell in a
      family (None otherwise)."""

    statistics: CellStatistics
    curtailed: tuple[CurtailState | None, ...]
    anytime: tuple[AnytimeBound | None, ...]
    looks: tuple[tuple[AnytimeBound, ...], ...]
    family: tuple[FamilyMember | None, ...]
    family_upper: tuple[float | None, ...]
    family_anytime: tuple[AnytimeBound | None, ...]


def _family_member(k: int, n: int, r: int, e: float, d: float, seat: FamilySeat) -> FamilyMember:
    """The member reading of ``k`` failures among ``n`` at the planned N (``r`` of them never
    launched, failing for the upper bound; ``r = 0``: an ordinary cell)."""
    mem = member_at(k + r, n, e, d, seat)
    if not r:
        return mem
    fd = checks.scaled(d, seat.size)
    lower, verdict = exact.lower_at(k, n, fd), mem.verdict  # L from the failures seen, at the planned N
    if verdict == exact.STRONG_UNSUPPORTED and not lower > e:
        verdict = exact.UNSUPPORTED if n >= mem.sample_floor else exact.INSUFFICIENT
    elif lower > e:
        verdict = exact.STRONG_UNSUPPORTED
    return replace(mem, lower=lower, verdict=verdict)


def cell_readings_at(m: np.ndarray, taus: tuple[float, ...], e: float, d: float, hib: bool, B: int,
                     rng: tuple[np.random.Generator, int | None, str], band_method: str = "auto",
                     n_extra_failures: int = 0, *, curtail_stop_on: str | None = None, anytime: bool = False,
                     looks: tuple[tuple[tuple[int, ...], ...], ...] = (),
                     family: tuple[FamilySeat | None, ...] | None = None) -> CellReadings:
    """Every reading of the cell of the reruns ``m`` at the bars ``taus``, in one call, for inputs
    checked already (:func:`cell_statistics_at` takes the same first nine).

    ``curtail_stop_on``: the cell is a curtailed sweep's, planned at ``N = m.size +
    n_extra_failures`` and stopped on this rule (None: not curtailed). ``anytime``: read it with
    the confidence sequence; ``looks``: the looks the sweep took, each the reruns it had seen, as
    groups of positions in ``m`` (a group fails when one of its reruns fails). ``family``: the
    cell's seat at each bar in its family's test (:func:`~.family.family_seats_at` of the family's
    counts: failures, with a curtailed cell's unlaunched reruns, and reruns at the planned N), None
    at a bar without a family."""
    cs = cell_statistics_at(m, taus, e, d, hib, B, rng, band_method, n_extra_failures)
    n, per = m.size, range(len(taus))
    ks = [b.k for b in cs.bounds]
    r = n_extra_failures if curtail_stop_on is not None else 0
    curtailed = tuple(curtail_state_at(k, n, n + r, e, d, curtail_stop_on) if curtail_stop_on is not None else None
                      for k in ks)
    any_b = tuple(anytime_bound_at(k, n, e, d) if anytime else None for k in ks)
    seen = tuple(tuple(anytime_bound_at(sum(bool(f[list(g)].any()) for g in look), len(look), e, d)
                       for look in looks if look) for f in cs.failed) if anytime else tuple(() for _ in per)
    seats = family or tuple(None for _ in per)
    fam = tuple(None if s is None else _family_member(k, n + r, r, e, d, s) for k, s in zip(ks, seats, strict=True))
    fam_up = tuple(exact.upper_at(k + r, n + r, f.family_delta) if f is not None and f.upper_level != f.family_delta
                   else None for k, f in zip(ks, fam, strict=True))
    fam_any = tuple(anytime_bound_at(k, n + r, e, checks.scaled(d, s.size)) if anytime and s is not None else None
                    for k, s in zip(ks, seats, strict=True))
    return CellReadings(cs, curtailed, any_b, seen, fam, fam_up, fam_any)
