"""The simultaneous band on a card (every τ at once): one ``band`` object per entry."""

from __future__ import annotations

from typing import Any

from recipe_audit.stats.band import BandBounds


def band_fields(bb: BandBounds, i: int) -> dict[str, Any]:
    """The ``band`` object of an entry: the simultaneous bound at its τ, the ``i``-th bar of the
    cell's band ``bb`` (valid for every τ at once), its method and sample floor. For a curtailed
    cell the band is taken at the planned N with the unlaunched reruns counted as failures (a
    worst-case completion, so it stays valid): ``bb.n_extra_failures``."""
    b = bb.band
    return {
        "method": b.method, "label": b.label, "fallback": b.fallback, "delta": b.delta, "n": bb.n,
        "n_unlaunched_counted_as_failures": bb.n_extra_failures, "c": b.c, "local_level": b.local_level,
        "coverage": b.coverage, "sample_floor": bb.sample_floor, "k": bb.k[i], "upper_bound": bb.upper[i],
        "pointwise_upper_bound": bb.pointwise_upper[i], "supported": bb.certified[i],
        "certified_tau_limit": bb.certified_tau_limit,
    }
