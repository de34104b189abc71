"""The acceptance card built from the statistics' result objects
(:mod:`recipe_audit.stats.acceptance`): :func:`build_card` turns them into an
:class:`~recipe_audit.cards.acceptance.document.AcceptanceCard`. All the card's wording (titles,
what each diagnostic does not prove, verdict reasons, weaker claims, labels) is written here and
in :mod:`.diagnostics` (each diagnostic's reason and numbers), not in the statistics.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from recipe_audit.cards.acceptance.diagnostics import card_number, gate_json, installability_json
from recipe_audit.cards.acceptance.document import (
    CARD_KIND,
    CLAIM,
    DIAGNOSTIC_KEYS,
    SCHEMA_VERSION,
    AcceptanceCard,
    AcceptanceCardError,
    AcceptanceCell,
    BaselineGap,
    CrossTask,
    DeltaDeploy,
    Diagnostic,
    Diagnostics,
    FilterEntry,
    SensitivityEntry,
    Statistic,
    freeze,
    validate,
)
from recipe_audit.cards.build import software_versions
from recipe_audit.stats import acceptance as gates
from recipe_audit.stats.interval import Interval

GATE_TITLES = {
    "a": "(a) question-clustered bootstrap, held-out split",
    "b": "(b) fresh subjects",
    "c": "(c) mechanism signature ρ_AT",
    "d": "(d) cross-task transfer",
}

DOES_NOT_PROVE = {
    "a": "that the reduction survives new subjects (the held-out questions share the training subjects), "
         "nor why the gap shrank",
    "b": "which mechanism shrank the gap: a generic shrinkage of all framing sensitivity passes too",
    "c": "that behaviour changed: ρ_AT is a first-order signature on the base model's gradients at the "
         "calibration items, not a causal account",
    "d": "that the defense generalises beyond the two tasks measured",
}


def filter_label(gate_names: Sequence[str]) -> str:
    """The progressive filter's row label: ``(a) ∧ (b)``, or ``all four``.

    >>> filter_label(("a", "b")), filter_label(("a", "b", "c", "d"))
    ('(a) ∧ (b)', 'all four')
    """
    if tuple(gate_names) == gates.GATES:
        return "all four"
    return " ∧ ".join(f"({g})" for g in gate_names)


def sensitivity_variant(gate: str, threshold: float) -> str:
    """How the threshold-sensitivity table names a re-reading of diagnostic ``gate`` at ``threshold``.

    >>> sensitivity_variant("a", 0.68), sensitivity_variant("b", 1.0), sensitivity_variant("c", 0.5)
    ('68% interval', '1-SE paired-only screen', 'boundary 0.5')
    """
    if gate == "a":
        return f"{threshold:.0%} interval"
    if gate == "b":
        return f"{threshold:g}-SE paired-only screen"
    return f"boundary {threshold:g}"


# ---------------------------------------------------------------------------------------------
# Building the card
# ---------------------------------------------------------------------------------------------


def _missing(g: str, reason: str) -> Diagnostic:
    return Diagnostic(status=gates.MISSING, statistic=None, threshold=None, reason=f"Not run: {reason.rstrip('.')}.",
                      title=GATE_TITLES[g], does_not_prove=DOES_NOT_PROVE[g])


def _diagnostic(g: str, gate, reasons: Mapping[str, str], inputs: Mapping[str, Any] | None) -> Diagnostic:
    if gate is None:
        return _missing(g, reasons.get(g, "not run"))
    d = gate_json(gate)
    return Diagnostic(status=d["status"], statistic=Statistic.from_json(d["statistic"]), threshold=d["threshold"],
                      reason=d["reason"], title=GATE_TITLES[g], does_not_prove=DOES_NOT_PROVE[g],
                      detail=freeze({k: v for k, v in d.items() if k not in DIAGNOSTIC_KEYS}),
                      inputs=freeze(dict(inputs)) if g == "c" and inputs else None)


def weaker_claims(res: gates.AcceptanceResult, *, cross_task: str | None = None) -> list[str]:
    """The claims that survive even when the full card does not pass (none when undefined)."""
    if not res.primary.installable:
        return []
    out = []
    if res.a is not None and res.a.status == gates.PASS:
        lo, hi = res.a.ci_gap
        out.append(f"gap reduction statistically reliable on the held-out split (a): Δgap = {res.a.delta_gap:.4f}, "
                   f"{res.a.level:.0%} question-clustered interval [{lo:.4f}, {hi:.4f}] below 0")
    if res.b is not None:
        if res.b.status == gates.PASS:
            out.append(f"gap reduction holds on fresh subjects under both paired and independent standard errors "
                       f"(b): Δgap = {res.b.delta_gap:.4f}")
        elif res.b.paired_only_pass:
            out.append(f"gap reduction on fresh subjects under the paired standard error only (the paired half of "
                       f"(b)): Δgap + {res.b.multiplier:g}·SE_paired = {res.b.bound_paired:.4f} < 0")
    if res.c is not None and res.c.status == gates.PASS:
        out.append(f"the update's parameter-space signature matches the claimed {res.c.claimed_class} mechanism "
                   f"(c): ρ_AT = {res.c.signature.rho:.4f}")
    if res.d is not None and res.d.status in (gates.PASS, gates.CAVEAT):
        where = f" to task '{cross_task}'" if cross_task else ""
        extra = ", with a restricted recipe variant (caveat)" if res.d.status == gates.CAVEAT else ""
        out.append(f"the reduction transfers{where} with a comparable size (d){extra}: Γ_P = {res.d.gamma_P:.4f}, "
                   f"Γ_X = {res.d.gamma_X:.4f}")
    return out


def _verdict_reason(res: gates.AcceptanceResult) -> str:
    st = res.statuses
    v = res.verdict
    names = lambda pred: ", ".join(f"({g})" for g in gates.GATES if pred(st[g]))  # noqa: E731
    if v == gates.UNDEFINED:
        p = res.primary
        return (f"The primary baseline gap {p.gap:.4f} is not installed (not above {p.multiplier:g}·SE = "
                f"{p.multiplier * p.se:.4f}), so no diagnostic means anything.")
    if v == gates.FULL_PASS:
        return "All four diagnostics pass strictly."
    if v == gates.MISSING_EVIDENCE:
        return f"No diagnostic failed, but {names(lambda s: s == gates.MISSING)} {'is' if list(st.values()).count(gates.MISSING) == 1 else 'are'} missing."
    if v == gates.NEAR_MISS:
        parts = []
        for label, s in (("fail", gates.FAIL), ("N/A", gates.NA), ("passed with caveat", gates.CAVEAT), ("missing", gates.MISSING)):
            got = names(lambda x, s=s: x == s)
            if got:
                parts.append(f"{got} {label}")
        return f"{names(lambda s: s == gates.PASS)} pass; " + "; ".join(parts) + "."
    return "No diagnostic passes strictly (N/A and pass-with-caveat do not count as passes)."


def _delta_deploy(res: gates.AcceptanceResult) -> DeltaDeploy | None:
    if res.a is not None:
        return DeltaDeploy(estimate=card_number(res.a.delta_deploy), interval=Interval(*(card_number(x) for x in res.a.ci_deploy)),
                           level=res.a.level, method="question-clustered paired bootstrap, held-out split")
    if res.b is not None:
        se = res.b.se_deploy_paired
        lo, hi = res.b.delta_deploy - 2 * se, res.b.delta_deploy + 2 * se
        return DeltaDeploy(estimate=card_number(res.b.delta_deploy), interval=Interval(card_number(lo), card_number(hi)), level=None,
                           method="fresh split, ± 2 paired standard errors (no held-out records)")
    return None


def _baseline_gap(inst: gates.Installability) -> BaselineGap:
    return BaselineGap(**installability_json(inst))


def cell_card(pair, res: gates.AcceptanceResult, *, task: str, cross_task: str | None = None,
              mechanism_inputs: Mapping[str, Any] | None = None) -> AcceptanceCell:
    """One pair's card: diagnostics a–d (each with status, statistic, threshold, reason and what it
    does not prove), the verdict and its reason, the surviving weaker claims, Δdeploy."""
    reasons = dict(res.missing_reasons)
    diags = Diagnostics(**{g: _diagnostic(g, getattr(res, g), reasons, mechanism_inputs) for g in gates.GATES})
    return AcceptanceCell(
        label=pair.label or pair.defense,
        defense=pair.defense,
        baseline=pair.baseline,
        task=task,
        cross=None if cross_task is None else CrossTask(task=cross_task, defense=pair.cross_defense,
                                                        baseline=pair.cross_baseline,
                                                        restricted_variant=bool(pair.restricted)),
        primary_baseline_gap=_baseline_gap(res.primary),
        diagnostics=diags,
        verdict=res.verdict,
        verdict_reason=_verdict_reason(res),
        weaker_claims=tuple(weaker_claims(res, cross_task=cross_task)),
        delta_deploy=_delta_deploy(res),
    )


# the packages whose versions an acceptance card records (those installed), in this order
ACCEPTANCE_CARD_PACKAGES = ("recipe_audit", "numpy", "scipy", "pandas", "torch", "transformers", "peft", "mlflow")


def build_card(pairs: Sequence, results: Sequence[gates.AcceptanceResult], *, options: Mapping[str, Any],
               source: Mapping[str, Any], mechanism_inputs: Mapping[str, Any] | None = None,
               created: str | None = None) -> AcceptanceCard:
    """The acceptance card (its JSON validated) for ``pairs`` and their ``results``; ``created``
    defaults to now (UTC, seconds)."""
    if not pairs or len(pairs) != len(results):
        raise AcceptanceCardError("An acceptance card needs one result per defense/baseline pair, and at least one.")
    mechanism_inputs = mechanism_inputs or {}
    task, cross = options["primary_task"], options.get("cross_task")
    cells = tuple(cell_card(p, r, task=task, cross_task=cross, mechanism_inputs=mechanism_inputs.get(p.defense))
                  for p, r in zip(pairs, results, strict=True))
    labels = [c.label for c in cells]
    card = AcceptanceCard(
        schema_version=SCHEMA_VERSION,
        kind=CARD_KIND,
        claim=CLAIM,
        created=created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        software=freeze(software_versions(ACCEPTANCE_CARD_PACKAGES)),
        source=freeze(dict(source)),
        options=freeze(dict(options)),
        cells=cells,
        progressive_filter=tuple(FilterEntry(filter=filter_label(r.gates), gates=tuple(r.gates), n_cells=r.n_cells,
                                             n_with_result=r.n_with_result, n_pass=r.n_pass)
                                 for r in gates.progressive_filter(results)),
        threshold_sensitivity=tuple(SensitivityEntry(cell=r.cell, gate=r.gate,
                                                     variant=sensitivity_variant(r.gate, r.threshold),
                                                     status=r.status, status_variant=r.status_variant,
                                                     verdict=r.verdict, verdict_variant=r.verdict_variant)
                                    for r in gates.threshold_sensitivity(results, labels)),
        digest="",
    )
    card = replace(card, digest=card.content_digest())
    validate(card.to_json())
    return card
