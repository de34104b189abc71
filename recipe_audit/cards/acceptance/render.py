"""The acceptance card rendered: Markdown for people (:func:`to_markdown`), the terminal table
(:func:`summary_table`) and the two figures (:func:`delta_plot`, :func:`alpha_plot`), from the
typed card (:class:`~recipe_audit.cards.acceptance.document.AcceptanceCard`). Plots return a
``Figure``; only :mod:`recipe_audit.cards.acceptance.files` writes to disk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipe_audit.cards.acceptance.document import AcceptanceCard, AcceptanceCell, Diagnostic, as_card
from recipe_audit.cards.tables import md_table
from recipe_audit.stats import acceptance as gates

# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _f(x, nd: int = 4) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _ci(pair) -> str:
    return "—" if not pair or pair[0] is None else f"[{pair[0]:.4f}, {pair[1]:.4f}]"


def _statistic_text(g: str, d: Diagnostic) -> str:
    if d.status == gates.MISSING:
        return "—"
    x = d.detail
    if g == "a":
        return (f"upper end of the {x['level']:.0%} interval = {_f(d.statistic.value)} "
                f"(Δgap = {_f(x['delta_gap'])}, interval {_ci(x['ci_delta_gap'])})")
    if g == "b":
        return (f"Δgap = {_f(x['delta_gap'])}; + 2·SE_paired = {_f(x['bound_paired'])}; "
                f"+ 2·SE_indep = {_f(x['bound_indep'])}")
    if g == "c":
        return (f"ρ_AT = {_f(x['rho_AT'])} (α_T = {_f(x['alpha_T'])}, α_A = {_f(x['alpha_A'])}); "
                f"signed {x['signed_class'] or 'undefined'}, claimed {x['claimed_class']}")
    return (f"Γ_P = {_f(x['gamma_P'])}, Γ_X = {_f(x['gamma_X'])}, |Γ_X − Γ_P| = "
            f"{_f(None if x['gamma_P'] is None or x['gamma_X'] is None else abs(x['gamma_X'] - x['gamma_P']))}, "
            f"SE_comb = {_f(x['se_comb'])}")


def summary_table(card: AcceptanceCard | Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per cell with the four statuses, the verdict and Δdeploy."""
    header = ["cell", "baseline", "(a)", "(b)", "(c)", "(d)", "verdict", "Δdeploy [interval]"]
    rows = []
    for c in as_card(card).cells:
        dd = c.delta_deploy
        ddt = "—" if dd is None else f"{_f(dd.estimate)} {_ci(dd.interval)}"
        rows.append([c.label, c.baseline, *(c.statuses[g] for g in gates.GATES), c.verdict, ddt])
    return header, rows


def _cell_markdown(c: AcceptanceCell) -> list[str]:
    lines = [f"## {c.label} vs baseline {c.baseline}", "", f"**Verdict: `{c.verdict}`** — {c.verdict_reason}", ""]
    p = c.primary_baseline_gap
    lines += [f"Primary baseline gap r_D − r_E = {_f(p.gap)} (question-clustered SE {_f(p.se)}, "
              f"{p.n_questions} questions): {'installed' if p.installable else '**not installed**'}.", ""]
    diags = {g: getattr(c.diagnostics, g) for g in gates.GATES}
    trows = [[d.title, _statistic_text(g, d), d.threshold or "—", f"**{d.status}**", d.does_not_prove]
             for g, d in diags.items()]
    lines += [md_table(["diagnostic", "statistic", "threshold", "status", "what it does not prove"], trows), ""]
    lines += [f"- ({g}) {d.reason}" for g, d in diags.items()]
    a = diags["a"]
    if a.status != gates.MISSING and a.detail.get("item_level_comparison"):
        il = a.detail["item_level_comparison"]
        lines += ["", f"Item-level comparison (templates treated as independent — **too narrow, not the gate**): "
                      f"Δgap interval {_ci(il['ci_delta_gap'])} vs question-clustered {_ci(a.detail['ci_delta_gap'])}."]
    cd = diags["c"]
    if cd.status != gates.MISSING:
        x = cd.detail
        by = ", ".join(f"{b['boundary']:g} → {b['class'] or 'undefined'} ({b['status']})" for b in x["by_boundary"])
        lines += ["", f"(c) raw dot products ⟨ΔW, v_T⟩ = {_f(x['dot_T'], 6)}, ⟨ΔW, v_A⟩ = {_f(x['dot_A'], 6)}; "
                      f"class by boundary: {by}."]
        for n in x.get("notes") or ():
            lines.append(f"(c) note: {n}.")
    dd = c.delta_deploy
    if dd is not None:
        lvl = f"{dd.level:.0%} " if dd.level else ""
        lines += ["", f"Δdeploy = r_D^R − r_D^0 = {_f(dd.estimate)}, {lvl}interval {_ci(dd.interval)} "
                      f"({dd.method}; reported beside the gates, never rescues a verdict)."]
    lines += ["", "Weaker claims that survive:" if c.weaker_claims else "No weaker claim survives.", ""]
    lines += [f"- {w}" for w in c.weaker_claims]
    lines.append("")
    return lines


