"""Pure statistics of recipe cards: numpy and scipy only (pure Python for one cell).

* :mod:`.exact` — the statistics of one cell in pure Python: the bounds for one ``(k, n)``, the
  verdict, ``tail_bound``;
* :mod:`.interval` — the one interval type every result states its bounds in;
* :mod:`.checks` — the numbers a statistic of one cell takes (counts, ε, δ), checked;
* :mod:`.floors` — the exact sample floor ``N_min`` and the one floor search every other floor uses;
* :mod:`.tails` — binomial tails in pure Python and the bisection over floats the bounds use;
* :mod:`.array_checks` — the inputs of the array statistics (counts as arrays, metrics, bars), checked;
* :mod:`.options` — the audit options, declared once (:class:`~.options.AuditOptions`) and checked
  the same way at every door;
* :mod:`.bounds` — one-sided exact Clopper–Pearson bounds for arrays (NumPy and SciPy);
* :mod:`.verdicts` — the verdict strings and rules;
* :mod:`.rules` — the comparison rules (mean, median, bootstrap, mean − 2 sd, card);
* :mod:`.cell` — every statistic a card states for one cell at its bars, each computed once;
* :mod:`.split_audit` — the held-out split audit and evidence responsiveness;
* :mod:`.curtail` — curtailment: when the verdict at a planned N is already settled;
* :mod:`.band` — the simultaneous upper band on the failure curve, valid for every τ at once;
* :mod:`.family` — family-wise cards: a recipe chosen from M keeps the guarantee (Bonferroni, Holm);
* :mod:`.anytime` — the confidence sequence of an open-ended sweep, valid at every N at once.

>>> from recipe_audit.stats import tail_bound
>>> tail_bound(0, 22).verdict
'release-supported'

References: C. J. Clopper and E. S. Pearson (1934), Biometrika 26(4), 404-413.

Names are imported on first use (``recipe-audit bound`` loads :mod:`.exact` alone, not SciPy).

Inputs are checked once, at the door: each public statistic checks what it is given and hands it
to its kernel, the same name ending in ``_at`` (:func:`~.exact.tail_bound` and
:func:`~.exact.tail_bound_at`), which checks nothing; statistics call each other's kernels, and a
card calls them with the options its door checked (:func:`~.options.audit_options`).
"""

from __future__ import annotations

import importlib

_WHERE = {
    "exact": ("INSUFFICIENT", "REFUSED_SHIFT", "STRONG_UNSUPPORTED", "SUPPORTED", "UNSUPPORTED", "VERDICTS",
              "TailBound", "more_clean_reruns_needed", "tail_bound", "verdict"),
    "floors": ("sample_floor",),
    "bounds": ("clopper_pearson_lower", "clopper_pearson_upper"),
    "verdicts": ("verdict_array",),
    "band": ("BAND_METHODS", "BandBounds", "SimultaneousBand", "band_bounds", "band_coverage",
             "band_sample_floor", "simultaneous_band"),
    "curtail": ("STOP_ON", "CurtailPlan", "CurtailSimulation", "CurtailState", "curtail_determined",
                "curtail_plan", "curtail_sequence", "curtail_state", "curtailed_verdict_array",
                "simulate_curtailment"),
    "family": ("FAMILY_METHODS", "FamilyCard", "FamilyMember", "family_bounds", "family_sample_floor",
               "family_tail_bound"),
    "anytime": ("AnytimeBound", "AnytimeSequence", "anytime_bound", "anytime_sample_floor", "anytime_sequence",
                "anytime_thresholds", "stop_probabilities"),
    "errors": ("StatsInputError",),
    "interval": ("Interval",),
    "rules": ("RULES", "PracticeStatistics", "RuleDecisions", "apply_rules", "bootstrap_percentile",
              "count_failures", "decisions_at", "failure_mask", "practice_statistics"),
    "cell": ("CellStatistics", "cell_statistics"),
    "split_audit": ("DEFAULT_AUDIT_B", "AuditCell", "CellAudit", "EvidenceResponsiveness", "RuleAudit",
                    "SplitAuditResult", "evidence_responsiveness", "held_out_split_audit"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
assert len(_MODULE_OF) == sum(map(len, _WHERE.values())), "a name listed under two modules"


def __getattr__(name: str):
    """Import the submodule that defines ``name`` on first use (PEP 562)."""
    module = _MODULE_OF.get(name)
    if module is None:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return importlib.import_module(f"{__name__}.{name}")  # a submodule: stats.acceptance
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})


#: every public name, once: as :data:`_WHERE` lists them, module by module
__all__ = [name for names in _WHERE.values() for name in names]
