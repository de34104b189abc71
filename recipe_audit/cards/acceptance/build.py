"""The acceptance card built from the statistics' result objects
(:mod:`recipe_audit.stats.acceptance`): :func:`build_card` turns them into an
:class:`~recipe_audit.cards.acceptance.document.AcceptanceCard`. All the card's wording (titles,
thresholds, reasons, what each diagnostic does not prove, weaker claims, labels) is written here,
not in the statistics.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

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
from recipe_audit.cards.jsontext import json_number
from recipe_audit.stats import acceptance as gates

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

ITEM_LEVEL_LABEL = "item-level resampling (templates treated as independent): too narrow, not the gate"

#: Why ρ_AT is undefined, in the card's words (keys: :data:`recipe_audit.stats.acceptance.UNDEFINED_CAUSES`).
UNDEFINED_TEXT = {
    gates.ZERO_TASK_GRADIENT: "the task gradient v_T is zero on the slice, so α_T and ρ_AT are undefined",
    gates.ZERO_ATTACK_GRADIENT: "the attack gradient v_A is zero on the slice, so α_A and ρ_AT are undefined",
    gates.NOT_FINITE: "α_T or α_A is not a finite number, so ρ_AT is undefined",
    gates.ZERO_UPDATE: "the update ΔW is zero on the slice, so α_T = 0 and ρ_AT is undefined",
    gates.ORTHOGONAL_TO_TASK: "α_T = 0 (the update is orthogonal to the task gradient), so ρ_AT is undefined",
}


def _num(x):
    """The acceptance card's JSON number: always a float (:func:`~recipe_audit.cards.jsontext.json_number`
    of ``float(x)``), None for None, NaN and ±inf."""
    return None if x is None else json_number(float(x))


def _pair(x) -> list | None:
    if x is None:
        return None
    return [_num(x[0]), _num(x[1])]


# ---------------------------------------------------------------------------------------------
# The statistics' result objects in the card's words
# ---------------------------------------------------------------------------------------------


def undefined_text(cause: str | None) -> str | None:
    """The card's sentence for why ρ_AT is undefined (None when it is defined)."""
    return None if cause is None else UNDEFINED_TEXT[cause]


def _rates_json(r) -> dict:
    return {"baseline": {"eval": _num(r[0]), "deploy": _num(r[1])},
            "defense": {"eval": _num(r[2]), "deploy": _num(r[3])}}


def _estimates_json(g) -> dict:
    """The point estimates diagnostics (a) and (b) both report: Δgap, Δdeploy, both gaps, the rates."""
    return {"delta_gap": _num(g.delta_gap), "delta_deploy": _num(g.delta_deploy),
            "gap_baseline": _num(g.gap_baseline), "gap_defense": _num(g.gap_defense),
            "rates": _rates_json(g.rates)}


def _reason_a(g: gates.GateA) -> str:
    lo, hi = g.ci_gap
    verb = "is below 0" if g.status == gates.PASS else "is not below 0"
    return (f"the upper end of the {g.level:.0%} question-clustered interval of Δgap "
            f"[{lo:.4f}, {hi:.4f}] {verb} ({g.n_questions} questions, {g.B} resamples).")


def _reason_b(g: gates.GateB) -> str:
    if g.status == gates.NA:
        return (f"only {g.n_questions} fresh question(s): the paired standard error needs at least 2, "
                f"so the diagnostic is undefined.")
    m = f"{g.multiplier:g}"
    p = "<" if g.bound_paired < 0 else "≥"
    i = "<" if g.bound_indep < 0 else "≥"
    return (f"Δgap + {m}·SE_paired = {g.bound_paired:.4f} {p} 0 and Δgap + {m}·SE_indep = "
            f"{g.bound_indep:.4f} {i} 0 on {g.n_questions} fresh questions.")


def _reason_c(g: gates.GateC) -> str:
    und = undefined_text(g.signature.undefined)
    if und is not None:
        # capitalise a leading Latin letter only: "α_T" must not become the Greek capital "Α_T"
        return (und[0].upper() if und[0].isascii() else und[0]) + und[1:] + "."
    rho = g.signature.rho
    rel = "<" if rho < g.boundary else "≥"
    return (f"ρ_AT = {rho:.4f} {rel} {g.boundary:g} signs the update as {g.signed_class}; "
            f"the claimed class is {g.claimed_class}.")


