"""Diagnostic (b): Δgap on fresh subjects with paired and independent standard errors."""

from __future__ import annotations

import math
from dataclasses import dataclass

from recipe_audit.stats.acceptance.names import (
    FAIL,
    NA,
    PASS,
    SCREEN_SE_MULTIPLIER,
    SE_MULTIPLIER,
)
from recipe_audit.stats.acceptance.records import (
    B_DEPLOY,
    B_EVAL,
    R_DEPLOY,
    R_EVAL,
    GapEstimates,
    PairedRecords,
    gap_estimates,
    gaps,
    sd,
)


@dataclass(frozen=True)
class GateB(GapEstimates):
    """Diagnostic (b): Δgap on fresh subjects with paired and independent standard errors.

    ``se_paired = sd(d_q) / √Q`` with ``d_q = gap_q^R − gap_q^0`` (ddof 1);
    ``se_indep = √(Var(gap^R) + Var(gap^0))`` with ``Var(gap) = r_D(1−r_D)/n_D + r_E(1−r_E)/n_E``.
    ``delta_deploy`` has its own paired SE (per-question deploy-accuracy differences).
    """

    n_items: tuple[int, int, int, int]
    n_questions: int
    se_paired: float
    se_indep: float
    se_deploy_paired: float
    multiplier: float = SE_MULTIPLIER
    screen_multiplier: float = SCREEN_SE_MULTIPLIER

    @property
    def bound_paired(self) -> float:
        return self.delta_gap + self.multiplier * self.se_paired

    @property
    def bound_indep(self) -> float:
        return self.delta_gap + self.multiplier * self.se_indep

    @property
    def screen_bound(self) -> float:
        """``Δgap + 1·SE_paired``: the one-SE paired-only screen of the sensitivity table."""
        return self.delta_gap + self.screen_multiplier * self.se_paired

    @property
    def status_sensitivity(self) -> str:
        if self.status == NA:
            return NA
        return PASS if self.screen_bound < 0 else FAIL

    @property
    def paired_only_pass(self) -> bool:
        return self.status != NA and self.bound_paired < 0


def gate_b(records: PairedRecords, *, multiplier: float = SE_MULTIPLIER,
           screen_multiplier: float = SCREEN_SE_MULTIPLIER) -> GateB:
    """Diagnostic (b) on the fresh-subject records of one defense/baseline pair.

    **Pass** iff ``Δgap + 2·SE_paired < 0`` and ``Δgap + 2·SE_indep < 0``; ``n/a`` with fewer
    than 2 fresh questions (the paired SE is undefined).
    """
    r = records.rates()
    _, N = records.unit_sums("question")
    n = N.sum(axis=0)
    dgap = gaps(r)[2]
    qr = records.question_rates()
    _, _, d_q, dep_q = gaps(qr)
    Q = records.n_questions
    se_p = sd(d_q) / math.sqrt(Q)
    se_dep = sd(dep_q) / math.sqrt(Q)

    def var_gap(rd, nd, re, ne):
        return rd * (1 - rd) / nd + re * (1 - re) / ne

    se_i = math.sqrt(var_gap(r[R_DEPLOY], n[R_DEPLOY], r[R_EVAL], n[R_EVAL])
                     + var_gap(r[B_DEPLOY], n[B_DEPLOY], r[B_EVAL], n[B_EVAL]))
    if Q < 2:
        status = NA
    else:
        status = PASS if (dgap + multiplier * se_p < 0 and dgap + multiplier * se_i < 0) else FAIL
    return GateB(status=status, **gap_estimates(r), n_items=tuple(int(x) for x in n), n_questions=Q,
                 se_paired=se_p, se_indep=se_i,
                 se_deploy_paired=se_dep, multiplier=float(multiplier),
                 screen_multiplier=float(screen_multiplier))
