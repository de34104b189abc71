"""The card verdict of one defense/baseline pair (:class:`AcceptanceResult`), and the summaries over
many cells: the progressive filter and the threshold sensitivity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from recipe_audit.stats.acceptance.fresh import GateB
from recipe_audit.stats.acceptance.heldout import GateA
from recipe_audit.stats.acceptance.names import (
    CAVEAT,
    FAIL,
    FULL_PASS,
    GATES,
    MISSING,
    MISSING_EVIDENCE,
    NEAR_MISS,
    PASS,
    STATUSES,
    UNDEFINED,
    VERDICT_FAIL,
)
from recipe_audit.stats.acceptance.signature import GateC
from recipe_audit.stats.acceptance.transfer import GateD, Installability
from recipe_audit.stats.errors import StatsInputError


def card_verdict(statuses: Mapping[str, str], *, installable: bool = True) -> str:
    """The card verdict from the four diagnostic statuses (a key absent means ``missing``).

    Rules, first match wins:

    1. ``undefined`` — the primary baseline gap is not installable (nothing means anything);
    2. ``full-card pass`` — all four are strict passes;
    3. ``missing evidence`` — none failed, at least one is missing (N/A and pass-with-caveat are
       not failures; missing is not a failure);
    4. ``near miss`` — at least one strict pass, and at least one fail, N/A or pass-with-caveat;
    5. ``fail`` — no strict pass (N/A never counts as a pass; neither does pass-with-caveat).

    >>> card_verdict({"a": "pass", "b": "pass", "c": "pass", "d": "pass"})
    'full-card pass'
    >>> card_verdict({"a": "pass", "b": "fail", "c": "missing", "d": "n/a"})
    'near miss'
    >>> card_verdict({"a": "n/a", "b": "fail", "c": "n/a", "d": "fail"})
    'fail'
    """
    st = {g: statuses.get(g, MISSING) or MISSING for g in GATES}
    for g, s in st.items():
        if s not in STATUSES:
            raise StatsInputError(f"diagnostic ({g}) has status {s!r}, not one of {list(STATUSES)}.")
    vals = list(st.values())
    if not installable:
        return UNDEFINED
    if all(s == PASS for s in vals):
        return FULL_PASS
    if FAIL not in vals and MISSING in vals:
        return MISSING_EVIDENCE
    if PASS in vals:
        return NEAR_MISS
    return VERDICT_FAIL


@dataclass(frozen=True)
class AcceptanceResult:
    """The four diagnostics of one defense/baseline pair and the card verdict.

    A gate left as None is ``missing``. ``primary`` is the installability of the primary
    baseline gap (held-out split when it exists, else fresh); not installable → ``undefined``.
    ``missing_reasons`` optionally explains each missing gate.
    """

    primary: Installability
    a: GateA | None = None
    b: GateB | None = None
    c: GateC | None = None
    d: GateD | None = None
    missing_reasons: tuple[tuple[str, str], ...] = field(default=())

    @property
    def statuses(self) -> dict[str, str]:
        return {g: (MISSING if getattr(self, g) is None else getattr(self, g).status) for g in GATES}

    @property
    def verdict(self) -> str:
        return card_verdict(self.statuses, installable=self.primary.installable)

    def verdict_with(self, **overrides: str) -> str:
        """The verdict with some statuses replaced (``a="fail"``…): the sensitivity re-reading."""
        return card_verdict({**self.statuses, **overrides}, installable=self.primary.installable)


def acceptance(primary: Installability, *, a: GateA | None = None, b: GateB | None = None,
               c: GateC | None = None, d: GateD | None = None,
               missing_reasons: Mapping[str, str] | None = None) -> AcceptanceResult:
    """Bundle the diagnostics of one pair into an :class:`AcceptanceResult`."""
    return AcceptanceResult(primary=primary, a=a, b=b, c=c, d=d,
                            missing_reasons=tuple(sorted((missing_reasons or {}).items())))


# ---------------------------------------------------------------------------------------------
# Across many cells: the progressive filter and the threshold sensitivity
# ---------------------------------------------------------------------------------------------

#: The progressive filter: the gates of each row, which must all be strict passes.
FILTER_ROWS = (("b",), ("a",), ("a", "b"), ("b", "c"), GATES)


@dataclass(frozen=True)
class FilterRow:
    """One row of the progressive filter: of ``n_cells`` cells, ``n_with_result`` have a defined
    outcome (pass, fail or pass-with-caveat; not missing, not N/A) for every listed gate, and
    ``n_pass`` pass every listed gate strictly."""

    gates: tuple[str, ...]
    n_cells: int
    n_with_result: int
    n_pass: int


def progressive_filter(results: Sequence[AcceptanceResult]) -> tuple[FilterRow, ...]:
    """How many cells have a result and pass for (b), (a), (a)∧(b), (b)∧(c) and all four."""
    rows = []
    for gates in FILTER_ROWS:
        with_result = sum(all(r.statuses[g] in (PASS, FAIL, CAVEAT) for g in gates) for r in results)
        passing = sum(all(r.statuses[g] == PASS for g in gates) for r in results)
        rows.append(FilterRow(gates, len(results), int(with_result), int(passing)))
    return tuple(rows)


@dataclass(frozen=True)
class SensitivityRow:
    """The card of ``cell`` re-read with one diagnostic at another ``threshold``: the interval
    level for (a), the SE multiplier of the paired-only screen for (b), the ρ_AT boundary for (c)."""

    cell: str
    gate: str
    threshold: float
    status: str
    status_variant: str
    verdict: str
    verdict_variant: str

    @property
    def verdict_changes(self) -> bool:
        return self.verdict != self.verdict_variant


def threshold_sensitivity(results: Sequence[AcceptanceResult], labels: Sequence[str]) -> tuple[SensitivityRow, ...]:
    """Every cell re-read at a 68 % interval for (a), a one-SE paired-only screen for (b), and
    ρ_AT boundaries 0.5 and 0.7 for (c) — one variant at a time, the other gates unchanged.

    Returns one row per (cell, variant) whose gate was run; filter on ``verdict_changes`` for the
    list of verdicts that change.
    """
    if len(results) != len(labels):
        raise StatsInputError("give one label per result.")
    rows = []
    for res, lab in zip(results, labels, strict=True):
        base = res.verdict
        variants = []
        if res.a is not None:
            variants.append(("a", res.a.sensitivity_level, res.a.status_sensitivity))
        if res.b is not None:
            variants.append(("b", res.b.screen_multiplier, res.b.status_sensitivity))
        if res.c is not None:
            for bd in res.c.sensitivity_boundaries:
                variants.append(("c", bd, res.c.status_at(bd)))
        for gate, value, st in variants:
            rows.append(SensitivityRow(cell=lab, gate=gate, threshold=float(value), status=res.statuses[gate],
                                       status_variant=st, verdict=base,
                                       verdict_variant=res.verdict_with(**{gate: st})))
    return tuple(rows)