def _reason_d(g: gates.GateD) -> str:
    inst = g.installability_X
    if not inst.installable:
        return (f"N/A: the cross-task baseline gap {inst.gap:.4f} is not installed "
                f"(not above {inst.multiplier:g}·SE = {inst.multiplier * inst.se:.4f}).")
    if not (math.isfinite(g.se_P) and math.isfinite(g.se_X)):
        return "N/A: a paired standard error needs at least 2 questions on each task."
    if g.degenerate:
        return (f"N/A: the cross-task baseline rate(s) {', '.join(g.degenerate)} lie within "
                f"{g.margin:g} of 0 or 1 (degenerate).")
    parts = f"Γ_P = {g.gamma_P:.4f}, Γ_X = {g.gamma_X:.4f}, |Γ_X − Γ_P| = " \
            f"{abs(g.gamma_X - g.gamma_P):.4f} vs {g.multiplier:g}·SE_comb = " \
            f"{g.multiplier * g.se_comb:.4f}"
    if g.status == gates.CAVEAT:
        return parts + "; it would pass, but the cross-task run used a restricted recipe variant."
    return parts + ("; the reduction transfers." if g.status == gates.PASS else "; the reduction does not transfer.")


def gate_reason(gate) -> str:
    """The card's one-sentence reason for a diagnostic's status (a :class:`~recipe_audit.stats.acceptance.GateA`,
    ``GateB``, ``GateC`` or ``GateD``)."""
    for cls, fn in ((gates.GateA, _reason_a), (gates.GateB, _reason_b), (gates.GateC, _reason_c),
                    (gates.GateD, _reason_d)):
        if isinstance(gate, cls):
            return fn(gate)
    raise TypeError(f"not a diagnostic result: {type(gate).__name__}")


def installability_json(inst: gates.Installability) -> dict:
    """A baseline gap's installability as the card writes it (``primary_baseline_gap``, ``cross_baseline``)."""
    return {"gap": _num(inst.gap), "se": _num(inst.se), "n_questions": inst.n_questions,
            "rate_eval": _num(inst.rate_eval), "rate_deploy": _num(inst.rate_deploy),
            "se_multiplier": inst.multiplier, "installable": inst.installable}


def signature_json(s: gates.MechanismSignature) -> dict:
    """The mechanism signature's fields of diagnostic (c) in the card."""
    return {
        "alpha_T": _num(s.alpha_T), "alpha_A": _num(s.alpha_A), "rho_AT": _num(s.rho),
        "dot_T": _num(s.dot_T), "dot_A": _num(s.dot_A), "norm_v_T": _num(s.norm_T),
        "norm_v_A": _num(s.norm_A), "norm_update": _num(s.norm_update),
        "n_elements": s.n_elements, "source": s.source, "undefined": undefined_text(s.undefined),
        "per_parameter": [{"name": n, "numel": int(k), "dot_T": _num(t), "dot_A": _num(a)}
                          for n, k, t, a in s.per_parameter],
    }


def _json_a(g: gates.GateA) -> dict:
    return {
        "status": g.status,
        "statistic": {"name": "upper end of the Δgap interval", "value": _num(g.ci_gap[1])},
        "threshold": "< 0",
        "reason": _reason_a(g),
        **_estimates_json(g),
        "ci_delta_gap": _pair(g.ci_gap),
        "ci_delta_deploy": _pair(g.ci_deploy),
        "level": g.level,
        "sensitivity": {"level": g.sensitivity_level, "ci_delta_gap": _pair(g.ci_gap_sensitivity),
                        "status": g.status_sensitivity},
        "item_level_comparison": None if g.item_ci_gap is None else {
            "label": ITEM_LEVEL_LABEL,
            "ci_delta_gap": _pair(g.item_ci_gap), "ci_delta_deploy": _pair(g.item_ci_deploy),
            "n_units": g.item_n_units},
        "resamples": g.B,
        "seed": g.seed,
        "rng": g.rng,
        "n_questions": g.n_questions,
        "n_items": g.n_items,
        "n_nan_resamples": g.n_nan_resamples,
    }


