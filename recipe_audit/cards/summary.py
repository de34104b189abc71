"""A card for the terminal and for a run's description: the verdict table, every rule, and a
sentence wherever common practice and the card disagree."""

from __future__ import annotations

import sys
from pathlib import Path

from recipe_audit.cards.document import CardEntry, RecipeCard
from recipe_audit.cards.render import (
    GRID_HEADER,
    cell_groups,
    never_ran_sentence,
    never_ran_suffix,
    rules_table,
    shown_u,
    verdict_table,
)
from recipe_audit.cards.tables import text_table
from recipe_audit.stats.exact import REFUSED_SHIFT


def story(doc: RecipeCard) -> list[str]:
    """Sentences for the cells where common practice and the card disagree."""
    out = []
    for e in doc.cells:
        m = e.rule_statistics.mean if e.rule_statistics else None
        mean = "the mean" + (f" ({m:.3f})" if m is not None else "")
        if e.rules["mean"] and not e.rules["card"]:
            out.append(f"{e.label} at τ = {e.tau:g}: {mean} ships; the card does not: {_why_not(e)}.")
        elif e.rules["card"] and not e.rules["mean"]:
            out.append(f"{e.label} at τ = {e.tau:g}: the card ships ({e.n_failures} of {e.n_reruns} "
                       f"reruns failed, U = {shown_u(e.upper_bound, e.eps, e.verdict)} ≤ ε = {e.eps:g}) while "
                       f"{mean} does not.")
    never: dict[tuple, CardEntry] = {}
    for e in doc.cells:
        if e.never_ran:
            never.setdefault(e.cell_key, e)  # the cell's first τ
    for e in never.values():  # an interrupted sweep's seeds, counted as failures: say so, and what runs them
        out.append(f"{e.label}: {never_ran_sentence(e)}")
    curtailed = {e.label: e.curtailment for e in doc.cells if e.curtailment and e.curtailment.stopped_early}
    for label, cur in curtailed.items():  # where the curtailing sweep stopped and why
        out.append(f"{label}: curtailed after {cur.n_launched} of {cur.n_planned} planned reruns; "
                   f"{cur.sweep_reason}")
    return out


def _why_not(e: CardEntry) -> str:
    """Why the card does not ship a cell, in one clause: too few reruns, or U above ε."""
    k, n, u = e.n_failures, e.n_reruns, e.upper_bound
    failed = "none failed" if k == 0 else f"{k} failed"
    if u is None or k is None:
        return e.verdict
    if n < e.sample_floor:
        return (f"{n} reruns are fewer than the {e.sample_floor} needed to certify anything at "
                f"ε = {e.eps:g}, δ = {e.delta:g} ({failed}; {e.verdict})")
    return f"{k} of {n} reruns failed, so U = {shown_u(u, e.eps, e.verdict)} > ε = {e.eps:g} ({e.verdict})"


def print_card_summary(doc: RecipeCard, files: dict[str, Path] | None = None, stream=None) -> None:
    stream = stream or sys.stdout
    print("\nRecipe cards (" + doc.source["metric"] + f", ε = {doc.options['eps']}, "
          f"δ = {doc.options['delta']}):", file=stream)
    from recipe_audit.cards.anytime import markdown_lines as anytime_lines
    from recipe_audit.cards.family import lead_lines

    for line in anytime_lines(doc)[:1]:  # an open-ended sweep: say so before any number
        print(line.replace("**", ""), file=stream)
    for line in lead_lines(doc):  # several recipe identities: the family-wise verdicts first, and why
        print(line, file=stream)
    if lead_lines(doc):
        print("Pointwise verdicts (each valid only for a recipe fixed before the sweep):", file=stream)
    print(text_table(verdict_table(doc), GRID_HEADER), file=stream)
    for entries in cell_groups(doc).values():  # every rule, as on the card (refused cells have none)
        if entries[0].rule_statistics and entries[0].verdict != REFUSED_SHIFT:
            label = entries[0].label + f" ({entries[0].audit_set or entries[0].metric})"
            print(f"\nWhat common practice decides on the same reruns, {label}:", file=stream)
            print(text_table(*reversed(rules_table(entries))), file=stream)
    for line in story(doc):
        print("  " + line, file=stream)
    if files:
        print(f"Card: {files['markdown']}", file=stream)
        hists = [str(p) for k, p in files.items() if k.startswith("hist_")]
        if hists:
            print("Histogram: " + ", ".join(hists), file=stream)


def summary_markdown(docs: list[RecipeCard]) -> str:
    """The verdicts of a sweep's cards as a short Markdown table: the sweep run's description."""
    lines = []
    for doc in docs:
        o = doc.options
        from recipe_audit.cards.family import lead_lines

        lines += [line for line in lead_lines(doc, markdown=True) if not line.startswith("## ")]
        lines += [f"**recipe_audit card** on `{doc.source['metric']}` (ε = {o['eps']:g}, δ = {o['delta']:g})", "",
                  "| recipe | τ | failures / N | U | verdict |", "|---|---|---|---|---|"]
        for e in doc.cells:
            u = "" if e.upper_bound is None else shown_u(e.upper_bound, e.eps, e.verdict)
            lines.append(f"| {str(e.label).replace('|', '/')} | {e.tau:g} | {e.n_failures}/{e.n_reruns}"
                         f"{never_ran_suffix(e)} "
                         f"| {u} | **{e.verdict}** |")
        lines.append("")
    return "\n".join(lines)
