"""The simultaneous band on a card (every τ at once): one ``band`` object per entry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipe_audit import stats

if TYPE_CHECKING:
    from recipe_audit.cards.model import Cell


def band_fields(cell: Cell, tau: float, opts) -> dict[str, Any]:
    """The ``band`` object of an entry: the simultaneous bound at ``tau`` (valid for every τ at
    once), its method and sample floor. For a curtailed cell the band is taken at the planned N
    with the unlaunched reruns counted as failures (a worst-case completion, so it stays valid)."""
    info = cell.extra.get("curtailment")
    extra = max(0, int(info["n_planned"]) - cell.n) if info else 0
    bb = stats.band_bounds(cell.values, [tau], eps=opts.eps, delta=opts.delta,
                           higher_is_better=opts.higher_is_better, method=opts.band_method,
                           n_extra_failures=extra)
    b = bb.band
    return {
        "method": b.method, "label": b.label, "fallback": b.fallback, "delta": b.delta, "n": bb.n,
        "n_unlaunched_counted_as_failures": extra, "c": b.c, "local_level": b.local_level,
        "coverage": b.coverage, "sample_floor": bb.sample_floor, "k": bb.k[0], "upper_bound": bb.upper[0],
        "pointwise_upper_bound": bb.pointwise_upper[0], "supported": bb.certified[0],
        "certified_tau_limit": bb.certified_tau_limit,
    }
