"""The sample floors the docs tabulate, printed as the Markdown tables the docs show.

A floor is the fewest reruns, all clean, that let a card certify the failure budget ε at risk δ;
below it no result can. Each kind of card has its own:

* the pointwise card's N_min (``stats.sample_floor``; docs/guide/statistics.md);
* the family-wise card's, for a recipe chosen from M (``stats.family_sample_floor``), and the
  anytime card's, for seeds added until the card looked good (``stats.anytime_sample_floor``):
  docs/family_and_anytime.md;
* the simultaneous band's, valid at every τ at once (``stats.band_sample_floor``, with the exact
  Kolmogorov–Smirnov and the DKW bands beside it): docs/guide/stop-early.md.

Every number is exact (a search checked against the bound itself), so the output is the same on any
machine; tests/test_docs.py checks that the docs show these tables as printed.

Run: ``python bench/floors.py`` (about 10 s on 2 cores, nearly all of it the band's floors).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit.stats import (  # noqa: E402
    anytime_sample_floor,
    band_sample_floor,
    family_sample_floor,
    sample_floor,
)

FAMILY_SIZES = (1, 3, 10, 30, 100)
EPS_DELTA = ((0.1, 0.1), (0.1, 0.05), (0.05, 0.1), (0.05, 0.05))


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def family_table() -> str:
    """The family-wise floor at ε = δ = 0.1 for a recipe chosen from M."""
    return _table(["M", *map(str, FAMILY_SIZES)],
                  [["family-wise floor (ε = δ = 0.1)", *(str(family_sample_floor(0.1, 0.1, m)) for m in FAMILY_SIZES)]])


def anytime_table() -> str:
    """The fixed-N floor against the anytime floor, for four (ε, δ)."""
    return _table(["ε, δ", *(f"{e}, {d}" for e, d in EPS_DELTA)],
                  [["fixed-N floor", *(str(sample_floor(e, d)) for e, d in EPS_DELTA)],
                   ["anytime floor", *(str(anytime_sample_floor(e, d)) for e, d in EPS_DELTA)]])


def band_table() -> str:
    """The simultaneous band's floor against the pointwise card's, and the exact Kolmogorov–Smirnov
    and DKW bands' (several seconds: the band's floors are searched on the band itself)."""
    return _table(["ε = δ", "pointwise card", "band (the card's)", "exact KS band", "DKW band"],
                  [[str(e), str(sample_floor(e, e)), str(band_sample_floor(e, e)),
                    str(band_sample_floor(e, e, "exact-ks")), str(band_sample_floor(e, e, "dkw"))]
                   for e in (0.1, 0.05)])


TABLES = {
    "docs/family_and_anytime.md": (family_table, anytime_table),
    "docs/guide/stop-early.md": (band_table,),
}


def main() -> int:
    for page, tables in TABLES.items():
        print(f"## {page}\n")
        for table in tables:
            print(table() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
