"""Held-out split audit of the comparison rules and evidence responsiveness: does a rule that ships on part of the
reruns keep its promise on the reruns it did not see, and does it ship more as evidence grows?

**Why one module of about 580 lines.** The split audit and evidence responsiveness draw from one
random stream in one documented order (below), share the vectorised bootstrap over splits and
report through the same result types; the order of the draws is part of what a seed reproduces, so
it is kept in one file where it can be read top to bottom.


For each cell with ``N`` reruns, ``S`` random splits put ``N'`` reruns (default ``floor(N/2)``) in an
audit part and the rest in a held-out part. Each of the five rules of
:mod:`recipe_audit.stats.rules` is applied to the audit part only; where a rule ships, the held-out
failure fraction is recorded, and it is a *violation* when that fraction exceeds ``eps``. Per rule
the result reports the cells shipped on the full data, those of them whose full-data failure
fraction ``k/N`` exceeds ``eps``, and ``P(violation | ship)`` pooled over cells and splits, with
its numerator and denominator.

Unfinished reruns are NaN metrics (or ``AuditCell.n_unfinished``): failures for the card and in the
held-out fraction, ignored by the practice rules. Everything is vectorised over splits and
bootstrap resamples; Python loops run only over cells, rules and distinct finished counts.

Randomness (one explicit ``numpy.random.Generator``; never the global RNG), per cell in order:

1. (split audit only) the full-data rules: :func:`~recipe_audit.stats.rules.apply_rules` with ``B``
   resamples, i.e. one ``rng.integers(0, n_finished, size=(B, n_finished))`` draw;
2. ``u = rng.random((S, N))``; split ``s`` audits the ``N'`` reruns with the smallest ``u[s]``,
   kept in their original rerun order, and holds out the rest;
3. for each distinct number ``c >= 1`` of finished reruns among the audit parts, in increasing
   order, one draw ``idx = rng.integers(0, c, size=(audit_B, c))``: resample ``j`` of a split with
   ``c`` finished audit reruns ``b`` is ``b[idx[j]]``. These resample indices are shared by every
   split of the cell with that count (common random numbers), which turns the bootstrap over all
   splits into one matrix product. Each split's bootstrap is still an ordinary bootstrap of its own
   audit part with ``audit_B`` resamples; only the Monte-Carlo noise is shared across splits.

The bootstrap inside the splits uses ``audit_B`` resamples (default 200, a smaller number than the
card's default 2,000 to keep the audit fast); the full-data decisions use ``B`` (default 2,000).
Both are recorded in the results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from recipe_audit.stats.array_checks import (
    check_metrics,
    check_positive_int,
    check_tau,
    make_rng,
)
from recipe_audit.stats.bounds import clopper_pearson_upper, sample_floor
from recipe_audit.stats.checks import check_delta, check_eps
from recipe_audit.stats.defaults import DEFAULT_DELTA, DEFAULT_EPS
from recipe_audit.stats.errors import StatsInputError
from recipe_audit.stats.exact import release_rule
from recipe_audit.stats.rules import RULES, apply_rules, bootstrap_percentile, failure_mask

__all__ = [
    "DEFAULT_AUDIT_B",
    "AuditCell",
    "CellAudit",
    "EvidenceResponsiveness",
    "RuleAudit",
    "SplitAuditResult",
    "evidence_responsiveness",
    "held_out_split_audit",
]

#: Bootstrap resamples per split inside the audit (the full-data rules use ``B = 2000``).
DEFAULT_AUDIT_B = 200

_MATMUL_ROWS = 32  # rows per matrix product in the shared-weights bootstrap

_RANDOMNESS = (
    "per cell: full-data bootstrap rng.integers(0, n_finished, (B, n_finished)) [split audit only]; "
    "rng.random((S, N)), audit part = the N' reruns with the smallest draws, in rerun order; then, "
    "for each distinct finished count c in the audit parts (ascending), one "
    "rng.integers(0, c, (audit_B, c)) resample-index draw shared by all splits with that count"
)


@dataclass(frozen=True, eq=False)
class AuditCell:
    """One cell for the split audit: the reruns' ``metrics`` (1-D, NaN = unfinished), bar ``tau``.

    ``n_unfinished`` more planned reruns that logged nothing may be given instead of NaN entries;
    they are appended as NaN. ``metrics`` is stored as a read-only float64 array.
    """

    metrics: np.ndarray
    tau: float
    n_unfinished: int = 0

    def __post_init__(self) -> None:
        m = check_metrics(self.metrics).copy()
        m[~np.isfinite(m)] = np.nan
        m.setflags(write=False)
        object.__setattr__(self, "metrics", m)
        object.__setattr__(self, "tau", check_tau(self.tau))
        object.__setattr__(
            self, "n_unfinished", check_positive_int("n_unfinished", self.n_unfinished, minimum=0)
        )

    @property
    def values(self) -> np.ndarray:
        """All ``N`` reruns, shape (N,): the metrics then ``n_unfinished`` NaNs."""
        if not self.n_unfinished:
            return self.metrics
        return np.concatenate([self.metrics, np.full(self.n_unfinished, np.nan)])

    @property
    def n(self) -> int:
        """Number of reruns ``N``, unfinished included."""
        return int(self.metrics.size) + self.n_unfinished


def _coerce_cells(cells) -> list[AuditCell]:
    if isinstance(cells, AuditCell):
        cells = [cells]
    out = []
    for i, c in enumerate(cells):
        if isinstance(c, AuditCell):
            out.append(c)
        elif isinstance(c, Sequence) and len(c) in (2, 3) and not isinstance(c, str):
            out.append(AuditCell(*c))
        else:
            raise StatsInputError(
                f"cell {i} must be an AuditCell or a (metrics, tau[, n_unfinished]) tuple, got {type(c).__name__}."
            )
    if not out:
        raise StatsInputError("the audit needs at least one cell, got none.")
    for i, c in enumerate(out):
        if c.n == 0:
            raise StatsInputError(f"cell {i} has no reruns.")
    return out


def _pairs(mapping) -> tuple:
    return tuple((r, mapping[r]) for r in RULES)


# --------------------------------------------------------------------------------------------------
# vectorised core


def _draw_audit_parts(x: np.ndarray, fail: np.ndarray, n_audit: int, n_splits: int, rng):
    """Draw the splits; return audit values (S, N') in rerun order, audit failures and held-out failures."""
    n = x.size
    u = rng.random((n_splits, n))
    if n_audit < n:
        part = np.argpartition(u, n_audit - 1, axis=1)[:, :n_audit]
        mask = np.zeros((n_splits, n), dtype=bool)
        np.put_along_axis(mask, part, True, axis=1)
    else:
        mask = np.ones((n_splits, n), dtype=bool)
    audit = np.broadcast_to(x, mask.shape)[mask].reshape(n_splits, n_audit)
    k_audit = np.count_nonzero(mask & fail, axis=1)
    k_held = np.count_nonzero(~mask & fail, axis=1)
    return audit, k_audit, k_held


def _bootstrap_limits(audit: np.ndarray, finite: np.ndarray, cnt: np.ndarray, audit_B: int, pct, rng):
    """Bootstrap limit per row (nan where no reruns finished); shared resample indices per count."""
    limits = np.full(audit.shape[0], np.nan)
    all_finite = bool(finite.all())
    for c in np.unique(cnt):
        c = int(c)
        if c == 0:
            continue
        idx = rng.integers(0, c, size=(audit_B, c))
        # weights[i, j] = how often position i appears in resample j; C-contiguous (c, audit_B)
        flat = (idx * audit_B + np.arange(audit_B)[:, None]).ravel()
        weights = np.bincount(flat, minlength=c * audit_B).reshape(c, audit_B).astype(np.float64)
        rows = cnt == c
        if all_finite:
            vals = audit
        else:
            vals = audit[rows][finite[rows]].reshape(-1, c)
        vals = np.ascontiguousarray(vals)
        means = np.empty((vals.shape[0], audit_B))
        # Row blocks small enough that BLAS stays single-threaded: a multi-threaded product this
        # small gains little and stalls badly when the cores are shared with other processes.
        for start in range(0, vals.shape[0], _MATMUL_ROWS):
            stop = start + _MATMUL_ROWS
            np.matmul(vals[start:stop], weights, out=means[start:stop])
        means /= c
        limits[rows] = np.percentile(means, pct, axis=1)
    return limits


def _rules_on_rows(audit, k_audit, tau, eps, delta, n_min, audit_B, hib, rng) -> np.ndarray:
    """Apply the five rules to each row of ``audit`` (S, N'); returns bool (5, S) in RULES order."""
    n_rows, n_audit = audit.shape
    finite = ~np.isnan(audit)
    cnt = np.count_nonzero(finite, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        zeroed = np.where(finite, audit, 0.0)
        mean = zeroed.sum(axis=1) / cnt
        # median: NaNs sort last, so the finished values of row s are sorted[s, :cnt[s]]
        srt = np.sort(audit, axis=1)
        lo = np.maximum((cnt - 1) // 2, 0)
        hi = np.maximum(cnt // 2, 0)
        median = 0.5 * (
            np.take_along_axis(srt, lo[:, None], axis=1)[:, 0]
            + np.take_along_axis(srt, hi[:, None], axis=1)[:, 0]
        )
        median[cnt == 0] = np.nan
        dev = np.where(finite, audit - mean[:, None], 0.0)
        sd = np.sqrt((dev * dev).sum(axis=1) / (cnt - 1))
        sd[cnt < 2] = np.nan
    boot = _bootstrap_limits(audit, finite, cnt, audit_B, bootstrap_percentile(hib), rng)
    ks = np.arange(n_audit + 1)
    card_table = release_rule(ks, n_audit, np.asarray(clopper_pearson_upper(ks, n_audit, delta)), eps, n_min)
    ships = np.empty((len(RULES), n_rows), dtype=bool)
    if hib:
        ships[0] = mean >= tau
        ships[1] = median >= tau
        ships[2] = boot >= tau
        ships[3] = (mean - 2.0 * sd) >= tau
    else:
        ships[0] = mean <= tau
        ships[1] = median <= tau
        ships[2] = boot <= tau
        ships[3] = (mean + 2.0 * sd) <= tau
    ships[4] = card_table[k_audit]
    return ships


# --------------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class RuleAudit:
    """Pooled split-audit result of one rule.

    ``p_violation_given_ship = split_violations / split_ships`` over all cells and splits (``None``
    when the rule never shipped on an audit part).
    """

    rule: str
    cells_shipped_full: int
    cells_shipped_full_over_budget: int
    split_ships: int
    split_violations: int
    p_violation_given_ship: float | None

    def to_dict(self) -> dict:
        return {
            "rule": self.rule,
            "cells_shipped_full": self.cells_shipped_full,
            "cells_shipped_full_over_budget": self.cells_shipped_full_over_budget,
            "split_ships": self.split_ships,
            "split_violations": self.split_violations,
            "p_violation_given_ship": self.p_violation_given_ship,
        }


@dataclass(frozen=True)
class CellAudit:
    """Split-audit detail for one cell: full-data counts and decisions, per-rule split counts."""

    index: int
    tau: float
    n: int
    k: int
    n_unfinished: int
    audit_size: int
    full_ships: tuple[tuple[str, bool], ...]
    split_ships: tuple[tuple[str, int], ...]
    split_violations: tuple[tuple[str, int], ...]

    @property
    def failure_fraction(self) -> float:
        """Full-data failure fraction ``k / N``."""
        return self.k / self.n

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "tau": self.tau,
            "n": self.n,
            "k": self.k,
            "n_unfinished": self.n_unfinished,
            "audit_size": self.audit_size,
            "failure_fraction": self.failure_fraction,
            "full_ships": dict(self.full_ships),
            "split_ships": dict(self.split_ships),
            "split_violations": dict(self.split_violations),
        }


@dataclass(frozen=True)
class SplitAuditResult:
    """Result of :func:`held_out_split_audit`.

    ``rules`` holds one :class:`RuleAudit` per key of :data:`~recipe_audit.stats.rules.RULES` (also
    reachable as ``by_rule[name]``); ``cells`` the per-cell detail. ``audit_size`` is the requested
    N' (``None``: ``floor(N/2)`` per cell). ``B`` is the bootstrap size of the full-data decisions,
    ``audit_B`` that of each split; ``randomness`` states how the generator is consumed.
    """

    eps: float
    delta: float
    n_splits: int
    audit_size: int | None
    higher_is_better: bool
    B: int
    audit_B: int
    bootstrap_percentile: float
    sample_floor: int
    seed: int | None
    rng: str
    n_cells: int
    rules: tuple[RuleAudit, ...]
    cells: tuple[CellAudit, ...]
    randomness: str = field(default=_RANDOMNESS)

    @property
    def by_rule(self) -> MappingProxyType:
        """Read-only mapping ``rule -> RuleAudit``."""
        return MappingProxyType({r.rule: r for r in self.rules})

    def to_dict(self) -> dict:
        return {
            "eps": self.eps,
            "delta": self.delta,
            "n_splits": self.n_splits,
            "audit_size": self.audit_size if self.audit_size is not None else "floor(N/2)",
            "higher_is_better": self.higher_is_better,
            "B": self.B,
            "audit_B": self.audit_B,
            "bootstrap_percentile": self.bootstrap_percentile,
            "sample_floor": self.sample_floor,
            "seed": self.seed,
            "rng": self.rng,
            "n_cells": self.n_cells,
            "randomness": self.randomness,
            "rules": {r.rule: r.to_dict() for r in self.rules},
            "cells": [c.to_dict() for c in self.cells],
        }


@dataclass(frozen=True)
class EvidenceResponsiveness:
    """Result of :func:`evidence_responsiveness`.

    For each audit size ``sizes[i]``, ``n_cells[i]`` cells had at least that many reruns; per rule,
    ``ship_counts`` holds how many of their ``n_cells[i] * n_splits`` splits shipped, and
    ``ship_fraction[rule][i]`` the fraction (``None`` when no cell was large enough).
    """

    sizes: tuple[int, ...]
    n_cells: tuple[int, ...]
    n_splits: int
    eps: float
    delta: float
    sample_floor: int
    higher_is_better: bool
    audit_B: int
    bootstrap_percentile: float
    seed: int | None
    rng: str
    ship_counts: tuple[tuple[str, tuple[int, ...]], ...]
    randomness: str = field(default=_RANDOMNESS)

    @property
    def ship_fraction(self) -> MappingProxyType:
        """Read-only mapping ``rule -> tuple`` of ship fractions over ``sizes``."""
        out = {}
        for rule, counts in self.ship_counts:
            out[rule] = tuple(
                (cnt / (nc * self.n_splits)) if nc else None
                for cnt, nc in zip(counts, self.n_cells, strict=True)
            )
        return MappingProxyType(out)

    def to_dict(self) -> dict:
        return {
            "sizes": list(self.sizes),
            "n_cells": list(self.n_cells),
            "n_splits": self.n_splits,
            "eps": self.eps,
            "delta": self.delta,
            "sample_floor": self.sample_floor,
            "higher_is_better": self.higher_is_better,
            "audit_B": self.audit_B,
            "bootstrap_percentile": self.bootstrap_percentile,
            "seed": self.seed,
            "rng": self.rng,
            "randomness": self.randomness,
            "ship_counts": {r: list(c) for r, c in self.ship_counts},
            "ship_fraction": {r: list(f) for r, f in self.ship_fraction.items()},
        }


# --------------------------------------------------------------------------------------------------
# public functions


def held_out_split_audit(
    cells,
    eps=DEFAULT_EPS,
    delta=DEFAULT_DELTA,
    *,
    n_splits: int = 1000,
    audit_size: int | None = None,
    rng=None,
    B: int = 2000,
    audit_B: int = DEFAULT_AUDIT_B,
    higher_is_better: bool = True,
) -> SplitAuditResult:
    """Replay the five rules on random audit/held-out splits of each cell.

    Parameters
    ----------
    cells : sequence of AuditCell or (metrics, tau[, n_unfinished]) tuples
        ``metrics`` is 1-D with one entry per rerun, NaN/inf = unfinished. Each cell needs ``N >= 2``.
    eps, delta : float in (0, 1)
        Failure budget (also the violation threshold) and the card's statistical risk.
    n_splits : int
        Splits ``S`` per cell (default 1,000).
    audit_size : int or None
        Audit part size ``N'`` for every cell, ``1 <= N' < N``; ``None`` means ``floor(N/2)``.
    rng : numpy.random.Generator, int seed, or None (``default_rng(0)``)
        The only randomness; consumed as described in the module docstring.
    B : int
        Bootstrap resamples for the full-data decisions (default 2,000).
    audit_B : int
        Bootstrap resamples per split inside the audit (default 200).
    higher_is_better : bool
        False for lower-is-better metrics (every comparison flips).

    Returns
    -------
    SplitAuditResult
    """
    cell_list = _coerce_cells(cells)
    e = check_eps(eps)
    d = check_delta(delta)
    S = check_positive_int("n_splits", n_splits)
    B = check_positive_int("B", B)
    audit_B = check_positive_int("audit_B", audit_B)
    if audit_size is not None:
        audit_size = check_positive_int("audit_size", audit_size)
    generator, seed, rng_info = make_rng(rng)
    hib = bool(higher_is_better)
    n_min = sample_floor(e, d)

    full_ships = np.zeros(len(RULES), dtype=np.int64)
    full_over = np.zeros(len(RULES), dtype=np.int64)
    split_ships = np.zeros(len(RULES), dtype=np.int64)
    split_viol = np.zeros(len(RULES), dtype=np.int64)
    cell_results = []
    for i, cell in enumerate(cell_list):
        x = cell.values
        n = x.size
        if n < 2:
            raise StatsInputError(f"cell {i} has {n} rerun, but a split needs at least 2.")
        n_audit = n // 2 if audit_size is None else audit_size
        if not 1 <= n_audit < n:
            raise StatsInputError(
                f"audit_size ({n_audit}) must be at least 1 and below the reruns of cell {i} ({n})."
            )
        fail = failure_mask(x, cell.tau, hib)
        k_full = int(np.count_nonzero(fail))
        full = apply_rules(x, cell.tau, eps=e, delta=d, higher_is_better=hib, B=B, rng=generator)
        full_vec = np.array([full.ships[r] for r in RULES], dtype=bool)
        full_ships += full_vec
        if k_full / n > e:
            full_over += full_vec

        audit, k_audit, k_held = _draw_audit_parts(x, fail, n_audit, S, generator)
        ships = _rules_on_rows(audit, k_audit, cell.tau, e, d, n_min, audit_B, hib, generator)
        violation = (k_held / (n - n_audit)) > e
        c_ships = ships.sum(axis=1)
        c_viol = (ships & violation[None, :]).sum(axis=1)
        split_ships += c_ships
        split_viol += c_viol
        cell_results.append(
            CellAudit(
                index=i,
                tau=cell.tau,
                n=n,
                k=k_full,
                n_unfinished=int(np.count_nonzero(np.isnan(x))),
                audit_size=n_audit,
                full_ships=_pairs(full.ships),
                split_ships=tuple((r, int(v)) for r, v in zip(RULES, c_ships, strict=True)),
                split_violations=tuple((r, int(v)) for r, v in zip(RULES, c_viol, strict=True)),
            )
        )

    rule_results = tuple(
        RuleAudit(
            rule=r,
            cells_shipped_full=int(full_ships[j]),
            cells_shipped_full_over_budget=int(full_over[j]),
            split_ships=int(split_ships[j]),
            split_violations=int(split_viol[j]),
            p_violation_given_ship=(float(split_viol[j] / split_ships[j]) if split_ships[j] else None),
        )
        for j, r in enumerate(RULES)
    )
    return SplitAuditResult(
        eps=e,
        delta=d,
        n_splits=S,
        audit_size=audit_size,
        higher_is_better=hib,
        B=B,
        audit_B=audit_B,
        bootstrap_percentile=bootstrap_percentile(hib),
        sample_floor=n_min,
        seed=seed,
        rng=rng_info,
        n_cells=len(cell_list),
        rules=rule_results,
        cells=tuple(cell_results),
    )


def evidence_responsiveness(
    cells,
    sizes,
    n_splits: int = 1000,
    eps=DEFAULT_EPS,
    delta=DEFAULT_DELTA,
    rng=None,
    *,
    audit_B: int = DEFAULT_AUDIT_B,
    higher_is_better: bool = True,
) -> EvidenceResponsiveness:
    """Fraction of splits each rule ships, for audit sizes ``N'`` over a grid
    (a sound rule ships more as evidence grows; the card ships nothing below its sample floor).

    For each size (in the order given) and each cell with ``N >= N'``, ``n_splits`` random audit
    parts of size ``N'`` are drawn and the five rules applied (same rules and randomness scheme as
    :func:`held_out_split_audit`, without the full-data step). A sound rule ships more as ``N'``
    grows; the card ships nothing below ``N_min``. Cells smaller than ``N'`` are skipped for that
    size (``n_cells`` records how many were used).
    """
    cell_list = _coerce_cells(cells)
    try:
        size_list = [check_positive_int("audit size", s) for s in sizes]
    except TypeError:
        raise StatsInputError("sizes must be a sequence of positive integers.") from None
    if not size_list:
        raise StatsInputError("sizes must hold at least one audit size.")
    e = check_eps(eps)
    d = check_delta(delta)
    S = check_positive_int("n_splits", n_splits)
    audit_B = check_positive_int("audit_B", audit_B)
    generator, seed, rng_info = make_rng(rng)
    hib = bool(higher_is_better)
    n_min = sample_floor(e, d)

    counts = np.zeros((len(RULES), len(size_list)), dtype=np.int64)
    n_cells = []
    prepared = [(c.values, failure_mask(c.values, c.tau, hib), c.tau) for c in cell_list]
    for j, size in enumerate(size_list):
        used = 0
        for x, fail, tau in prepared:
            if x.size < size:
                continue
            used += 1
            audit, k_audit, _ = _draw_audit_parts(x, fail, size, S, generator)
            ships = _rules_on_rows(audit, k_audit, tau, e, d, n_min, audit_B, hib, generator)
            counts[:, j] += ships.sum(axis=1)
        n_cells.append(used)
    return EvidenceResponsiveness(
        sizes=tuple(size_list),
        n_cells=tuple(n_cells),
        n_splits=S,
        eps=e,
        delta=d,
        sample_floor=n_min,
        higher_is_better=hib,
        audit_B=audit_B,
        bootstrap_percentile=bootstrap_percentile(hib),
        seed=seed,
        rng=rng_info,
        ship_counts=tuple((r, tuple(int(v) for v in counts[i])) for i, r in enumerate(RULES)),
    )