def _json_b(g: gates.GateB) -> dict:
    return {
        "status": g.status,
        "statistic": {"name": f"max(Δgap + {g.multiplier:g}·SE_paired, Δgap + {g.multiplier:g}·SE_indep)",
                      "value": _num(max(g.bound_paired, g.bound_indep))},
        "threshold": "< 0 (both)",
        "reason": _reason_b(g),
        **_estimates_json(g),
        "n_items": {"baseline": {"eval": g.n_items[0], "deploy": g.n_items[1]},
                    "defense": {"eval": g.n_items[2], "deploy": g.n_items[3]}},
        "n_questions": g.n_questions,
        "se_paired": _num(g.se_paired),
        "se_indep": _num(g.se_indep),
        "bound_paired": _num(g.bound_paired),
        "bound_indep": _num(g.bound_indep),
        "se_multiplier": g.multiplier,
        "se_delta_deploy_paired": _num(g.se_deploy_paired),
        "sensitivity": {"screen": f"Δgap + {g.screen_multiplier:g}·SE_paired < 0",
                        "bound": _num(g.screen_bound), "status": g.status_sensitivity},
    }


def _json_c(g: gates.GateC) -> dict:
    bounds = sorted({*g.sensitivity_boundaries, g.boundary})
    return {
        "status": g.status,
        "statistic": {"name": "ρ_AT", "value": _num(g.signature.rho)},
        "threshold": f"attack-targeted iff ρ_AT < {g.boundary:g}; pass iff the signed class is the claimed one",
        "reason": _reason_c(g),
        "claimed_class": g.claimed_class,
        "signed_class": g.signed_class,
        "boundary": g.boundary,
        **signature_json(g.signature),
        "by_boundary": [{"boundary": b, "class": g.class_at(b), "status": g.status_at(b)} for b in bounds],
        "notes": list(g.notes),
    }


def _json_d(g: gates.GateD) -> dict:
    return {
        "status": g.status,
        "statistic": {"name": "|Γ_X − Γ_P| / SE_comb", "value": _num(g.standardised_difference)},
        "threshold": f"Γ_P > 0, Γ_X > 0 and |Γ_X − Γ_P| ≤ {g.multiplier:g}·SE_comb; cross-task baseline "
                     f"gap installed and framing rates not within {g.margin:g} of 0 or 1",
        "reason": _reason_d(g),
        "gamma_P": _num(g.gamma_P), "gamma_X": _num(g.gamma_X),
        "se_P": _num(g.se_P), "se_X": _num(g.se_X), "se_comb": _num(g.se_comb),
        "cross_baseline": installability_json(g.installability_X),
        "degenerate": list(g.degenerate), "degenerate_margin": g.margin,
        "restricted_variant": g.restricted,
        "n_questions_P": g.n_questions_P, "n_questions_X": g.n_questions_X,
    }


def gate_json(gate) -> dict:
    """A diagnostic's result as the card's JSON (status, statistic, threshold, reason and its
    numbers; the title and what it does not prove are added by the cell)."""
    for cls, fn in ((gates.GateA, _json_a), (gates.GateB, _json_b), (gates.GateC, _json_c), (gates.GateD, _json_d)):
        if isinstance(gate, cls):
            return fn(gate)
    raise TypeError(f"not a diagnostic result: {type(gate).__name__}")


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
        return DeltaDeploy(estimate=_num(res.a.delta_deploy), interval=tuple(_num(x) for x in res.a.ci_deploy),
                           level=res.a.level, method="question-clustered paired bootstrap, held-out split")
    if res.b is not None:
        se = res.b.se_deploy_paired
        lo, hi = res.b.delta_deploy - 2 * se, res.b.delta_deploy + 2 * se
        return DeltaDeploy(estimate=_num(res.b.delta_deploy), interval=(_num(lo), _num(hi)), level=None,
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
