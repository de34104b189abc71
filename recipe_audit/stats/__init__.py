"""Pure statistics of recipe cards (SPEC Part 1, sections 1.3–1.8); numpy and scipy only.

* :mod:`.bounds` — one-sided exact Clopper–Pearson bounds, the sample floor ``N_min``, ``tail_bound``;
* :mod:`.verdicts` — the SPEC 1.5 verdict strings and rules;
* :mod:`.rules` — the SPEC 1.6 comparison rules (mean, median, bootstrap, mean − 2 sd, card);
* :mod:`.split_audit` — the SPEC 1.8 held-out split audit and evidence responsiveness;
* :mod:`.curtail` — SPEC 1.10 curtailment: when the verdict at a planned N is already settled;
* :mod:`.band` — SPEC 1.10 simultaneous upper band on the failure curve, valid for every τ at once.

>>> from recipe_audit.stats import tail_bound
>>> tail_bound(0, 22).verdict
'release-supported'

References: C. J. Clopper and E. S. Pearson (1934), Biometrika 26(4), 404-413.
"""

from __future__ import annotations

from .band import (
    BAND_METHODS,
    BandBounds,
    SimultaneousBand,
    band_bounds,
    band_coverage,
    band_sample_floor,
    simultaneous_band,
)
from .bounds import (
    TailBound,
    clopper_pearson_lower,
    clopper_pearson_upper,
    more_clean_reruns_needed,
    sample_floor,
    tail_bound,
)
from .curtail import (
    STOP_ON,
    CurtailPlan,
    CurtailSimulation,
    CurtailState,
    curtail_determined,
    curtail_plan,
    curtail_sequence,
    curtail_state,
    curtailed_verdict_array,
    simulate_curtailment,
)
from .errors import StatsInputError
from .rules import (
    RULES,
    RuleDecisions,
    apply_rules,
    bootstrap_percentile,
    count_failures,
    failure_mask,
)
from .split_audit import (
    DEFAULT_AUDIT_B,
    AuditCell,
    CellAudit,
    EvidenceResponsiveness,
    RuleAudit,
    SplitAuditResult,
    evidence_responsiveness,
    held_out_split_audit,
)
from .verdicts import (
    INSUFFICIENT,
    REFUSED_SHIFT,
    STRONG_UNSUPPORTED,
    SUPPORTED,
    UNSUPPORTED,
    VERDICTS,
    verdict,
    verdict_array,
)

__all__ = [
    "BAND_METHODS",
    "STOP_ON",
    "BandBounds",
    "CurtailPlan",
    "CurtailSimulation",
    "CurtailState",
    "SimultaneousBand",
    "band_bounds",
    "band_coverage",
    "band_sample_floor",
    "curtail_plan",
    "curtail_sequence",
    "curtail_state",
    "curtail_determined",
    "curtailed_verdict_array",
    "simulate_curtailment",
    "simultaneous_band",
    "DEFAULT_AUDIT_B",
    "INSUFFICIENT",
    "REFUSED_SHIFT",
    "RULES",
    "STRONG_UNSUPPORTED",
    "SUPPORTED",
    "UNSUPPORTED",
    "VERDICTS",
    "AuditCell",
    "CellAudit",
    "EvidenceResponsiveness",
    "RuleAudit",
    "RuleDecisions",
    "SplitAuditResult",
    "StatsInputError",
    "TailBound",
    "apply_rules",
    "bootstrap_percentile",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "count_failures",
    "evidence_responsiveness",
    "failure_mask",
    "held_out_split_audit",
    "more_clean_reruns_needed",
    "sample_floor",
    "tail_bound",
    "verdict",
    "verdict_array",
]