def to_markdown(card: AcceptanceCard | Mapping[str, Any], images: Mapping[str, str] | None = None) -> str:
    """The card for people: the verdict grid, each cell's gates (statistic, threshold, status and
    what it does not prove), weaker claims, Δdeploy, the progressive filter and the sensitivity
    table. ``card``: an :class:`AcceptanceCard` or its JSON (read with :meth:`AcceptanceCard.from_json`)."""
    card = as_card(card)
    o, src = card.options, card.source
    lines = [
        "# Acceptance card",
        "",
        f"Claim under audit: *{card.claim}*.",
        "",
        f"Primary task `{o['primary_task']}`" + (f" · cross task `{o['cross_task']}`" if o.get("cross_task") else "")
        + f" · {src['n_records']} evaluation records (digest `{src['records_digest'][:16]}`) · "
        f"{o['resamples']} question-clustered resamples, seed {o['seed']}, {o['level']:.0%} percentile intervals · "
        f"ρ_AT boundary {o['boundary']:g}.",
        "",
        "Verdicts: `full-card pass` (all four strict passes), `near miss`, `missing evidence` (nothing failed, "
        "something was not run), `undefined` (the baseline gap itself is not installed), `fail` (nothing passes). "
        "N/A is never a pass; missing is not a fail; Δdeploy never rescues a verdict.",
        "",
    ]
    header, rows = summary_table(card)
    lines += ["## Verdicts", "", md_table(header, rows), ""]
    for c in card.cells:
        lines += _cell_markdown(c)
    pf = card.progressive_filter
    lines += ["## Progressive filter", "",
              f"Of {pf[0].n_cells if pf else 0} cell(s): how many have a result (not missing, not N/A) for "
              f"every listed diagnostic, and how many pass them all strictly.", "",
              md_table(["filter", "cells with a result", "cells passing"],
                       [[r.filter, str(r.n_with_result), str(r.n_pass)] for r in pf]), ""]
    sens = [r for r in card.threshold_sensitivity if r.verdict_changes or r.status != r.status_variant]
    lines += ["## Threshold sensitivity", "",
              f"The card re-read at a {o['sensitivity_level']:.0%} interval for (a), a one-SE paired-only screen for "
              f"(b), and ρ_AT boundaries {' / '.join(f'{b:g}' for b in o['sensitivity_boundaries'])} for (c), one at a "
              f"time.", ""]
    if sens:
        lines += [md_table(["cell", "diagnostic", "re-read at", "status", "→", "verdict", "→", "verdict changes"],
                           [[r.cell, f"({r.gate})", r.variant, r.status, r.status_variant, r.verdict,
                             r.verdict_variant, "**yes**" if r.verdict_changes else "no"] for r in sens]), ""]
    else:
        lines += ["No status and no verdict changes under these re-readings.", ""]
    if images:
        lines += ["## Figures", ""]
        for title, name in images.items():
            lines += [f"![{title}]({name})", ""]
    lines += [f"---\nCard digest `{card.digest}` · created {card.created} · "
              + ", ".join(f"{k} {v}" for k, v in card.software.items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

_VERDICT_COLOURS = {gates.FULL_PASS: "#2a9d3f", gates.NEAR_MISS: "#e0a100", gates.MISSING_EVIDENCE: "#7a7a7a",
                    gates.UNDEFINED: "#9b59b6", gates.VERDICT_FAIL: "#d84a3b"}


def delta_plot(card: AcceptanceCard | Mapping[str, Any]):
    """Cells in the (Δdeploy, Δgap) plane with their intervals on both axes (gate (a)); a cell
    below the horizontal zero line reduced the gap, one left of the vertical line paid deployment
    accuracy for it. Colour = card verdict."""
    from matplotlib.figure import Figure

    card = as_card(card)

    fig = Figure(figsize=(6.5, 4.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    shown = 0
    for c in card.cells:
        a = c.diagnostics.a
        if a.status == gates.MISSING or a.detail["delta_gap"] is None:
            continue
        x, y = a.detail["delta_deploy"], a.detail["delta_gap"]
        xl, xh = a.detail["ci_delta_deploy"]
        yl, yh = a.detail["ci_delta_gap"]
        col = _VERDICT_COLOURS.get(c.verdict, "black")
        ax.errorbar([x], [y], xerr=[[x - xl], [xh - x]], yerr=[[y - yl], [yh - y]], fmt="o", color=col,
                    ecolor=col, capsize=3, ms=5)
        ax.annotate(c.label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)
        shown += 1
    ax.axhline(0, color="black", lw=0.8)
    ax.axvline(0, color="black", lw=0.8, ls=":")
    for v, col in _VERDICT_COLOURS.items():
        if any(c.verdict == v for c in card.cells):
            ax.plot([], [], "o", color=col, label=v)
    ax.set_xlabel("Δdeploy = r_D^R − r_D^0")
    ax.set_ylabel("Δgap = gap^R − gap^0 (below 0: reduction)")
    lvl = card.options["level"]
    ax.set_title(f"Cells with {lvl:.0%} question-clustered intervals" + ("" if shown else " (no held-out records)"),
                 fontsize=9)
    if shown:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def alpha_plot(card: AcceptanceCard | Mapping[str, Any]):
    """α_T against α_A per cell, with the ρ_AT boundary lines |α_A| = ρ·|α_T| (0.5, 0.6, 0.7):
    points between the lines around the α_T axis sign attack-targeted, the rest shrinkage."""
    import numpy as np
    from matplotlib.figure import Figure

    card = as_card(card)
    opts = card.options
    fig = Figure(figsize=(6.0, 4.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    pts = []
    for c in card.cells:
        d = c.diagnostics.c
        if d.status == gates.MISSING or d.detail["alpha_T"] is None or d.detail["alpha_A"] is None:
            continue
        pts.append((c.label, d.detail["alpha_T"], d.detail["alpha_A"], d.detail["claimed_class"], d.status))
    span = max([abs(v) for _, t, a, _, _ in pts for v in (t, a)] or [1.0]) * 1.15 or 1.0
    xs = np.array([-span, span])
    bounds = sorted({*opts["sensitivity_boundaries"], opts["boundary"]})
    b0 = opts["boundary"]
    ax.fill([0, span, span], [0, b0 * span, -b0 * span], color="#f2d7d5", alpha=0.6, lw=0,
            label=f"attack-targeted (ρ_AT < {b0:g})")
    ax.fill([0, -span, -span], [0, b0 * span, -b0 * span], color="#f2d7d5", alpha=0.6, lw=0)
    for b in bounds:
        main = b == opts["boundary"]
        style = dict(color="#444444" if main else "#999999", lw=1.2 if main else 0.8, ls="-" if main else "--")
        ax.plot(xs, b * xs, **style, label=f"ρ_AT = {b:g}")
        ax.plot(xs, -b * xs, **style)
    markers = {gates.SHRINKAGE: "s", gates.ATTACK_TARGETED: "^"}
    colours = {gates.PASS: "#2a9d3f", gates.FAIL: "#d84a3b", gates.NA: "#7a7a7a"}
    for label, t, a, cls, st in pts:
        ax.plot([t], [a], markers.get(cls, "o"), color=colours.get(st, "black"), ms=6)
        ax.annotate(label, (t, a), textcoords="offset points", xytext=(5, 4), fontsize=7)
    for cls, m in markers.items():
        ax.plot([], [], m, color="#555555", label=f"claimed {cls}")
    ax.axhline(0, color="black", lw=0.5)
    ax.axvline(0, color="black", lw=0.5)
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_xlabel("α_T = ⟨ΔW, v_T⟩ / ‖v_T‖")
    ax.set_ylabel("α_A = ⟨ΔW, v_A⟩ / ‖v_A‖")
    ax.set_title("Mechanism signature (green: signed class = claimed class)" if pts else "No mechanism inputs",
                 fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
