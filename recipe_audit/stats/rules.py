"""The comparison rules: what common practice would decide on the same reruns.

Given the metrics of a cell's reruns and the release bar ``tau``, each rule says whether it would
ship the recipe:

==================  =====================================================================
``mean``            ``mean(b) >= tau``
``median``          ``median(b) >= tau``
``bootstrap``       10th percentile of the bootstrap distribution of ``mean(b)`` ``>= tau``
                    (``B`` resamples, default 2,000, from an explicit seeded Generator)
``mean_minus_2sd``  ``mean(b) - 2 * sd(b) >= tau`` with ``ddof=1`` (undefined, so no ship,
                    when fewer than 2 reruns finished)
``card``            ``U <= eps`` and ``N >= N_min`` (the recipe card)
==================  =====================================================================

``b`` are the *finished* reruns only (finite metrics): the practice rules ignore unfinished reruns,
and the result says how many. The card instead counts every unfinished rerun (NaN/inf metric, or
listed in ``n_unfinished``) as a failure. For lower-is-better metrics every comparison flips: a
rerun fails when ``metric > tau``; ``mean``/``median`` ship when ``<= tau``; the bootstrap uses the
90th percentile and ships when it is ``<= tau``; the sd rule ships when ``mean + 2 sd <= tau``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from recipe_audit.stats import exact, floors
from recipe_audit.stats.array_checks import (
    check_count_arrays,
    check_metrics,
    check_positive_int,
    check_tau,
    make_rng,
)
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.verdicts import verdict as _verdict

__all__ = [
    "RULES",
    "PracticeStatistics",
    "RuleDecisions",
    "apply_rules",
    "bootstrap_percentile",
    "count_failures",
    "decisions_at",
    "failure_mask",
    "failure_mask_at",
    "practice_at",
    "practice_statistics",
]

#: The rule keys, in report order.
RULES = ("mean", "median", "bootstrap", "mean_minus_2sd", "card")


def bootstrap_percentile(higher_is_better: bool = True) -> float:
    """Percentile of the bootstrap distribution the bootstrap rule compares with ``tau``."""
    return 10.0 if higher_is_better else 90.0


def failure_mask(metrics, tau, higher_is_better: bool = True) -> np.ndarray:
    """Boolean array, same shape as ``metrics``: True where the rerun fails at bar ``tau``.

    A rerun fails when its metric is below ``tau`` (above, for lower-is-better metrics) or when the
    metric is NaN/inf (the rerun did not finish or produced garbage: dropping it would bias the card toward
    success).
    """
    return failure_mask_at(np.asarray(metrics, dtype=np.float64), check_tau(tau), higher_is_better)


def failure_mask_at(m: np.ndarray, t: float, higher_is_better: bool) -> np.ndarray:
    """:func:`failure_mask` for a float array ``m`` and a bar ``t`` checked already."""
    finite = np.isfinite(m)
    with np.errstate(invalid="ignore"):
        worse = (m < t) if higher_is_better else (m > t)
    return ~finite | worse


def count_failures(metrics, tau, higher_is_better: bool = True) -> int:
    """Number of failing reruns in a 1-D ``metrics`` array; NaN and inf count as failures."""
    return int(np.count_nonzero(failure_mask(check_metrics(metrics), tau, higher_is_better)))


def _none_if_nan(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass(frozen=True)
class RuleDecisions:
    """Decisions of the five comparison rules on one cell, with the statistic each rule computed.

    ``ships`` maps each key of :data:`RULES` to a bool. Statistics are ``nan`` when undefined
    (``mean``/``median``/``bootstrap_limit`` with no finished rerun; ``sd``/``two_sd_limit`` with
    fewer than two). ``two_sd_limit`` is ``mean - 2 sd`` (``mean + 2 sd`` for lower-is-better).
    ``k``/``n`` are the card's counts (unfinished reruns are failures); ``n_finished`` reruns fed
    the practice rules, ``n_ignored = n - n_finished`` were ignored by them. ``B``,
    ``bootstrap_percentile``, ``seed`` and ``rng`` describe the bootstrap; ``notes`` says why a rule
    could not ship.
    """

    tau: float
    higher_is_better: bool
    eps: float
    delta: float
    k: int
    n: int
    n_finished: int
    n_ignored: int
    mean: float
    median: float
    sd: float
    bootstrap_limit: float
    two_sd_limit: float
    upper: float
    lower: float
    sample_floor: int
    card_verdict: str
    B: int
    bootstrap_percentile: float
    seed: int | None
    rng: str
    decisions: tuple[tuple[str, bool], ...]
    notes: tuple[str, ...] = ()

    @property
    def ships(self) -> MappingProxyType:
        """Read-only mapping ``rule -> bool`` for the keys of :data:`RULES`."""
        return MappingProxyType(dict(self.decisions))

    def to_dict(self) -> dict:
        """Plain-JSON representation (undefined statistics become ``None``)."""
        return {
            "tau": self.tau,
            "higher_is_better": self.higher_is_better,
            "eps": self.eps,
            "delta": self.delta,
            "k": self.k,
            "n": self.n,
            "n_finished": self.n_finished,
            "n_ignored": self.n_ignored,
            "ships": dict(self.decisions),
            "statistics": {
                "mean": _none_if_nan(self.mean),
                "median": _none_if_nan(self.median),
                "sd": _none_if_nan(self.sd),
                "bootstrap_limit": _none_if_nan(self.bootstrap_limit),
                "two_sd_limit": _none_if_nan(self.two_sd_limit),
                "upper": self.upper,
                "lower": self.lower,
                "sample_floor": self.sample_floor,
                "card_verdict": self.card_verdict,
            },
            "bootstrap": {
                "B": self.B,
                "percentile": self.bootstrap_percentile,
                "seed": self.seed,
                "rng": self.rng,
            },
            "notes": list(self.notes),
        }


_BOOTSTRAP_CHUNK = 1 << 22  # resampled values held at once (32 MiB of indices)


def _bootstrap_means(b: np.ndarray, B: int, generator: np.random.Generator) -> np.ndarray:
    """The means of ``B`` bootstrap resamples of ``b``: the rows of one
    ``generator.integers(0, b.size, size=(B, b.size))`` draw, taken a block of rows at a time so
    that memory stays bounded however large ``B * b.size`` is. Drawing the rows in blocks consumes
    the generator exactly as the single draw does, and each row's mean is computed alone either way,
    so the means are bit for bit those of the single draw (tested). With several blocks, one worker
    thread resamples and averages a block while the next one is drawn (NumPy releases the GIL in
    both); the draws stay in order in this thread."""
    n = int(b.size)
    rows = max(1, _BOOTSTRAP_CHUNK // n)
    if rows >= B:
        return b[generator.integers(0, n, size=(B, n))].mean(axis=1)
    from concurrent.futures import ThreadPoolExecutor

    out = np.empty(B, dtype=np.float64)

    def average(start: int, stop: int, idx: np.ndarray) -> None:
        out[start:stop] = b[idx].mean(axis=1)

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = []
        for start in range(0, B, rows):
            stop = min(B, start + rows)
            idx = generator.integers(0, n, size=(stop - start, n))
            if len(pending) >= 2:  # at most two blocks drawn and not yet averaged
                pending.pop(0).result()
            pending.append(pool.submit(average, start, stop, idx))
        for job in pending:
            job.result()
    return out


@dataclass(frozen=True)
class PracticeStatistics:
    """What the practice rules read of one cell, whatever the bar: the ``n_finished`` finished
    reruns' ``mean``, ``median``, ``sd`` (``ddof=1``), the bootstrap's ``bootstrap_limit`` (its
    ``bootstrap_percentile`` of ``B`` resampled means) and ``two_sd_limit`` (``nan`` where
    undefined, as in :class:`RuleDecisions`); ``seed`` and ``rng`` describe the bootstrap's
    generator, ``notes`` say why a rule cannot ship."""

    higher_is_better: bool
    n_finished: int
    mean: float
    median: float
    sd: float
    bootstrap_limit: float
    two_sd_limit: float
    B: int
    bootstrap_percentile: float
    seed: int | None
    rng: str
    notes: tuple[str, ...] = ()

    def ships(self, tau: float) -> tuple[tuple[str, bool], ...]:
        """The decisions of the four practice rules at the bar ``tau`` (already checked)."""

        def ok(stat: float) -> bool:
            # ships when stat >= tau (higher is better) or stat <= tau (lower is better); nan -> False
            return bool(stat >= tau) if self.higher_is_better else bool(stat <= tau)

        return (("mean", ok(self.mean)), ("median", ok(self.median)), ("bootstrap", ok(self.bootstrap_limit)),
                ("mean_minus_2sd", ok(self.two_sd_limit)))


def practice_statistics(metrics, *, higher_is_better: bool = True, B: int = 2000, rng=None) -> PracticeStatistics:
    """The statistics of :class:`PracticeStatistics` for one cell's ``metrics`` (NaN/inf: reruns
    that did not finish, ignored here), computed once for every bar: the bootstrap draws one
    ``rng.integers(0, n_finished, size=(B, n_finished))`` (none when nothing finished; ``rng`` as
    in :func:`apply_rules`)."""
    m = check_metrics(metrics)
    B = check_positive_int("B", B)
    generator, seed, rng_info = make_rng(rng)
    return practice_at(m, bool(higher_is_better), B, generator, seed, rng_info)


def practice_at(m: np.ndarray, hib: bool, B: int, generator: np.random.Generator, seed: int | None,
                rng_info: str) -> PracticeStatistics:
    """:func:`practice_statistics` for a float array, a resample count and a generator (with the
    seed and the words :func:`~.array_checks.make_rng` gives it) checked already."""
    b = m[np.isfinite(m)]
    n_fin = int(b.size)
    notes: list[str] = []
    nan = float("nan")
    pct = bootstrap_percentile(hib)
    if n_fin == 0:
        mean = median = boot = nan
        notes.append("no rerun finished, so the mean, median and bootstrap rules cannot ship.")
    else:
        mean = float(np.mean(b))
        median = float(np.median(b))
        boot = float(np.percentile(_bootstrap_means(b, B, generator), pct))
    if n_fin < 2:
        sd = two_sd = nan
        notes.append(f"the sd rule needs at least 2 finished reruns (got {n_fin}), so it does not ship.")
    else:
        sd = float(np.std(b, ddof=1))
        two_sd = mean - 2.0 * sd if hib else mean + 2.0 * sd
    return PracticeStatistics(hib, n_fin, mean, median, sd, boot, two_sd, B, pct, seed, rng_info, tuple(notes))


def apply_rules(
    metrics,
    tau,
    *,
    eps=DEFAULT_EPS,
    delta=DEFAULT_DELTA,
    k=None,
    n=None,
    n_unfinished: int = 0,
    higher_is_better: bool = True,
    B: int = 2000,
    rng=None,
) -> RuleDecisions:
    """Apply the five comparison rules to one cell.

    Parameters
    ----------
    metrics : 1-D float array, shape (m,)
        One metric per rerun; NaN/inf mark reruns that did not finish (ignored by the practice
        rules, failures for the card).
    tau : float
        Release bar.
    eps, delta : float in (0, 1)
        Failure budget and statistical risk of the card.
    k, n : int, optional
        The card's failures and reruns, passed separately (both or neither). By default
        ``n = m + n_unfinished`` and ``k = count_failures(metrics) + n_unfinished``. ``n`` must be at
        least the number of finished reruns; the difference is ``n_ignored``.
    n_unfinished : int
        Planned reruns with no metric at all (not in ``metrics``); only without ``k``/``n``.
    higher_is_better : bool
        False flips every comparison (see module docstring).
    B : int
        Bootstrap resamples: one ``rng.integers(0, n_finished, size=(B, n_finished))`` draw
        (no draw when nothing finished).
    rng : numpy.random.Generator, int seed, or None
        Source of the bootstrap resamples; ``None`` means ``default_rng(0)``. The global NumPy RNG
        is never used.

    Returns
    -------
    RuleDecisions
    """
    m = check_metrics(metrics)
    t = check_tau(tau)
    e = check_eps(eps)
    d = check_delta(delta)
    B = check_positive_int("B", B)
    n_unfinished = check_positive_int("n_unfinished", n_unfinished, minimum=0)
    generator, seed, rng_info = make_rng(rng)
    hib = bool(higher_is_better)

    n_fin = int(np.count_nonzero(np.isfinite(m)))
    if (k is None) != (n is None):
        raise StatsInputError("pass both the card's failures k and reruns n, or neither.")
    if k is None:
        n_card = int(m.size) + n_unfinished
        if n_card == 0:
            raise StatsInputError("a cell needs at least one rerun, got no metrics and no unfinished reruns.")
        k_card = int(np.count_nonzero(failure_mask(m, t, hib))) + n_unfinished
    else:
        if n_unfinished:
            raise StatsInputError("give n_unfinished only when k and n are derived from the metrics.")
        k_arr, n_arr = check_count_arrays(k, n)
        if k_arr.ndim or n_arr.ndim:
            raise StatsInputError("k and n must be single counts, not arrays.")
        k_card, n_card = int(k_arr), int(n_arr)
        if n_card < n_fin:
            raise StatsInputError(f"reruns n ({n_card}) cannot be fewer than the finished reruns ({n_fin}).")
    practice = practice_at(m, hib, B, generator, seed, rng_info)

    # the card's own numbers, as tail_bound computes them (so the card rule and the verdict agree)
    upper = exact.upper_bound(k_card, n_card, d)
    lower = exact.lower_bound(k_card, n_card, d)
    n_min = floors.sample_floor(e, d)
    card_ships = exact.certifies(k_card, n_card, e, d)
    return decisions_at(practice, t, e, d, k_card, n_card, upper=upper, lower=lower, sample_floor=n_min,
                        card_verdict=_verdict(k_card, n_card, e, d), card_ships=card_ships)


def decisions_at(practice: PracticeStatistics, tau: float, eps: float, delta: float, k: int, n: int, *,
                 upper: float, lower: float, sample_floor: int, card_verdict: str,
                 card_ships: bool) -> RuleDecisions:
    """The five rules' :class:`RuleDecisions` at the bar ``tau`` from a cell's practice statistics
    and the card's own numbers for its ``k`` failures in ``n`` reruns (checked already)."""
    return RuleDecisions(
        tau=tau,
        higher_is_better=practice.higher_is_better,
        eps=eps,
        delta=delta,
        k=k,
        n=n,
        n_finished=practice.n_finished,
        n_ignored=n - practice.n_finished,
        mean=practice.mean,
        median=practice.median,
        sd=practice.sd,
        bootstrap_limit=practice.bootstrap_limit,
        two_sd_limit=practice.two_sd_limit,
        upper=upper,
        lower=lower,
        sample_floor=sample_floor,
        card_verdict=card_verdict,
        B=practice.B,
        bootstrap_percentile=practice.bootstrap_percentile,
        seed=practice.seed,
        rng=practice.rng,
        decisions=(*practice.ships(tau), ("card", card_ships)),
        notes=practice.notes,
    )
