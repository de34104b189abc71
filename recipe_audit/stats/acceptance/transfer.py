"""Installability of a baseline gap, and diagnostic (d): cross-task transfer."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from recipe_audit.stats.acceptance.names import (
    CAVEAT,
    DEFAULT_MARGIN,
    FAIL,
    NA,
    PASS,
    SE_MULTIPLIER,
)
from recipe_audit.stats.acceptance.records import B_DEPLOY, B_EVAL, PairedRecords, gaps, sd
from recipe_audit.stats.errors import StatsInputError


@dataclass(frozen=True)
class Installability:
    """Is the baseline gap installed? ``gap^0 > k·SE(gap^0)``, with the question-clustered SE
    ``sd(gap_q^0) / √Q`` (ddof 1; templates of a question are not independent). With fewer than
    2 questions the SE is undefined and the gap does not count as installed."""

    gap: float
    se: float
    n_questions: int
    rate_eval: float
    rate_deploy: float
    multiplier: float = SE_MULTIPLIER

    @property
    def installable(self) -> bool:
        return bool(math.isfinite(self.se) and self.gap > self.multiplier * self.se)


def installability(records: PairedRecords, *, multiplier: float = SE_MULTIPLIER) -> Installability:
    """Installability of the *baseline* cell's gap in ``records`` (the defense cell is ignored)."""
    r = records.rates()
    gap_q = records.question_rates()[:, B_DEPLOY] - records.question_rates()[:, B_EVAL]
    Q = records.n_questions
    return Installability(gap=float(r[B_DEPLOY] - r[B_EVAL]), se=sd(gap_q) / math.sqrt(Q), n_questions=Q,
                          rate_eval=float(r[B_EVAL]), rate_deploy=float(r[B_DEPLOY]),
                          multiplier=float(multiplier))


@dataclass(frozen=True)
class GateD:
    """Diagnostic (d): cross-task transfer.

    ``Γ = gap^0 − gap^R`` (positive = reduction) on the primary task P and the cross task X, each
    with its paired SE ``sd(gap_q^0 − gap_q^R) / √Q``; ``SE_comb = √(SE_P² + SE_X²)``.
    """

    status: str
    gamma_P: float
    gamma_X: float
    se_P: float
    se_X: float
    installability_X: Installability
    degenerate: tuple[str, ...]
    margin: float
    restricted: bool
    n_questions_P: int
    n_questions_X: int
    multiplier: float = SE_MULTIPLIER

    @property
    def se_comb(self) -> float:
        return math.sqrt(self.se_P ** 2 + self.se_X ** 2)

    @property
    def standardised_difference(self) -> float:
        """``|Γ_X − Γ_P| / SE_comb`` (0 for equal Γ and inf for unequal ones when ``SE_comb = 0``)."""
        diff = abs(self.gamma_X - self.gamma_P)
        if self.se_comb > 0:
            return diff / self.se_comb
        return 0.0 if self.gamma_X == self.gamma_P else float("inf")

    @property
    def would_pass(self) -> bool:
        return bool(self.gamma_P > 0 and self.gamma_X > 0
                    and abs(self.gamma_X - self.gamma_P) <= self.multiplier * self.se_comb)


def _gamma(records: PairedRecords) -> tuple[float, float]:
    _, _, dgap, _ = gaps(records.rates())
    _, _, d_q, _ = gaps(records.question_rates())
    return float(-dgap), sd(d_q) / math.sqrt(records.n_questions)


def gate_d(primary: PairedRecords, cross: PairedRecords, *, restricted: bool = False,
           margin: float = DEFAULT_MARGIN, multiplier: float = SE_MULTIPLIER) -> GateD:
    """Diagnostic (d) from the primary task's and the cross task's records of one pair.

    ``n/a`` when the cross-task baseline gap is not installed (``gap_X^0 ≤ 2·SE``) or a cross-task
    baseline framing rate is within ``margin`` of 0 or 1; otherwise **pass** when ``Γ_P > 0``,
    ``Γ_X > 0`` and ``|Γ_X − Γ_P| ≤ 2·SE_comb`` (``pass-with-caveat`` instead when the cross-task
    run used a restricted recipe variant); **fail** otherwise.
    """
    m = float(margin)
    if not (0 <= m < 0.5):
        raise StatsInputError(f"the degeneracy margin must lie in [0, 0.5), got {margin!r}.")
    gp, sep = _gamma(primary)
    gx, sex = _gamma(cross)
    inst = installability(cross, multiplier=multiplier)
    degenerate = tuple(name for name, r in (("r_E^0", inst.rate_eval), ("r_D^0", inst.rate_deploy))
                       if r <= m or r >= 1 - m)
    res = GateD(status=FAIL, gamma_P=gp, gamma_X=gx, se_P=sep, se_X=sex, installability_X=inst,
                degenerate=degenerate, margin=m, restricted=bool(restricted), n_questions_P=primary.n_questions,
                n_questions_X=cross.n_questions, multiplier=float(multiplier))
    if not inst.installable or degenerate or not (math.isfinite(sep) and math.isfinite(sex)):
        status = NA
    elif res.would_pass:
        status = CAVEAT if restricted else PASS
    else:
        status = FAIL
    return replace(res, status=status)
